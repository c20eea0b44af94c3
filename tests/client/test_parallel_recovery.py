"""Moving every session of a failed replica at once (`FailoverTransport`, real `envhub serve` replicas of
the toy kind): a killed replica is probed once and never called again, a draining one is not asked
again what it refused, a session lost with its worker is rebuilt from its held snapshot; every
episode goes on with exactly the results of an undisturbed one."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest

from envhub.bench.procs import ServerProcess, tree_pids
from envhub.client import EnvhubClient
from envhub.client.endpoints import Discovery
from envhub.client.failover import FailoverTransport
from envhub.client.pool_transport import PoolTransport
from envhub.client.retry import NO_RETRY
from envhub.client.transport import ChannelTransport, Settings
from envhub.testing import REFERENCE, Gate, InFlight, wait_until_draining

KEY = "parallel-recovery-test-key-shared-by-every-replica"


class Counting(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Counts the calls a channel sends, by method (it changes nothing)."""

    def __init__(self) -> None:
        self.calls: collections.Counter[str] = collections.Counter()
        self._sent = threading.Condition()

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        with self._sent:
            self.calls[details.method.rsplit("/", 1)[1]] += 1
            self._sent.notify_all()
        return continuation(details, request)

    def wait_for(self, method: str, timeout: float = 60.0) -> bool:
        """Whether a `method` call was sent (waiting up to `timeout` seconds for one)."""
        with self._sent:
            return self._sent.wait_for(lambda: self.calls[method] > 0, timeout)


@contextlib.contextmanager
def replicas(count: int, *extra: str) -> Iterator[tuple[list[ServerProcess], FailoverTransport, dict[str, Counting]]]:
    """`count` toy replicas sharing a snapshot key, a failover client over them counting each one's calls."""
    os.environ["ENVHUB_SNAPSHOT_KEY"] = KEY
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(ServerProcess(REFERENCE, workers=2, extra=list(extra))) for _ in range(count)]
        counters = {server.target: Counting() for server in servers}

        def connect(address: str) -> ChannelTransport:  # the failover transport retries, not the replica's
            return ChannelTransport(address, Settings(policy=NO_RETRY), interceptors=[counters[address]])

        pool = PoolTransport(discovery=Discovery(lambda: [server.target for server in servers], connect))
        yield servers, FailoverTransport(pool, snapshot_every=2), counters
    del os.environ["ENVHUB_SNAPSHOT_KEY"]


def is_worker(pid: int) -> bool:
    """Whether `pid` is a server's worker process (multiprocessing names it so; not its resource tracker)."""
    command = Path(f"/proc/{pid}/cmdline").read_bytes()
    return b"spawn_main" in command and b"resource_tracker" not in command


def texts(results: list[Any]) -> list[str]:
    return [result.text for result in results]


def test_every_session_of_a_killed_replica_moves_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    with replicas(2) as (servers, transport, counters), EnvhubClient(transport) as client:
        sessions = [client.create_session("toy", f"train-count/{i % 4}").session_id for i in range(24)]
        for _ in range(3):  # 3 steps: a snapshot after the 2nd, the 3rd to replay
            client.step_many([(session, "count") for session in sessions])
        killed = servers[0]
        owner = {t.target: name for name, t in transport.pool.replicas.items()}[killed.target]
        on_killed = [session for session in sessions if session.startswith(owner + ".")]
        assert len(on_killed) == 12, "placement spreads the sessions over both replicas"
        transport.settle()  # the snapshots taken in the background after the 2nd step are in
        killed.process.kill()
        killed.process.wait(timeout=60)
        before = sum(counters[killed.target].calls.values())

        results = client.step_many([(session, "count") for session in sessions])
        assert texts(results) == [f"train-count/{i % 4} seed 0: 4" for i in range(24)]
        assert [result.step_index for result in results] == [4] * 24
        assert transport.recoveries == 12 and transport.pool.retired == {owner}
        after_kill = counters[killed.target].calls
        assert sum(after_kill.values()) - before == 2, f"one failed batch and one probe, then nothing: {after_kill}"
        left = counters[servers[1].target].calls
        assert (left["RestoreSnapshotBatch"], left["RestoreSnapshot"]) == (1, 0), f"12 restores, one call: {left}"
        frozen = sum(after_kill.values())
        for _ in range(2):  # later turns and single steps never go to the dead address again
            client.step_many([(session, "count") for session in sessions])
        assert client.step(on_killed[0], "count").step_index == 7
        assert sum(counters[killed.target].calls.values()) == frozen
        for session in sessions:
            client.close_session(session)


