"""`envhub serve` as a real process: SIGTERM drains (NOT_SERVING at once, every new call but
CreateSnapshot and CloseSession refused with DRAINING, the in-flight call completes, exit 0; with
`--drain-migrate`, exit once the open sessions are closed). The toy kind's gate holds the call;
nothing is timed."""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from envhub.bench.procs import ServerProcess
from envhub.client import EnvhubClient, EnvhubError, EnvView, RetryPolicy
from envhub.server.background import BackgroundServer
from envhub.testing import REFERENCE, Gate, InFlight, wait_until_draining


def test_sigterm_drains_in_flight_calls_then_exits_zero(tmp_path: Path) -> None:
    gate = Gate.create(tmp_path / "gate")
    extra = ["--set", f"{REFERENCE}.gate={gate.folder}"]
    with (
        ServerProcess(REFERENCE, extra=extra) as server,
        EnvhubClient(server.target, policy=RetryPolicy(attempts=1)) as client,
    ):
        session = client.create_session("toy", "train-count/0").session_id
        in_flight = InFlight(lambda: client.step(session, "wait"))
        gate.wait_entered()  # the call is inside the environment
        server.process.send_signal(signal.SIGTERM)
        wait_until_draining(server.target)
        with pytest.raises(EnvhubError) as refused:
            client.list_environments(timeout=30)
        assert (refused.value.code, refused.value.reason) == (grpc.StatusCode.UNAVAILABLE, "DRAINING")
        gate.release()
        result = in_flight.outcome()
        assert isinstance(result, EnvView), result
        assert result.step_index == 1
        assert server.process.wait(timeout=60) == 0


def test_a_draining_server_lets_clients_move_sessions_then_exits_when_none_is_left() -> None:
    with (
        ServerProcess(REFERENCE, extra=["--drain-migrate", "60"]) as server,
        EnvhubClient(server.target, policy=RetryPolicy(attempts=1)) as client,
    ):
        first, second = (client.create_session("toy", "train-count/0").session_id for _ in range(2))
        client.step(first, "count")
        server.process.send_signal(signal.SIGTERM)
        wait_until_draining(server.target)
        for refused_call in (
            lambda: client.step(first, "count"),
            lambda: client.create_session("toy", "train-count/0"),
            lambda: client.fork(first),
        ):
            with pytest.raises(EnvhubError) as refused:
                refused_call()
            assert (refused.value.code, refused.value.reason) == (grpc.StatusCode.UNAVAILABLE, "DRAINING")
        assert client.snapshot(first).step_index == 1, "a snapshot is admitted: the session can move"
        client.close_session(first)
        assert server.process.poll() is None, "a session is still open: the server waits for it to move"
        client.close_session(second)
        assert server.process.wait(timeout=60) == 0


def test_a_session_reaped_in_the_drain_window_lets_the_server_stop_early() -> None:
    with (
        BackgroundServer.local(REFERENCE, drain_migrate_s=60.0) as server,
        EnvhubClient(server.target) as client,
        ThreadPoolExecutor(1) as pool,
    ):
        client.create_session("toy", "train-count/0")
        drained = pool.submit(server.run, server.server.drain(grace=60))
        wait_until_draining(server.target)
        assert not drained.done(), "a session is open: the server waits for it"

        async def reap_everything() -> list[str]:
            return server.server.reap(time.monotonic() + 1e9)

        assert len(server.run(reap_everything())) == 1
        drained.result(timeout=30)  # well inside the 60 s window: the reaped session ended the wait
