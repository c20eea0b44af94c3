"""`EnvhubError` -> gRPC status with `google.rpc.ErrorInfo` details (domain "envhub.dev")."""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from envhub.core.errors import EnvhubError

DOMAIN = "envhub.dev"
MAX_MESSAGE_CHARS = 1024
MAX_METADATA_CHARS = 256
MAX_BATCH_STEPS = 4096
"""Most steps one StepBatch (or restores one RestoreSnapshotBatch) may carry (a rollout turn of 4x the
papers' 1,024 episodes); more answer INVALID_ARGUMENT (BATCH_TOO_LARGE)."""
STREAM_ADMITTED = "envhub-stream-admitted"
"""Initial-metadata key a server opens a SessionStream with once it admitted it (token accepted, not
draining). A client writes no request before it: grpc.aio reports a write that races the server's
refusal as INTERNAL "Internal error from Core" instead of the refusal (grpc/grpc#36066)."""
MIN_KEEPALIVE_S = 1.0
"""The shortest HTTP/2 keepalive interval a client may use: servers accept pings twice as often, also
with no call in flight (gRPC's server default takes pings more often than every 5 minutes without a
call for abuse and closes the connection)."""


def to_status(error: EnvhubError) -> grpc.Status:
    """The rich status the server aborts with for `error`."""
    return rpc_status.to_status(to_rpc_status(error))


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def to_rpc_status(error: EnvhubError) -> status_pb2.Status:
    """`error` as a `google.rpc.Status` (inside a SessionStream response, or a unary call's trailers).

    Messages and metadata values are clipped (`MAX_MESSAGE_CHARS`, `MAX_METADATA_CHARS`): they may
    echo client input (a 1 MB session id), and trailers over gRPC's metadata limit would turn the
    answer into a bare RESOURCE_EXHAUSTED.
    """
    metadata = {key: _clip(value, MAX_METADATA_CHARS) for key, value in error.metadata.items()}
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.ErrorInfo(reason=error.reason, domain=DOMAIN, metadata=metadata))
    message = _clip(error.message, MAX_MESSAGE_CHARS)
    return status_pb2.Status(code=error.code.value[0], message=message, details=[detail])
