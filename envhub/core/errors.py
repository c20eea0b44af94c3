"""One exception type for envhub, raised by servers and re-raised by clients.

`EnvhubError` carries a gRPC status code, a message and a stable machine-readable
`reason` (the `google.rpc.ErrorInfo.reason` on the wire). It pickles, so it can
cross process boundaries (server workers, Ray actors).
"""

from __future__ import annotations

from collections.abc import Mapping

import grpc


class EnvhubError(Exception):
    """An error with a gRPC status code and a stable reason string."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        reason: str = "",
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or code.name
        self.metadata: dict[str, str] = dict(metadata or {})

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.code, self.message, self.reason, self.metadata))

    def __str__(self) -> str:
        return f"{self.code.name} ({self.reason}): {self.message}"


def invalid_argument(message: str, reason: str = "INVALID_ARGUMENT", **metadata: str) -> EnvhubError:
    """The request is wrong whatever the server state."""
    return EnvhubError(grpc.StatusCode.INVALID_ARGUMENT, message, reason, metadata)


def not_found(message: str, reason: str = "NOT_FOUND", **metadata: str) -> EnvhubError:
    """The named resource (session, task, environment) does not exist."""
    return EnvhubError(grpc.StatusCode.NOT_FOUND, message, reason, metadata)


def failed_precondition(message: str, reason: str = "FAILED_PRECONDITION", **metadata: str) -> EnvhubError:
    """The system is not in the state the call needs."""
    return EnvhubError(grpc.StatusCode.FAILED_PRECONDITION, message, reason, metadata)


def resource_exhausted(message: str, reason: str = "RESOURCE_EXHAUSTED", **metadata: str) -> EnvhubError:
    """A limit (sessions, sizes) was reached."""
    return EnvhubError(grpc.StatusCode.RESOURCE_EXHAUSTED, message, reason, metadata)


def unavailable(message: str, reason: str = "UNAVAILABLE", **metadata: str) -> EnvhubError:
    """The server cannot serve the call now (draining, worker lost); retry elsewhere."""
    return EnvhubError(grpc.StatusCode.UNAVAILABLE, message, reason, metadata)


def unsupported(message: str, **metadata: str) -> EnvhubError:
    """The environment does not support the call (no expert, no admissible actions): UNIMPLEMENTED."""
    return EnvhubError(grpc.StatusCode.UNIMPLEMENTED, message, "UNSUPPORTED", metadata)


def draining() -> EnvhubError:
    """The server got SIGTERM and refuses new calls; retry on another replica."""
    return unavailable("the server is draining (shutting down); retry on another replica", "DRAINING")
