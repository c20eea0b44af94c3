"""SessionStream messages for the client: a `Call` in, its response or error out; and one blocking round.

Only CreateSession, ResetSession, Step and CloseSession travel on a stream (`FIELDS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
from google.protobuf.message import Message

from envhub.client import types
from envhub.client.calls import Call
from envhub.client.errors import from_rpc_error, from_status
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


def step_round(
    channel: grpc.Channel,
    metadata: tuple[tuple[str, str], ...],
    steps: Sequence[Call[types.StepResult]],
    timeout: float,
) -> list[types.StepResult | errors.EnvhubError]:
    """One blocking SessionStream carrying `steps`; results in `steps` order, a failed step as its
    `EnvhubError`. A failure of the stream itself raises the error of the call."""
    stream = channel.stream_stream(
        _PATH,
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=pb.SessionStreamResponse.FromString,
    )
    requests = [wrap(index, call) for index, call in enumerate(steps)]
    results: dict[int, types.StepResult | errors.EnvhubError] = {}
    try:
        for response in stream(iter(requests), timeout=timeout, metadata=metadata):
            call = steps[response.call_id]
            try:
                results[response.call_id] = call.decode(unwrap(response, call.method))
            except errors.EnvhubError as exc:
                results[response.call_id] = exc
    except grpc.RpcError as exc:
        raise from_rpc_error(exc) from None
    if len(results) != len(requests):
        raise errors.unavailable("the session stream ended before answering every step", "STREAM_ENDED")
    return [results[index] for index in range(len(requests))]
