"""`SessionStreamClient`: many sessions' create/reset/step/close calls multiplexed on one SessionStream.

One bidirectional stream carries every call; each request gets a fresh `call_id` and a
future that the reader task resolves when the matching response arrives (responses of one
session come back in request order, across sessions in completion order). A failed call
raises the same `EnvhubError` (code and reason) as the unary call would and leaves the stream
open. If the stream itself breaks, every unanswered call, and every later one, raises
UNAVAILABLE / `STREAM_BROKEN` (the cause's code and reason are in the error's metadata).

`step_round` is the blocking form used by `EnvhubClient.step_many`: one stream carrying one
step per session, closed when every step has been answered.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

import grpc
import grpc.aio

from envhub.client import convert, types
from envhub.client.errors import from_rpc_error, from_status
from envhub.core import errors
from envhub.v1 import envhub_pb2 as pb
from envhub.v1 import envhub_pb2_grpc as pb_grpc

Decode = Callable[[Any], Any]
"""Turns the unary response message inside a stream response into the client's typed result."""


def _decode(response: pb.SessionStreamResponse, field: str, decode: Decode) -> Any:
    """The typed result of `response`, which answers a `field` call; raises the `EnvhubError` it carries."""
    outcome = response.WhichOneof("outcome")
    if outcome == "error":
        raise from_status(response.error)
    if outcome != field:
        raise errors.EnvhubError(
            grpc.StatusCode.INTERNAL, f"a {field} call was answered with {outcome!r}", "STREAM_PROTOCOL"
        )
    return decode(getattr(response, field))


def stream_broken(exc: grpc.RpcError) -> errors.EnvhubError:
    """UNAVAILABLE for calls lost with a broken stream, naming the cause."""
    cause = from_rpc_error(exc)
    return errors.unavailable(
        f"the session stream broke: {cause}", "STREAM_BROKEN", cause_code=cause.code.name, cause_reason=cause.reason
    )


def _step_request(session_id: str, action: str, admissible: bool) -> pb.StepRequest:
    return pb.StepRequest(session_id=session_id, action=action, include_admissible_actions=admissible)


