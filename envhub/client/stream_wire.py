"""SessionStream messages for the client: a `Call`'s request in, its response or error out.

Only CreateSession, ResetSession, Step and CloseSession travel on a stream: the request message's
type picks its slot in the `SessionStreamRequest`/`SessionStreamResponse` oneofs (`SLOTS`).
"""

from __future__ import annotations

import grpc
from google.protobuf.message import Message

from envhub.client.errors import from_status
from envhub.core import errors
from envhub.v1 import envhub_pb2 as pb

SLOTS: dict[type[Message], str] = {
    pb.CreateSessionRequest: "create",
    pb.ResetSessionRequest: "reset",
    pb.StepRequest: "step",
    pb.CloseSessionRequest: "close",
}
"""Request type -> its field in SessionStreamRequest (and its answer's in SessionStreamResponse)."""


def slot(request: Message) -> str | None:
    """The stream field carrying `request`, or None when it does not travel on a stream."""
    return SLOTS.get(type(request))


def wrap(call_id: int, request: Message) -> pb.SessionStreamRequest:
    """The stream request carrying `request` (of a type in `SLOTS`)."""
    wrapped = pb.SessionStreamRequest(call_id=call_id)
    getattr(wrapped, SLOTS[type(request)]).CopyFrom(request)
    return wrapped


def unwrap(response: pb.SessionStreamResponse, request: Message) -> Message:
    """The unary response to `request` inside `response`; raises the `EnvhubError` it carries instead."""
    outcome = response.WhichOneof("outcome")
    if outcome == "error":
        raise from_status(response.error)
    expected = SLOTS[type(request)]
    if outcome != expected:
        raise errors.EnvhubError(
            grpc.StatusCode.INTERNAL, f"a {expected} call was answered with {outcome!r}", "STREAM_PROTOCOL"
        )
    message: Message = getattr(response, outcome)
    return message
