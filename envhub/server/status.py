"""`EnvhubError` -> gRPC status with `google.rpc.ErrorInfo` details (domain "envhub.dev")."""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from envhub.core.errors import EnvhubError

DOMAIN = "envhub.dev"


def to_status(error: EnvhubError) -> grpc.Status:
    """The rich status the server aborts with for `error`."""
    return rpc_status.to_status(to_rpc_status(error))


def to_rpc_status(error: EnvhubError) -> status_pb2.Status:
    """`error` as the `google.rpc.Status` message carried inside a SessionStream response."""
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.ErrorInfo(reason=error.reason, domain=DOMAIN, metadata=error.metadata))
    return status_pb2.Status(code=error.code.value[0], message=error.message, details=[detail])
