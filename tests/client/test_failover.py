"""Three real replicas, one client: one replica drained (SIGTERM) and one killed (SIGKILL) mid-episode.

Every episode must complete with the same results as an undisturbed run, each step applied
exactly once (step indices 1..n, in order), none lost. With `--drain-migrate`, sessions of a
draining replica move by a fresh snapshot, without replay (the toy kind).
"""

from __future__ import annotations

import contextlib
import signal

import grpc
import pytest

from envhub.bench.procs import ServerProcess
from envhub.client import EnvhubClient, types
from envhub.client.failover import FailoverTransport
from envhub.core.errors import EnvhubError
from envhub.testing import REFERENCE, wait_until_draining
from envhub.v1 import envhub_pb2 as pb

EPISODES = 6
TURNS = 8
TASKS = [f"valid_seen/{index:05d}" for index in range(EPISODES)]


def reference(target: str) -> tuple[list[list[str]], list[list[types.EnvView]]]:
    """Expert actions and the results of each episode on one undisturbed server."""
    actions: list[list[str]] = []
    results: list[list[types.EnvView]] = []
    with EnvhubClient(target) as client:
        for task in TASKS:
            session = client.create_session("alfworld", task, seed=7).session_id
            actions.append([])
            results.append([])
            for _ in range(TURNS):
                action = client.expert_actions(session)[0]
                result = client.step(session, action)
                actions[-1].append(action)
                results[-1].append(result)
                if result.done:
                    break
            client.close_session(session)
    return actions, results


@pytest.mark.slow
def test_episodes_survive_a_drained_and_a_killed_replica(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVHUB_SNAPSHOT_KEY", "failover-test-key-shared-by-all-three-replicas")
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(ServerProcess("alfworld")) for _ in range(3)]
        expected_actions, expected = reference(servers[2].target)
        assert min(len(actions) for actions in expected_actions) > 4, "episodes must still run when replicas fail"
        transport = FailoverTransport.over([server.target for server in servers], snapshot_every=3)
        pool = transport.pool
        by_replica = {
            replica: servers[[s.target for s in servers].index(t.target)] for replica, t in pool.replicas.items()
        }
        client = stack.enter_context(EnvhubClient(transport))
        sessions = [client.create_session("alfworld", task, seed=7).session_id for task in TASKS]
        owners = {session.split(".", 1)[0] for session in sessions}
        assert owners == set(pool.replicas), "placement should spread the episodes over all three replicas"

        drained = by_replica[sessions[0].split(".", 1)[0]]
        killed = by_replica[next(s for s in sessions if by_replica[s.split(".", 1)[0]] is not drained).split(".", 1)[0]]
        got: list[list[types.EnvView]] = [[] for _ in TASKS]
        for turn in range(TURNS):
            if turn == 2:
                drained.process.send_signal(signal.SIGTERM)
            if turn == 4:
                killed.process.send_signal(signal.SIGKILL)
            for episode, session in enumerate(sessions):
                if turn < len(expected_actions[episode]):
                    got[episode].append(client.step(session, expected_actions[episode][turn]))

        for episode in range(EPISODES):
            assert got[episode] == expected[episode], f"episode {episode} differs from the undisturbed run"
            indices = [result.step_index for result in got[episode]]
            assert indices == list(range(1, len(expected[episode]) + 1)), f"episode {episode}: steps {indices}"
        assert transport.recoveries >= 2, "both failed replicas owned sessions that had to move"
        assert drained.process.wait(timeout=60) == 0, "a drained replica exits 0"
        for session in sessions:
            client.close_session(session)


@pytest.mark.slow
def test_a_replay_that_does_not_reproduce_is_an_error_not_a_different_episode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVHUB_SNAPSHOT_KEY", "failover-test-key-shared-by-both-replicas")
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(ServerProcess("alfworld")) for _ in range(2)]
        transport = FailoverTransport.over([server.target for server in servers], snapshot_every=10)
        client = stack.enter_context(EnvhubClient(transport))
        session = client.create_session("alfworld", TASKS[0], seed=7).session_id
        for _ in range(2):
            client.step(session, client.expert_actions(session)[0])
        # What the caller saw of the first step no longer matches what a replay gives
        # (as when an environment is not deterministic).
        record = transport._sessions[session]
        call, seen = record.replay[0]
        changed = pb.StepResult()
        changed.CopyFrom(seen)
        changed.reward += 1.0
        record.replay[0] = (call, changed)
        owner = next(s for s in servers if transport.pool.replicas[session.split(".", 1)[0]].target == s.target)
        owner.process.send_signal(signal.SIGKILL)
        with pytest.raises(EnvhubError) as diverged:
            client.step(session, "look")
        assert diverged.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert diverged.value.reason == "REPLAY_DIVERGED"


