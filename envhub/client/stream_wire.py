"""SessionStream messages for the client: a `Call` in, its response or error out; and one blocking round.

Only CreateSession, ResetSession, Step and CloseSession travel on a stream (`FIELDS`).
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf.message import Message

from envhub.client.calls import Call
from envhub.client.errors import from_status
from envhub.core import errors
from envhub.v1 import envhub_pb2 as pb

FIELDS = {"CreateSession": "create", "ResetSession": "reset", "Step": "step", "CloseSession": "close"}
"""RPC name -> its field in SessionStreamRequest / SessionStreamResponse."""
_PATH = "/envhub.v1.EnvHub/SessionStream"


def wrap(call_id: int, call: Call[Any]) -> pb.SessionStreamRequest:
    """The stream request carrying `call` (which must be one of `FIELDS`)."""
    request = pb.SessionStreamRequest(call_id=call_id)
    getattr(request, FIELDS[call.method]).CopyFrom(call.request)
    return request


def unwrap(response: pb.SessionStreamResponse, method: str) -> Message:
    """The unary response inside `response`; raises the `EnvhubError` it carries instead."""
    outcome = response.WhichOneof("outcome")
    if outcome == "error":
        raise from_status(response.error)
    if outcome != FIELDS[method]:
        raise errors.EnvhubError(
            grpc.StatusCode.INTERNAL, f"a {method} call was answered with {outcome!r}", "STREAM_PROTOCOL"
        )
    message: Message = getattr(response, outcome)
    return message
