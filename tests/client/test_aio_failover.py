"""Failover for the asyncio client and its session streams (`AsyncFailoverTransport`), on real `envhub serve`
replicas of the toy kind: a replica killed, and one drained, while sessions step on SessionStreams."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator

import pytest

from envhub.bench.procs import ServerProcess
from envhub.client import AsyncEnvhubClient
from envhub.client.aio_failover import AsyncFailoverTransport, FailoverStreamTransport
from envhub.client.failover import FailoverTransport
from envhub.testing import REFERENCE, wait_until_draining

KEY = "asyncio-failover-test-key-shared-by-every-replica"


@contextlib.contextmanager
def replicas(*extra: str) -> Iterator[list[ServerProcess]]:
    os.environ["ENVHUB_SNAPSHOT_KEY"] = KEY
    try:
        with contextlib.ExitStack() as stack:
            yield [stack.enter_context(ServerProcess(REFERENCE, workers=2, extra=list(extra))) for _ in range(2)]
    finally:
        del os.environ["ENVHUB_SNAPSHOT_KEY"]


def owned_by(transport: AsyncFailoverTransport, server: ServerProcess, sessions: list[str]) -> list[str]:
    replica = {t.target: name for name, t in transport.failover.pool.replicas.items()}[server.target]
    return [session for session in sessions if session.startswith(replica + ".")]


@pytest.mark.parametrize("failure", ["kill", "drain"])
def test_steps_on_session_streams_survive_a_replica_that_fails(failure: str) -> None:
    extra = ("--drain-migrate", "60") if failure == "drain" else ()
    with replicas(*extra) as servers:

        async def scenario() -> None:
            failover = FailoverTransport.over([server.target for server in servers], snapshot_every=2)
            transport = AsyncFailoverTransport(failover)
            async with AsyncEnvhubClient(transport) as client, client.stream() as stream:
                assert isinstance(stream.transport, FailoverStreamTransport)
                sessions = [(await stream.create_session("toy", f"train-count/{i % 4}")).session_id for i in range(8)]
                assert len(owned_by(transport, servers[0], sessions)) == 4
                for _ in range(3):
                    await asyncio.gather(*(stream.step(session, "count") for session in sessions))
                if failure == "kill":
                    servers[0].process.kill()
                else:
                    servers[0].process.send_signal(signal.SIGTERM)
                    await asyncio.to_thread(wait_until_draining, servers[0].target)
                views = await asyncio.gather(*(stream.step(session, "count") for session in sessions))
                assert [view.text for view in views] == [f"train-count/{i % 4} seed 0: 4" for i in range(8)]
                assert transport.failover.recoveries == 4
                assert transport.failover.migrations == (4 if failure == "drain" else 0)
                assert [view.step_index for view in await client.step_many([(s, "count") for s in sessions])] == [5] * 8
                for session in sessions:
                    await stream.close_session(session)

        asyncio.run(scenario())
        if failure == "drain":
            assert servers[0].process.wait(timeout=60) == 0


def test_coalesced_steps_survive_a_killed_replica() -> None:
    """`coalesced()` over failover: each turn's steps are one StepBatch call, split by replica; the killed
    replica's sessions are recovered and every step still applies once."""
    with replicas() as servers:

        async def scenario() -> None:
            failover = FailoverTransport.over([server.target for server in servers], snapshot_every=2)
            transport = AsyncFailoverTransport(failover)
            async with AsyncEnvhubClient(transport) as client, client.coalesced() as steps:
                sessions = [(await client.create_session("toy", f"train-count/{i % 4}")).session_id for i in range(8)]
                assert len(owned_by(transport, servers[0], sessions)) == 4
                for _ in range(3):
                    await asyncio.gather(*(steps.step(session, "count") for session in sessions))
                servers[0].process.kill()
                views = await asyncio.gather(*(steps.step(session, "count") for session in sessions))
                assert [view.text for view in views] == [f"train-count/{i % 4} seed 0: 4" for i in range(8)]
                assert [view.session_id for view in views] == sessions
                assert transport.failover.recoveries == 4

        asyncio.run(scenario())
