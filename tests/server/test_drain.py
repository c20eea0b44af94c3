"""`envhub serve` as a real process: SIGTERM drains (in-flight call completes, new calls refused, exit 0)."""

from __future__ import annotations

import signal
import threading
import time

import grpc
import pytest

from envhub.bench.procs import ServerProcess
from envhub.client import EnvhubClient, EnvhubError, SessionStart


def test_sigterm_drains_in_flight_calls_then_exits_zero() -> None:
    with ServerProcess("scienceworld") as server, EnvhubClient(server.target) as client:
        outcome: list[SessionStart | BaseException] = []

        def create() -> None:
            try:  # a fresh worker's first ScienceWorld reset takes seconds
                outcome.append(client.create_session("scienceworld", task="mendelian-genetics-known-plant/0"))
            except BaseException as error:  # handed to the test thread
                outcome.append(error)

        in_flight = threading.Thread(target=create)
        in_flight.start()
        time.sleep(0.5)
        assert in_flight.is_alive(), "the call finished before SIGTERM; the test needs a slower one"
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        with pytest.raises(EnvhubError) as refused:
            client.list_environments(timeout=5)
        assert refused.value.code == grpc.StatusCode.UNAVAILABLE
        in_flight.join(timeout=60)
        [result] = outcome
        assert isinstance(result, SessionStart), result
        assert result.observation.text
        assert server.process.wait(timeout=60) == 0