def test_sessions_of_a_draining_replica_move_by_a_fresh_snapshot_without_replay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ENVHUB_SNAPSHOT_KEY", "failover-test-key-shared-by-both-toy-replicas")
    with contextlib.ExitStack() as stack:
        extra = ["--drain-migrate", "60"]
        leaving, staying = (stack.enter_context(ServerProcess(REFERENCE, extra=extra)) for _ in range(2))
        # No snapshot after creation: a move by the held snapshot would have to replay three steps.
        transport = FailoverTransport.over([leaving.target, staying.target], snapshot_every=100)
        client = stack.enter_context(EnvhubClient(transport))
        sessions = [client.create_session("toy", f"train-count/{index}").session_id for index in range(4)]
        replica = {t.target: name for name, t in transport.pool.replicas.items()}
        moving = [session for session in sessions if session.startswith(replica[leaving.target] + ".")]
        assert len(moving) == 2, "placement spreads the sessions over both replicas"
        for _ in range(3):
            for session in sessions:
                client.step(session, "count")

        leaving.process.send_signal(signal.SIGTERM)
        wait_until_draining(leaving.target)
        results = [client.step(session, "count") for session in sessions]

        assert [result.step_index for result in results] == [4] * 4
        assert [result.text for result in results] == [f"train-count/{i} seed 0: 4" for i in range(4)]
        assert (transport.migrations, transport.recoveries) == (2, 2), "moved by fresh snapshots, nothing replayed"
        assert leaving.process.wait(timeout=60) == 0, "its sessions moved away, the drained replica exits"
        for session in sessions:
            client.close_session(session)


@pytest.mark.slow
def test_the_replay_log_rebuilds_sessions_from_their_start_snapshots(monkeypatch: pytest.MonkeyPatch) -> None:
    """Snapshots only at creation (the replay log: `snapshot_every` past the episodes' length): a killed
    replica's sessions are restored from their start and replay every step so far, results unchanged."""
    monkeypatch.setenv("ENVHUB_SNAPSHOT_KEY", "failover-test-key-shared-by-both-replicas")
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(ServerProcess("alfworld")) for _ in range(2)]
        expected_actions, expected = reference(servers[1].target)
        transport = FailoverTransport.over([server.target for server in servers], snapshot_every=TURNS + 1)
        client = stack.enter_context(EnvhubClient(transport))
        sessions = [client.create_session("alfworld", task, seed=7).session_id for task in TASKS]
        killed = next(s for s in servers if s.target == transport.pool.replicas[sessions[0].split(".", 1)[0]].target)
        on_killed = [
            session for session in sessions if transport.pool.replicas[session.split(".", 1)[0]].target == killed.target
        ]
        got: list[list[types.EnvView]] = [[] for _ in TASKS]
        for turn in range(TURNS):
            if turn == 5:
                transport.settle()
                for session in on_killed:
                    record = transport.tracked(session)
                    assert record is not None and record.snapshot is not None
                    assert record.snapshot.step_index == 0, "no snapshot after the one at creation"
                    assert len(record.replay) == len(got[sessions.index(session)]), "every step so far is kept"
                killed.process.send_signal(signal.SIGKILL)
            for episode, session in enumerate(sessions):
                if turn < len(expected_actions[episode]):
                    got[episode].append(client.step(session, expected_actions[episode][turn]))
        for episode in range(EPISODES):
            assert got[episode] == expected[episode], f"episode {episode} differs from the undisturbed run"
            indices = [result.step_index for result in got[episode]]
            assert indices == list(range(1, len(expected[episode]) + 1)), f"episode {episode}: steps {indices}"
        assert transport.recoveries == len(on_killed) > 0