def test_a_killed_replicas_sessions_move_while_the_replica_left_still_answers_its_share(tmp_path: Path) -> None:
    """The move starts once the killed replica's share of a batch failed, not once the whole batch is answered:
    the replica left is asked for the restores while its own share is held inside the environment."""
    gate = Gate.create(tmp_path / "gate")
    with (
        replicas(2, "--set", f"{REFERENCE}.gate={gate.folder}") as (servers, transport, counters),
        EnvhubClient(transport) as client,
    ):
        sessions = [client.create_session("toy", f"train-count/{i % 4}").session_id for i in range(8)]
        for _ in range(3):
            client.step_many([(session, "count") for session in sessions])
        transport.settle()
        killed, left = servers
        owner = {t.target: name for name, t in transport.pool.replicas.items()}[left.target]
        held = next(session for session in sessions if session.startswith(owner + "."))
        killed.process.kill()
        killed.process.wait(timeout=60)

        turn = InFlight(lambda: client.step_many([(s, "wait" if s == held else "count") for s in sessions]))
        gate.wait_entered()  # the replica left's share is inside the environment, unanswered
        moved_early = counters[left.target].wait_for("RestoreSnapshotBatch")
        gate.release()
        results = turn.outcome()
        assert moved_early, "the restores were asked for while the replica left's share was held"
        assert texts(results) == [
            f"train-count/{i % 4} seed 0: {3 if s == held else 4}" for i, s in enumerate(sessions)
        ]
        assert transport.recoveries == 4
        for session in sessions:
            client.close_session(session)


def test_a_killed_replica_whose_address_left_the_answer_is_not_probed() -> None:
    """As when a Service drops a lost pod: its first failed call moves its sessions, no probe (which to a
    vanished address may wait seconds for a connect to fail)."""
    with replicas(2) as (servers, transport, counters), EnvhubClient(transport) as client:
        sessions = [client.create_session("toy", f"train-count/{i % 4}").session_id for i in range(8)]
        for _ in range(3):
            client.step_many([(session, "count") for session in sessions])
        transport.settle()
        killed, left = servers
        assert transport.pool.discovery is not None
        transport.pool.discovery = dataclasses.replace(transport.pool.discovery, resolve=lambda: [left.target])
        killed.process.kill()
        killed.process.wait(timeout=60)
        counters[killed.target].calls.clear()

        results = client.step_many([(session, "count") for session in sessions])
        assert texts(results) == [f"train-count/{i % 4} seed 0: 4" for i in range(8)]
        assert transport.recoveries == 4
        assert counters[killed.target].calls == {"StepBatch": 1}, "the failed batch, no probe"
        for session in sessions:
            client.close_session(session)


def test_threads_stepping_sessions_of_a_killed_replica_wait_for_one_move() -> None:
    with replicas(2) as (servers, transport, counters), EnvhubClient(transport) as client:
        sessions = [client.create_session("toy", "train-count/0").session_id for _ in range(16)]
        for session in sessions:
            client.step(session, "count")
        transport.settle()
        servers[1].process.kill()
        servers[1].process.wait(timeout=60)
        with ThreadPoolExecutor(8) as threads:
            results = list(threads.map(lambda session: client.step(session, "count"), sessions))
        assert texts(results) == ["train-count/0 seed 0: 2"] * 16
        assert transport.recoveries == 8
        probes = counters[servers[1].target].calls["ListEnvironments"]
        assert probes <= 1 + 8, "each thread probes at most once, most wait for the move already running"
        frozen = sum(counters[servers[1].target].calls.values())
        assert [client.step(session, "count").step_index for session in sessions] == [3] * 16
        assert sum(counters[servers[1].target].calls.values()) == frozen


