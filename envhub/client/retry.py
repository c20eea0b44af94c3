"""The one retry policy of every client transport: which failures to retry, and jittered backoff."""

from __future__ import annotations

import random
from dataclasses import dataclass

import grpc

from envhub.client.calls import Retry
from envhub.core.errors import EnvhubError

LOST = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
"""Codes after which a call may or may not have been applied: a keyed call is retried on them."""
FINAL = frozenset({"SESSION_LOST", "DRAINING"})
"""Reasons no retry on the same server can change (the session is gone there; the server is leaving)."""


@dataclass(frozen=True)
class RetryPolicy:
    """Up to `attempts` tries; before try n+1 a random delay in [0, min(cap, base * 2**n)] ("full jitter")."""

    attempts: int = 4
    base_s: float = 0.1
    cap_s: float = 2.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.base_s < 0 or self.cap_s < 0:
            raise ValueError("a retry policy needs attempts >= 1 and non-negative delays")

    def should_retry(self, retry: Retry, error: EnvhubError, attempt: int) -> bool:
        """Whether a call of class `retry` that failed with `error` on try `attempt` (0-based) goes again."""
        if attempt + 1 >= self.attempts or error.reason in FINAL:
            return False
        if retry is Retry.IDEMPOTENT:
            return error.code == grpc.StatusCode.UNAVAILABLE
        if retry is Retry.KEYED:
            return error.code in LOST
        return False

    def delay_s(self, attempt: int) -> float:
        """Seconds to wait before the try after `attempt` (0-based)."""
        return random.uniform(0.0, min(self.cap_s, self.base_s * 2**attempt))


DEFAULT_POLICY = RetryPolicy()
NO_RETRY = RetryPolicy(attempts=1)