class SessionStreamClient:
    """Session calls over one SessionStream; open it with `async with AsyncEnvhubClient(...).stream() as s`.

    Methods mirror `AsyncEnvhubClient`'s session methods and return the same typed results.
    `timeout` bounds the wait for each answer (DEADLINE_EXCEEDED); unlike a unary deadline it
    does not stop the server, which still runs the call and its answer is dropped.
    """

    def __init__(self, stub: pb_grpc.EnvHubStub, metadata: tuple[tuple[str, str], ...], timeout: float) -> None:
        self._stub = stub
        self._metadata = metadata
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[asyncio.Future[Any], str, Decode]] = {}
        self._outbox: asyncio.Queue[pb.SessionStreamRequest | None] = asyncio.Queue()
        self._call: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._broken: errors.EnvhubError | None = None

    # ------------------------------------------------------------------ lifetime

    async def open(self) -> SessionStreamClient:
        """Start the stream (done by `async with`)."""
        if self._call is not None:
            raise RuntimeError("this SessionStreamClient is already open")
        self._call = self._stub.SessionStream(self._requests(), metadata=self._metadata)
        self._reader = asyncio.create_task(self._read())
        return self

    async def aclose(self, cancel: bool = False) -> None:
        """Half-close and wait for every answer; with `cancel`, drop the stream and fail unanswered calls."""
        if self._reader is None:
            return
        if cancel:
            self._call.cancel()
        self._outbox.put_nowait(None)
        await asyncio.wait([self._reader])

    async def __aenter__(self) -> SessionStreamClient:
        return await self.open()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose(cancel=exc_type is not None)

    @property
    def pending(self) -> int:
        """Calls sent and not yet answered."""
        return len(self._pending)

    async def _requests(self) -> AsyncIterator[pb.SessionStreamRequest]:
        while (request := await self._outbox.get()) is not None:
            yield request

    async def _read(self) -> None:
        try:
            async for response in self._call:
                entry = self._pending.pop(response.call_id, None)
                if entry is None or entry[0].done():  # the caller stopped waiting
                    continue
                future, field, decode = entry
                try:
                    future.set_result(_decode(response, field, decode))
                except errors.EnvhubError as exc:
                    future.set_exception(exc)
            self._fail(errors.unavailable("the session stream ended before answering", "STREAM_ENDED"))
        except grpc.aio.AioRpcError as exc:
            self._fail(stream_broken(exc))
        except asyncio.CancelledError:
            if not self._call.cancelled():
                raise
            self._fail(errors.unavailable("the session stream was cancelled", "STREAM_CANCELLED"))

    def _fail(self, error: errors.EnvhubError) -> None:
        self._broken = error
        pending, self._pending = self._pending, {}
        for future, _, _ in pending.values():
            if not future.done():
                future.set_exception(error)

    # ------------------------------------------------------------------ calls

    async def _submit(self, field: str, message: Any, decode: Decode, timeout: float | None) -> Any:
        if self._broken is not None:
            raise self._broken
        if self._reader is None:
            raise RuntimeError("open the stream first: `async with client.stream() as stream: ...`")
        request_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (future, field, decode)
        request = pb.SessionStreamRequest(call_id=request_id)
        getattr(request, field).CopyFrom(message)
        self._outbox.put_nowait(request)
        try:
            async with asyncio.timeout(timeout or self.timeout):
                return await future
        except TimeoutError:
            raise errors.EnvhubError(
                grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer to {field} within the timeout", "DEADLINE_EXCEEDED"
            ) from None
        finally:
            self._pending.pop(request_id, None)

    async def create_session(
        self,
        environment: str,
        *,
        task_id: str | None = None,
        split: str | None = None,
        index: int | None = None,
        seed: int = 0,
        options: Mapping[str, str] | None = None,
        max_steps: int = 0,
        admissible: bool = False,
        timeout: float | None = None,
    ) -> types.SessionStart:
        """Start a session on a task (`task_id`, or `split` and `index`)."""
        request = convert.create_request(environment, task_id, split, index, seed, options, max_steps, admissible)
        result: types.SessionStart = await self._submit("create", request, convert.session_start, timeout)
        return result

    async def reset_session(
        self,
        session_id: str,
        *,
        task_id: str | None = None,
        split: str | None = None,
        index: int | None = None,
        seed: int | None = None,
        admissible: bool = False,
        timeout: float | None = None,
    ) -> types.SessionStart:
        """Reset onto the same task and seed, or onto the ones given."""
        request = convert.reset_request(session_id, task_id, split, index, seed, admissible)
        result: types.SessionStart = await self._submit(
            "reset", request, lambda message: convert.reset_start(session_id, message), timeout
        )
        return result

    async def step(
        self, session_id: str, action: str, *, admissible: bool = False, timeout: float | None = None
    ) -> types.StepResult:
        """Send one action to a session."""
        result: types.StepResult = await self._submit(
            "step", _step_request(session_id, action, admissible), convert.step, timeout
        )
        return result

    async def close_session(self, session_id: str, timeout: float | None = None) -> None:
        await self._submit("close", pb.CloseSessionRequest(session_id=session_id), lambda _: None, timeout)


def step_round(
    stub: pb_grpc.EnvHubStub,
    metadata: tuple[tuple[str, str], ...],
    steps: Sequence[tuple[str, str]],
    admissible: bool,
    timeout: float,
) -> list[types.StepResult | errors.EnvhubError]:
    """One blocking SessionStream carrying `steps` ((session_id, action) pairs); results in `steps` order,
    a failed step as its `EnvhubError`. A failure of the stream itself raises the error of the call."""
    requests = [
        pb.SessionStreamRequest(call_id=index, step=_step_request(session_id, action, admissible))
        for index, (session_id, action) in enumerate(steps)
    ]
    results: dict[int, types.StepResult | errors.EnvhubError] = {}
    try:
        for response in stub.SessionStream(iter(requests), timeout=timeout, metadata=metadata):
            try:
                results[response.call_id] = _decode(response, "step", convert.step)
            except errors.EnvhubError as exc:
                results[response.call_id] = exc
    except grpc.RpcError as exc:
        raise from_rpc_error(exc) from None
    if len(results) != len(requests):
        raise errors.unavailable("the session stream ended before answering every step", "STREAM_ENDED")
    return [results[index] for index in range(len(requests))]
