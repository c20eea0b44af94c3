"""`envhub serve` as a real process: SIGTERM drains (NOT_SERVING at once, every new call refused with
DRAINING, the in-flight call completes, exit 0). The toy kind's gate holds the call; nothing is timed."""

from __future__ import annotations

import signal
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from envhub.bench.procs import ServerProcess
from envhub.client import EnvhubClient, EnvhubError, RetryPolicy, StepResult
from envhub.testing import REFERENCE, Gate, InFlight


def test_sigterm_drains_in_flight_calls_then_exits_zero(tmp_path: Path) -> None:
    gate = Gate.create(tmp_path / "gate")
    extra = ["--set", f"{REFERENCE}.gate={gate.folder}"]
    with (
        ServerProcess(REFERENCE, extra=extra) as server,
        EnvhubClient(server.target, policy=RetryPolicy(attempts=1)) as client,
        grpc.insecure_channel(server.target) as channel,
    ):
        session = client.create_session("toy", "train-count/0").session_id
        in_flight = InFlight(lambda: client.step(session, "wait"))
        gate.wait_entered()  # the call is inside the environment
        server.process.send_signal(signal.SIGTERM)
        health = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service="envhub.v1.EnvHub")
        while health.Check(request, timeout=30).status == health_pb2.HealthCheckResponse.SERVING:
            pass  # until the server has handled the signal
        with pytest.raises(EnvhubError) as refused:
            client.list_environments(timeout=30)
        assert (refused.value.code, refused.value.reason) == (grpc.StatusCode.UNAVAILABLE, "DRAINING")
        gate.release()
        result = in_flight.outcome()
        assert isinstance(result, StepResult), result
        assert result.observation.step_index == 1
        assert server.process.wait(timeout=60) == 0
