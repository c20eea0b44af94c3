"""A rolling update across two environment versions, end to end: a pool of two toy replicas reporting version 1
holds live sessions of one failover client; each replica in turn is replaced by one reporting version 2 (the same
dynamics), the first drained (SIGTERM, its sessions moved by fresh snapshots), the second killed (SIGKILL, its
sessions rebuilt from held snapshots and the steps since). The pool finds replicas as a Kubernetes Service
lists them (the new one's address added, the old one's dropped). Every episode ends equal to an undisturbed
twin's, each step applied once, every session then served by version 2."""

from __future__ import annotations

import contextlib
import signal

import pytest

from envhub.bench.procs import ServerProcess
from envhub.client import EnvhubClient, types
from envhub.client.endpoints import Discovery
from envhub.client.failover import FailoverTransport
from envhub.client.pool_transport import PoolTransport
from envhub.client.retry import NO_RETRY
from envhub.client.transport import ChannelTransport, Settings
from envhub.server.background import BackgroundServer
from envhub.testing import REFERENCE, wait_until_draining

SESSIONS = 4
TURNS = 9
DRAIN_AT, KILL_AT = 3, 6


def _replica(version: str) -> ServerProcess:
    return ServerProcess(REFERENCE, extra=["--drain-migrate", "60", "--set", f"{REFERENCE}.version={version}"])


def _live(transport: FailoverTransport, session: str) -> str:
    tracked = transport.tracked(session)
    assert tracked is not None
    return tracked.live_id


def test_a_rolling_update_to_another_version_loses_no_episode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVHUB_SNAPSHOT_KEY", "rolling-update-test-key-shared-by-every-replica")
    with contextlib.ExitStack() as stack:
        old = [stack.enter_context(_replica("1")) for _ in range(2)]
        addresses = [server.target for server in old]
        settings = Settings(policy=NO_RETRY)
        discovery = Discovery(lambda: list(addresses), lambda address: ChannelTransport(address, settings), 3600.0)
        transport = FailoverTransport(PoolTransport(discovery=discovery), snapshot_every=2)
        client = stack.enter_context(EnvhubClient(transport))
        twin = stack.enter_context(EnvhubClient(stack.enter_context(BackgroundServer.local(REFERENCE)).target))
        tasks = [(f"train-count/{index}", index) for index in range(SESSIONS)]
        sessions = [client.create_session("toy", task, seed=seed).session_id for task, seed in tasks]
        twins = [twin.create_session("toy", task, seed=seed).session_id for task, seed in tasks]
        assert {session.split(".", 1)[0] for session in sessions} == set(transport.pool.replicas)

        new: list[ServerProcess] = []
        got: list[list[types.EnvView]] = [[] for _ in sessions]
        expected: list[list[types.EnvView]] = [[] for _ in sessions]
        for turn in range(TURNS):
            if turn in (DRAIN_AT, KILL_AT):
                leaving = old[0 if turn == DRAIN_AT else 1]
                new.append(stack.enter_context(_replica("2")))
                addresses.append(new[-1].target)
                leaving.process.send_signal(signal.SIGTERM if turn == DRAIN_AT else signal.SIGKILL)
                if turn == DRAIN_AT:
                    wait_until_draining(leaving.target)
                addresses.remove(leaving.target)
            for index, session in enumerate(sessions):
                action = "win" if turn == TURNS - 1 else "count"
                got[index].append(client.step(session, action))
                expected[index].append(twin.step(twins[index], action))

        assert got == expected, "every episode equals its undisturbed twin's"
        for views in got:
            assert [view.step_index for view in views] == list(range(1, TURNS + 1)), "each step applied once"
        assert old[0].process.wait(timeout=60) == 0, "its sessions moved away, the drained replica exits"
        assert transport.migrations >= 1 and transport.recoveries > transport.migrations, "drained, then rebuilt"
        serving = {transport.pool.owner(_live(transport, session)) for session in sessions}
        new_replicas = {name for name, replica in transport.pool.replicas.items() if replica.target in addresses}
        assert serving <= new_replicas, "every session is served by a replica of version 2 now"
        assert {client.snapshot(session).environment_version for session in sessions} == {"2"}
        for session in sessions:
            client.close_session(session)
