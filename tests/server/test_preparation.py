"""No head-of-line blocking: a create on an unprepared task waits in the preparation lane, not in the worker's queue.

The toy kind's `unprepared` task is prepared through its gate (a FIFO the test releases), so the
create is held for as long as the test wants; nothing is timed.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import grpc
import pytest

from envhub.client import EnvhubClient, EnvhubError
from envhub.core.errors import EnvhubError as CoreError
from envhub.server import worker_ops as ops
from envhub.server.background import BackgroundServer
from envhub.server.worker_process import WorkerState
from envhub.testing import REFERENCE, Gate, ToyKind

READY, SLOW = "train-count/0", "train-count/1"


def _serving(gate: Gate) -> BackgroundServer:
    """One toy worker whose task SLOW is prepared through `gate`."""
    config = {REFERENCE: {"gate": str(gate.folder), "unprepared": SLOW}}
    return BackgroundServer.local(REFERENCE, workers=1, environment_config=config)


def test_a_step_completes_while_a_slow_create_on_the_same_worker_is_in_flight(tmp_path: Path) -> None:
    gate = Gate.create(tmp_path / "gate")
    with _serving(gate) as server, EnvhubClient(server.target, timeout=60) as client:
        other = client.create_session("toy", READY).session_id
        created: list[Any] = []
        creating = threading.Thread(target=lambda: created.append(client.create_session("toy", SLOW)))
        creating.start()
        gate.wait_entered()  # the create is being prepared, and cannot finish before the release
        stepped = client.step(other, "inc")
        assert stepped.step_index == 1
        assert not created  # the step did not wait for the create
        gate.release()
        creating.join(timeout=60)
        [session] = created
        assert client.step(session.session_id, "inc").step_index == 1
        again = client.create_session("toy", SLOW)  # prepared now: no gate to pass
        assert again.view.step_index == 0


def test_a_create_closed_while_its_task_is_prepared_never_starts(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    state = WorkerState(ToyKind(gate=str(gate), unprepared=SLOW))
    create = ops.Create("s1", SLOW, 0, {}, 0, False)
    unprepared = state.unprepared_task(create)
    assert unprepared is not None and unprepared[0] == "s1"
    state.preparing.add("s1")
    assert state.handle(ops.Close("s1")) is None  # the server gave up on it before it started
    with pytest.raises(CoreError) as refused:
        state.handle(create)
    assert (refused.value.code, refused.value.reason) == (grpc.StatusCode.ABORTED, "CLOSED")
    assert "s1" not in state.sessions
    assert state.unprepared_task(ops.Create("s2", READY, 0, {}, 0, False)) is None


def test_a_create_that_outlives_its_deadline_in_preparation_leaves_no_session(tmp_path: Path) -> None:
    gate = Gate.create(tmp_path / "gate")
    with _serving(gate) as server, EnvhubClient(server.target, timeout=60) as client:
        failed: list[BaseException] = []

        def create() -> None:
            try:
                client.create_session("toy", SLOW, timeout=1.0)
            except EnvhubError as error:
                failed.append(error)

        creating = threading.Thread(target=create)
        creating.start()
        gate.wait_entered()
        creating.join(timeout=60)  # the deadline passes while the task is held at the gate
        [error] = failed
        assert isinstance(error, EnvhubError) and error.code == grpc.StatusCode.DEADLINE_EXCEEDED
        gate.release()
        assert client.create_session("toy", SLOW).view.step_index == 0  # the worker serves on