def test_a_draining_replica_is_not_asked_again_and_its_sessions_move_by_fresh_snapshots() -> None:
    with replicas(2, "--drain-migrate", "60") as (servers, transport, counters), EnvhubClient(transport) as client:
        sessions = [client.create_session("toy", f"train-count/{i % 4}").session_id for i in range(8)]
        for _ in range(3):
            client.step_many([(session, "count") for session in sessions])
        leaving = servers[0]
        transport.settle()
        leaving.process.send_signal(signal.SIGTERM)
        wait_until_draining(leaving.target)
        counters[leaving.target].calls.clear()

        results = client.step_many([(session, "count") for session in sessions])
        assert texts(results) == [f"train-count/{i % 4} seed 0: 4" for i in range(8)]
        assert (transport.migrations, transport.recoveries) == (4, 4), "moved by fresh snapshots, nothing replayed"
        calls = counters[leaving.target].calls
        assert calls == {"StepBatch": 1, "CreateSnapshot": 4, "CloseSession": 4}, f"a refusal was retried: {calls}"
        staying = counters[servers[1].target].calls
        assert (staying["RestoreSnapshotBatch"], staying["RestoreSnapshot"]) == (1, 0), f"one restore call: {staying}"
        assert leaving.process.wait(timeout=60) == 0, "its sessions moved away, the drained replica exits"
        for session in sessions:
            client.close_session(session)


def test_sessions_lost_with_their_worker_are_rebuilt_from_their_snapshots() -> None:
    with replicas(1) as (servers, transport, _), EnvhubClient(transport) as client:
        sessions = [client.create_session("toy", f"train-count/{i % 4}").session_id for i in range(8)]
        for _ in range(3):
            client.step_many([(session, "count") for session in sessions])
        workers = [pid for pid in tree_pids(servers[0].process.pid) if is_worker(pid)]
        assert len(workers) == 2
        os.kill(workers[0], signal.SIGKILL)  # half the sessions are lost with it, mid-rollout

        results = client.step_many([(session, "count") for session in sessions])
        assert texts(results) == [f"train-count/{i % 4} seed 0: 4" for i in range(8)]
        assert transport.recoveries == 4, "the sessions of the killed worker, rebuilt on the same replica"
        assert [client.step(session, "count").step_index for session in sessions] == [5] * 8
        for session in sessions:
            client.close_session(session)


def test_a_session_reset_after_steps_is_rebuilt_in_its_new_episode() -> None:
    """The steps of the episode before a reset are not replayed on the new episode's snapshot."""
    with replicas(2) as (servers, transport, _), EnvhubClient(transport) as client:
        sessions = [client.create_session("toy", "train-count/0").session_id for _ in range(4)]
        for _ in range(3):  # a background snapshot after the 2nd step, the 3rd held to replay
            client.step_many([(session, "count") for session in sessions])
        transport.settle()
        for session in sessions:
            client.reset_session(session, task="train-count/1")
            client.step(session, "count")
        transport.settle()
        servers[0].process.kill()
        servers[0].process.wait(timeout=60)

        results = client.step_many([(session, "count") for session in sessions])
        assert texts(results) == ["train-count/1 seed 0: 2"] * 4
        assert transport.recoveries == 2
        for session in sessions:
            client.close_session(session)


def test_the_snapshots_a_turn_makes_due_are_handed_over_off_the_callers_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """A turn returns without handing each due snapshot to the snapshot threads itself (for 1,024 sessions that
    held it up 0.27 s, design note 035), and `settle` still waits for every one of them."""
    with replicas(2) as (_, transport, counters), EnvhubClient(transport) as client:
        sessions = [client.create_session("toy", f"train-count/{i % 4}").session_id for i in range(24)]
        transport.settle()
        handing_over: set[str] = set()
        submit = transport._renewals.submit

        def recorded(*args: Any, **kwargs: Any) -> Any:
            handing_over.add(threading.current_thread().name)
            return submit(*args, **kwargs)

        monkeypatch.setattr(transport._renewals, "submit", recorded)
        for counter in counters.values():
            counter.calls.clear()
        for _ in range(2):  # the 2nd step makes every session due
            client.step_many([(session, "count") for session in sessions])
        transport.settle()

        assert handing_over and threading.current_thread().name not in handing_over
        assert sum(counter.calls["CreateSnapshot"] for counter in counters.values()) == 24
        for session in sessions:
            tracked = transport.tracked(session)
            assert tracked is not None and tracked.snapshot is not None
            assert (tracked.snapshot.step_index, tracked.replay) == (2, []), "settled: every due snapshot is in"
        for session in sessions:
            client.close_session(session)
