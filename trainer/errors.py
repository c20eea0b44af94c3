"""The trainer's own exceptions: plain `ValueError` subclasses, independent of envhub's wire errors.

Each carries a short machine-readable `reason` (e.g. `UNKNOWN_OBJECTIVE`) next to its message, so
callers and tests can tell failures apart without parsing text.
"""

from __future__ import annotations


class TrainerError(ValueError):
    """Base class of every error the trainer raises for bad input or configuration."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


class ObjectiveError(TrainerError):
    """An objective cannot run as asked: unknown name, bad hyperparameter, missing teacher log-probs."""


class BatchError(TrainerError):
    """A `TokenBatch` violates its contract; `field` names the offending tensor."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message, reason="INVALID_TOKEN_BATCH")
        self.field = field
