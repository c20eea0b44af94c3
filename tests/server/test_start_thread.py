"""Session starts on their own thread (design note 031): a step is answered while a create, reset or fork of
another session is being applied in the same worker, and one session's operations keep their order.

The toy kind's `held_starts` task resets through its gate (FIFOs the test releases), so a start is held inside
the worker for as long as the test wants; nothing is timed.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from envhub.client import EnvhubClient
from envhub.server.background import BackgroundServer
from envhub.testing import REFERENCE, Gate, InFlight

READY, HELD = "train-count/0", "train-count/1"


def _serving(gate: Gate, concurrent: bool = True) -> BackgroundServer:
    """One toy worker whose starts on task HELD wait at `gate`."""
    config = {
        REFERENCE: {"gate": str(gate.folder), "held_starts": HELD, "concurrent_starts": "1" if concurrent else "0"}
    }
    return BackgroundServer.local(REFERENCE, workers=1, environment_config=config)


def test_a_step_is_answered_while_a_create_is_applied_in_the_same_worker(tmp_path: Path) -> None:
    gate = Gate.create(tmp_path / "gate")
    with _serving(gate) as server, EnvhubClient(server.target, timeout=60) as client:
        other = client.create_session("toy", READY).session_id
        creating = InFlight(lambda: client.create_session("toy", HELD))
        gate.wait_entered()  # the create is inside the worker, held
        assert client.step(other, "inc").step_index == 1
        assert client.snapshot(other) is not None
        gate.release()  # only now can the create finish: the step and the snapshot did not wait for it
        created = creating.outcome()
        assert client.step(created.session_id, "inc").step_index == 1


def test_a_step_sent_during_its_sessions_reset_is_applied_after_it(tmp_path: Path) -> None:
    gate = Gate.create(tmp_path / "gate")
    with _serving(gate) as server, EnvhubClient(server.target, timeout=60) as client:
        held = client.create_session("toy", READY).session_id
        other = client.create_session("toy", READY).session_id
        for _ in range(2):
            client.step(held, "inc")
        resetting = InFlight(lambda: client.reset_session(held, task=HELD))
        gate.wait_entered()
        stepping = InFlight(lambda: client.step(held, "inc"))
        assert client.step(other, "inc").step_index == 1  # others' steps go on meanwhile (starts wait: one thread)
        gate.release()
        assert resetting.outcome().view.step_index == 0
        stepped = stepping.outcome()
        assert (stepped.step_index, stepped.text) == (1, f"{HELD} seed 0: 1")  # after the reset


@pytest.mark.parametrize("concurrent", [True, False])
def test_forks_of_a_stepping_session_equal_its_state_at_the_fork(tmp_path: Path, concurrent: bool) -> None:
    gate = Gate.create(tmp_path / "gate")
    with _serving(gate, concurrent) as server, EnvhubClient(server.target, timeout=60) as client:
        source = client.create_session("toy", READY).session_id
        results: list[Any] = []
        steps = threading.Thread(target=lambda: results.extend(client.step(source, "inc") for _ in range(20)))
        steps.start()
        forks = [client.fork(source, 2) for _ in range(5)]
        steps.join(timeout=60)
        assert [result.step_index for result in results] == list(range(1, 21))
        for copies in forks:
            indices = {client.step(copy, "inc").step_index for copy in copies}
            assert len(indices) == 1 and 1 <= indices.pop() <= 21
