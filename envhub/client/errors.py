"""gRPC errors -> `EnvhubError`, and which errors a retry may fix."""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from envhub.core.errors import EnvhubError

RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE})
"""Codes worth retrying, and only for idempotent calls."""


def from_rpc_error(error: grpc.RpcError) -> EnvhubError:
    """An `EnvhubError` with the code, message, and ErrorInfo reason/metadata of a failed call."""
    code: grpc.StatusCode = error.code()
    message: str = error.details() or ""
    reason, metadata = "", {}
    status = rpc_status.from_call(error)
    if status is not None:
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                reason, metadata = info.reason, dict(info.metadata)
    return EnvhubError(code, message, reason, metadata)


def backoff_s(attempt: int, base: float = 0.1, cap: float = 2.0) -> float:
    """Exponential backoff before retry number `attempt` (0-based)."""
    return float(min(cap, base * 2**attempt))
