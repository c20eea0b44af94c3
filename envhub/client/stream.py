"""`StreamTransport`: session calls multiplexed on one SessionStream (asyncio).

One bidirectional stream carries every create/reset/step/close call; each gets a fresh
`call_id` and a future that the reader task resolves when the matching response arrives
(responses of one session come back in request order, across sessions in completion order).
Other calls (listings, snapshots, forks) go over the unary transport the stream came from.
A failed call raises the same `EnvhubError` (code, reason, metadata) as the unary call would
and leaves the stream open; steps and resets are retried by the same `RetryPolicy` as unary
calls, resending the same request (same request_id), so a retried step is applied once.
If the server refuses the stream (a bad token, a draining server), every call raises that
refusal as the unary call would (UNAUTHENTICATED `MISSING_OR_BAD_TOKEN`, UNAVAILABLE `DRAINING`);
nothing is written before the server admits the stream (`STREAM_ADMITTED`). If an admitted
stream breaks, every unanswered call, and every later one, raises UNAVAILABLE /
`STREAM_BROKEN` (the cause's code and reason are in the error's metadata).

Use it through `AsyncEnvhubClient.stream()`: `async with client.stream() as stream: ...`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
from google.protobuf.message import Message

from envhub.client import stream_wire
from envhub.client.calls import Call
from envhub.client.errors import from_rpc_error
from envhub.client.transport import AioChannelTransport
from envhub.core import errors
from envhub.core.status import STREAM_ADMITTED
from envhub.v1 import envhub_pb2 as pb


def stream_broken(exc: grpc.RpcError) -> errors.EnvhubError:
    """UNAVAILABLE for calls lost with a broken stream, naming the cause."""
    cause = from_rpc_error(exc)
    return errors.unavailable(
        f"the session stream broke: {cause}", "STREAM_BROKEN", cause_code=cause.code.name, cause_reason=cause.reason
    )


class StreamTransport:
    """Session calls over one SessionStream; other calls over `unary`.

    `timeout` bounds the wait for each answer (DEADLINE_EXCEEDED); unlike a unary deadline it
    does not stop the server, which still runs the call (a retried step is then answered
    from the session's memory of its request_id).
    """

    def __init__(self, unary: AioChannelTransport, timeout: float | None = None) -> None:
        self._unary = unary
        self.timeout = timeout or unary.timeout
        self.policy = unary.policy
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[pb.SessionStreamResponse]] = {}
        self._outbox: asyncio.Queue[pb.SessionStreamRequest | None] = asyncio.Queue()
        self._call: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._broken: errors.EnvhubError | None = None

    # ------------------------------------------------------------------ lifetime

    async def open(self) -> None:
        """Start the stream (done by `async with`)."""
        if self._call is not None:
            raise RuntimeError("this session stream is already open")
        stream = self._unary.channel.stream_stream(
            "/envhub.v1.EnvHub/SessionStream",
            request_serializer=lambda message: message.SerializeToString(),
            response_deserializer=pb.SessionStreamResponse.FromString,
        )
        self._call = stream(self._requests(), metadata=self._unary.metadata)
        self._reader = asyncio.create_task(self._read())

    async def aclose(self, cancel: bool = False) -> None:
        """Half-close and wait for every answer; with `cancel`, drop the stream and fail unanswered calls."""
        if self._reader is None:
            return
        if cancel:
            self._call.cancel()
        self._outbox.put_nowait(None)
        await asyncio.wait([self._reader])

    @property
    def broken(self) -> errors.EnvhubError | None:
        """Why the stream ended (every call now raises it), or None while it is open."""
        return self._broken

    @property
    def pending(self) -> int:
        """Calls sent and not yet answered."""
        return len(self._pending)

    async def _admitted(self) -> bool:
        """Whether the server admitted the stream (its initial metadata; a refused stream has none)."""
        metadata = await self._call.initial_metadata()
        return any(key == STREAM_ADMITTED for key, _ in metadata or ())

    async def _requests(self) -> AsyncIterator[pb.SessionStreamRequest]:
        admitted = await self._admitted()  # writing before it would race a refusal (see STREAM_ADMITTED)
        while (request := await self._outbox.get()) is not None:
            if admitted:
                yield request

    async def _read(self) -> None:
        try:
            async for response in self._call:
                future = self._pending.pop(response.call_id, None)
                if future is not None and not future.done():  # else the caller stopped waiting
                    future.set_result(response)
            self._fail(errors.unavailable("the session stream ended before answering", "STREAM_ENDED"))
        except grpc.aio.AioRpcError as exc:  # refused at once (auth, draining): the refusal as it is
            self._fail(stream_broken(exc) if await self._admitted() else from_rpc_error(exc))
        except asyncio.CancelledError:
            if not self._call.cancelled():
                raise
            self._fail(errors.unavailable("the session stream was cancelled", "STREAM_CANCELLED"))

    def _fail(self, error: errors.EnvhubError) -> None:
        self._broken = error
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)

    # ------------------------------------------------------------------ calls

    async def send(self, call: Call[Any]) -> Message:
        if stream_wire.slot(call.request) is None:  # listings, snapshots, forks
            return await self._unary.send(call)
        for attempt in itertools.count():
            try:
                return await self._submit(call)
            except errors.EnvhubError as error:
                if self._broken is not None or not self.policy.should_retry(call.retry, error, attempt):
                    raise
            await asyncio.sleep(self.policy.delay_s(attempt))
        raise AssertionError("unreachable")

    async def _submit(self, call: Call[Any]) -> Message:
        if self._broken is not None:
            raise self._broken
        if self._reader is None:
            raise RuntimeError("open the stream first: `async with client.stream() as stream: ...`")
        call_id = next(self._ids)
        future: asyncio.Future[pb.SessionStreamResponse] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = future
        self._outbox.put_nowait(stream_wire.wrap(call_id, call.request))
        try:
            async with asyncio.timeout(call.timeout or self.timeout):
                return stream_wire.unwrap(await future, call.request)
        except TimeoutError:
            raise errors.EnvhubError(
                grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer to {call.method} within the timeout", "DEADLINE_EXCEEDED"
            ) from None
        finally:
            self._pending.pop(call_id, None)
