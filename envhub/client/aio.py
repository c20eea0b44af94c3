"""`AsyncEnvhubClient`: the asyncio client, the typed API of `envhub.client.calls` over an asyncio transport.

Same methods, results, errors and retry policy as `EnvhubClient`. `stream()` gives an
`AsyncEnvhubClient` whose session calls share one SessionStream.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Concatenate, ParamSpec, TypeVar

from envhub.client import calls, channel
from envhub.client.aio_failover import AsyncFailoverTransport, FailoverStreamTransport
from envhub.client.coalesce import MAX_BATCH, CoalescingTransport
from envhub.client.retry import DEFAULT_POLICY, RetryPolicy
from envhub.client.stream import StreamTransport
from envhub.client.transport import DEFAULT_TIMEOUT_S, AioChannelTransport, AsyncTransport, Settings

P = ParamSpec("P")
R = TypeVar("R")


def awaiting(build: Callable[P, calls.Call[R]]) -> Callable[Concatenate[AsyncEnvhubClient, P], Awaitable[R]]:
    """An asyncio client method running the `Call` that `build` makes."""

    async def method(self: AsyncEnvhubClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self.run(build(*args, **kwargs))

    method.__name__, method.__doc__ = build.__name__, build.__doc__
    return method


class AsyncEnvhubClient:
    """The envhub API over one server with asyncio (create it inside a running loop), or any `AsyncTransport`."""

    def __init__(
        self,
        target: str | AsyncTransport,
        token: str | None = None,
        tls: channel.Tls = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        policy: RetryPolicy = DEFAULT_POLICY,
    ) -> None:
        if isinstance(target, str):
            target = AioChannelTransport(target, Settings(token, tls, timeout, policy))
        self.transport: AsyncTransport = target

    async def run(self, call: calls.Call[R]) -> R:
        """Send one `Call` and decode its answer (what every method below does)."""
        return call.decode(await self.transport.send(call))

    list_environments = awaiting(calls.list_environments)
    replica_id = awaiting(calls.replica_id)
    list_tasks = awaiting(calls.list_tasks)
    create_session = awaiting(calls.create_session)
    reset_session = awaiting(calls.reset_session)
    step = awaiting(calls.step)
    step_many = awaiting(calls.step_many)
    close_session = awaiting(calls.close_session)
    expert_actions = awaiting(calls.expert_actions)
    snapshot = awaiting(calls.snapshot)
    restore = awaiting(calls.restore)
    restore_many = awaiting(calls.restore_many)
    fork = awaiting(calls.fork)

    def stream(self, timeout: float | None = None) -> AsyncEnvhubClient:
        """A client whose session calls share one SessionStream: `async with client.stream() as stream: ...`;
        over an `AsyncFailoverTransport`, steps share one stream per replica and fail over."""
        if isinstance(self.transport, AsyncFailoverTransport):
            return AsyncEnvhubClient(FailoverStreamTransport(self.transport, timeout))
        if not isinstance(self.transport, AioChannelTransport):
            raise TypeError("stream() needs a client over one server (AioChannelTransport) or with failover")
        return AsyncEnvhubClient(StreamTransport(self.transport, timeout))

    def coalesced(
        self, policy: RetryPolicy = DEFAULT_POLICY, max_batch: int = MAX_BATCH, depth: int = 1
    ) -> AsyncEnvhubClient:
        """A client whose steps sent in one loop turn go as one StepBatch over this client's transport (see
        `envhub.client.coalesce`): `async with client.coalesced() as steps: ...`; `policy` decides which
        failed entries are sent again alone; `depth` > 1 splits a turn's steps so that about that many batches
        are in flight at once."""
        return AsyncEnvhubClient(CoalescingTransport(self.transport, policy, max_batch, depth))

    async def close(self, cancel: bool = False) -> None:
        """Close the connection (for a stream: half-close and wait for answers; `cancel` drops them)."""
        await self.transport.aclose(cancel)

    async def __aenter__(self) -> AsyncEnvhubClient:
        await self.transport.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close(cancel=exc_type is not None)
