"""Failover for the asyncio client and its session streams, over the blocking `FailoverTransport`.

`AsyncFailoverTransport` runs each call of an `AsyncEnvhubClient` through a `FailoverTransport`
on a thread of its own pool, so the asyncio client moves sessions exactly as the blocking one
(one implementation of tracking, probing and moving):

    transport = AsyncFailoverTransport(FailoverTransport.over(["dns:///envhub-alfworld:50051"]))
    async with AsyncEnvhubClient(transport) as client:
        ...
        async with client.stream() as stream:   # steps on SessionStreams, one per replica
            ...

`FailoverStreamTransport` (what `client.stream()` gives over it) sends the steps of tracked
sessions on a SessionStream to the replica serving each session (opened on first use) and records
them for the failover transport; a step failing there (the stream broke, the replica drains or
is gone, the session was lost with its worker) and every other call go through the failover
transport, which moves what was lost and answers the call; later steps go on a stream to the
session's new replica.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from google.protobuf.message import Message

from envhub.client import calls
from envhub.client.failover import FailoverTransport
from envhub.client.pool_transport import FAILED
from envhub.client.stream import StreamTransport
from envhub.client.transport import AioChannelTransport
from envhub.core.errors import EnvhubError

T = TypeVar("T")
THREADS = 64
"""Calls of one asyncio client in flight at once (each holds a thread while it runs)."""


class AsyncFailoverTransport:
    """An asyncio transport over a `FailoverTransport` (calls run on `threads` threads)."""

    def __init__(self, failover: FailoverTransport, threads: int = THREADS) -> None:
        self.failover = failover
        self._threads = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="envhub-failover")

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        """`work(*args)` on one of this transport's threads."""
        return await asyncio.get_running_loop().run_in_executor(self._threads, work, *args)

    async def send(self, call: calls.Call[Any]) -> Message:
        return await self.run(self.failover.send, call)

    async def open(self) -> None:
        """Nothing to open: the replicas' channels exist already."""

    async def aclose(self, cancel: bool = False) -> None:
        self._threads.shutdown(wait=not cancel, cancel_futures=cancel)
        self.failover.close()


class FailoverStreamTransport:
    """Steps on one SessionStream per replica; everything else, and every step that fails there,
    through an `AsyncFailoverTransport`."""

    def __init__(self, unary: AsyncFailoverTransport, timeout: float | None = None) -> None:
        self.unary = unary
        self.failover = unary.failover
        self.timeout = timeout
        self._streams: dict[str, StreamTransport] = {}

    async def _stream(self, replica: str) -> StreamTransport:
        """The open stream to `replica` (a broken one is replaced)."""
        stream = self._streams.get(replica)
        if stream is None or stream.broken is not None:
            if stream is not None:
                await stream.aclose(cancel=True)
            target = self.failover.pool.replicas[replica].target
            stream = StreamTransport(AioChannelTransport(target, self.failover.settings), self.timeout)
            await stream.open()
            self._streams[replica] = stream
        return stream

    async def send(self, call: calls.Call[Any]) -> Message:
        session = self.failover.tracked(call.session_id) if call.effect is calls.Effect.STEPS else None
        if session is None or session.moving is not None or session.broken is not None:
            return await self.unary.send(call)
        live_id, epoch = session.live_id, session.epoch
        try:
            stream = await self._stream(self.failover.pool.owner(live_id))
            response = await stream.send(call.addressed_to(live_id))
        except EnvhubError as error:
            if error.code not in FAILED:
                raise
            return await self.unary.send(call)  # the failover transport moves what was lost, then answers
        if not self.failover.record(call, response, session, epoch, checkpoint=False):
            return await self.unary.send(call)  # answered by a copy that moved meanwhile
        if self.failover.due(session):
            self.failover.renew_all([session])  # in the background
        return response

    async def open(self) -> None:
        """Nothing to open: each replica's stream opens on first use."""

    async def aclose(self, cancel: bool = False) -> None:
        """Half-close every stream and wait for its answers (`cancel`: drop them); the failover stays open."""
        await asyncio.gather(*(stream.aclose(cancel) for stream in self._streams.values()))
        self._streams.clear()
