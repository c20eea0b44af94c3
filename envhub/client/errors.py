"""gRPC errors -> `EnvhubError`, and which errors a retry may fix."""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from envhub.core.errors import EnvhubError

RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE})
"""Codes worth retrying, and only for idempotent calls."""


_CODES = {code.value[0]: code for code in grpc.StatusCode}


def from_status(status: status_pb2.Status) -> EnvhubError:
    """The `EnvhubError` of a `google.rpc.Status` (a SessionStream error, or a unary call's details)."""
    reason, metadata = "", {}
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason, metadata = info.reason, dict(info.metadata)
    return EnvhubError(_CODES.get(status.code, grpc.StatusCode.UNKNOWN), status.message, reason, metadata)


def from_rpc_error(error: grpc.RpcError) -> EnvhubError:
    """An `EnvhubError` with the code, message, and ErrorInfo reason/metadata of a failed call."""
    status = rpc_status.from_call(error)
    if status is not None:
        return from_status(status)
    return EnvhubError(error.code(), error.details() or "")


def backoff_s(attempt: int, base: float = 0.1, cap: float = 2.0) -> float:
    """Exponential backoff before retry number `attempt` (0-based)."""
    return float(min(cap, base * 2**attempt))
