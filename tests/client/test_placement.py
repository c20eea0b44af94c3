"""Placing new sessions over real `envhub serve` replicas (the toy kind) when some fail.

A replica that is gone (SIGKILL) or draining (SIGTERM with a call held in flight by the toy
kind's gate) before the create, or that dies between the create and the session's first
snapshot, is retired and the session placed on another; with none left the create fails with
UNAVAILABLE (NO_REPLICA_LEFT). With a `Discovery`, a replica whose address
appears later takes new sessions once `refresh_s` has passed on the pool's clock (no real DNS,
no sleeps), and a retired replica that answers again comes back.
"""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path
from typing import Any

import grpc
import pytest

from envhub.bench.procs import ServerProcess
from envhub.client import EnvhubClient, EnvhubError, EnvView, RetryPolicy
from envhub.client.endpoints import Discovery
from envhub.client.failover import FailoverTransport
from envhub.client.pool_transport import PoolTransport
from envhub.client.transport import ChannelTransport
from envhub.testing import REFERENCE, Gate, InFlight, wait_until_draining

TASK = "train-count/0"
NOBODY = "127.0.0.1:1"
"""An address with no server (connections are refused)."""


def owner(session_id: str) -> str:
    return session_id.split(".", 1)[0]


def test_new_sessions_skip_a_killed_and_a_draining_replica_until_none_is_left(tmp_path: Path) -> None:
    gate = Gate.create(tmp_path / "gate")
    with contextlib.ExitStack() as stack:
        draining = stack.enter_context(ServerProcess(REFERENCE, extra=["--set", f"{REFERENCE}.gate={gate.folder}"]))
        killed, live = (stack.enter_context(ServerProcess(REFERENCE)) for _ in range(2))
        transport = FailoverTransport.over([draining.target, killed.target, live.target])
        replica = {t.target: name for name, t in transport.pool.replicas.items()}
        client = stack.enter_context(EnvhubClient(transport))

        # A call held inside `draining` keeps it up, refusing every new call with DRAINING.
        held_client = stack.enter_context(EnvhubClient(draining.target, policy=RetryPolicy(attempts=1)))
        held = held_client.create_session("toy", TASK).session_id
        in_flight = InFlight(lambda: held_client.step(held, "wait"))
        gate.wait_entered()
        draining.process.send_signal(signal.SIGTERM)
        wait_until_draining(draining.target)
        killed.process.kill()
        killed.process.wait(timeout=60)

        sessions = [client.create_session("toy", TASK).session_id for _ in range(4)]
        assert {owner(session) for session in sessions} == {replica[live.target]}
        assert transport.pool.retired == {replica[draining.target], replica[killed.target]}
        assert [client.step(session, "count").step_index for session in sessions] == [1] * 4

        live.process.kill()
        live.process.wait(timeout=60)
        with pytest.raises(EnvhubError) as none_left:
            client.create_session("toy", TASK)
        assert (none_left.value.code, none_left.value.reason) == (grpc.StatusCode.UNAVAILABLE, "NO_REPLICA_LEFT")

        gate.release()
        assert isinstance(in_flight.outcome(), EnvView)
        assert draining.process.wait(timeout=60) == 0


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_replica_that_appears_later_takes_new_sessions_after_refresh_s() -> None:
    with ServerProcess(REFERENCE) as first, ServerProcess(REFERENCE) as second:
        addresses, clock = [NOBODY, first.target], Clock()
        pool = PoolTransport(
            discovery=Discovery(lambda: list(addresses), ChannelTransport, refresh_s=30.0, clock=clock)
        )
        with EnvhubClient(pool) as client:
            [original] = pool.replicas  # the address nobody answers at is left for later
            kept = client.create_session("toy", TASK).session_id
            addresses.append(second.target)  # a new replica answers the name now
            clock.now = 29.0
            assert owner(client.create_session("toy", TASK).session_id) == original, "not looked up again yet"
            assert list(pool.replicas) == [original]

            clock.now = 30.0
            added = owner(client.create_session("toy", TASK).session_id)
            assert added != original and set(pool.replicas) == {original, added}
            assert owner(kept) == original and client.step(kept, "count").step_index == 1

            pool.retire(original)  # as after a failed call; the replica still answers
            assert owner(client.create_session("toy", TASK).session_id) == added
            assert pool.retired == {original}
            clock.now = 60.0
            client.create_session("toy", TASK)
            assert pool.retired == set(), "a retired replica that answers again comes back"

            addresses.remove(second.target)  # its pod is not ready any more
            clock.now = 90.0
            assert owner(client.create_session("toy", TASK).session_id) == original
            assert pool.retired == {added}


def test_a_pool_whose_addresses_all_fail_to_answer_is_refused() -> None:
    with pytest.raises(EnvhubError) as none:
        PoolTransport(discovery=Discovery(lambda: [NOBODY], ChannelTransport))
    assert (none.value.code, none.value.reason) == (grpc.StatusCode.UNAVAILABLE, "NO_REPLICA_LEFT")


def test_a_discovery_refuses_a_negative_refresh() -> None:
    with pytest.raises(ValueError, match="refresh_s"):
        Discovery(lambda: [], ChannelTransport, refresh_s=-1.0)


class KillOnFirstSnapshot(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Fault injection: SIGKILL `server` (and wait for it) just before the first CreateSnapshot goes out to it."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        if details.method.endswith("/CreateSnapshot") and self.server.process.poll() is None:
            self.server.process.kill()
            self.server.process.wait(timeout=60)
        return continuation(details, request)


def test_a_new_session_whose_replica_dies_before_its_first_snapshot_is_placed_again() -> None:
    with ServerProcess(REFERENCE) as dying, ServerProcess(REFERENCE) as live:
        replicas = [
            ChannelTransport(dying.target, interceptors=[KillOnFirstSnapshot(dying)]),
            ChannelTransport(live.target),
        ]
        transport = FailoverTransport(PoolTransport(replicas))
        [first, second] = transport.pool.replicas  # placement tries `dying` first
        with EnvhubClient(transport) as client:
            session = client.create_session("toy", TASK).session_id
            assert dying.process.returncode is not None, "the first placement went to the replica that died"
            assert owner(session) == second and transport.pool.retired == {first}
            assert client.step(session, "count").step_index == 1
