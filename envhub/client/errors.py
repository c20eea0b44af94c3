"""gRPC errors -> `EnvhubError`, and which errors a retry may fix."""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from envhub.core.errors import EnvhubError
from envhub.v1 import envhub_pb2 as pb

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


_CODES = {code.value[0]: code for code in grpc.StatusCode}


def from_stream_error(error: pb.StreamError) -> EnvhubError:
    """The `EnvhubError` of a failed SessionStream call: the same code and reason a unary call raises."""
    return EnvhubError(_CODES.get(error.code, grpc.StatusCode.UNKNOWN), error.message, error.reason)


def backoff_s(attempt: int, base: float = 0.1, cap: float = 2.0) -> float:
    """Exponential backoff before retry number `attempt` (0-based)."""
    return float(min(cap, base * 2**attempt))
