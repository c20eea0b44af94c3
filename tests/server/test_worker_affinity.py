"""New sessions of a task go to the worker already holding that task's sessions (its game loaded), within
`AFFINITY_SLACK` of the least-loaded worker: a restored group lands together, as a forked one does."""

from __future__ import annotations

from envhub.client import EnvhubClient
from envhub.server.background import BackgroundServer
from envhub.server.pool import AFFINITY_SLACK
from envhub.testing import REFERENCE


def _worker_of(server: BackgroundServer, session_id: str) -> int:
    [index] = [i for i, worker in enumerate(server.server.pool.workers()) if session_id in worker.sessions]
    return index


def test_sessions_of_a_task_gather_on_the_worker_holding_it_up_to_the_slack() -> None:
    with BackgroundServer.local(REFERENCE, workers=2) as server, EnvhubClient(server.target) as client:
        first = client.create_session("toy", "train-count/0").session_id
        home = _worker_of(server, first)
        snapshot = client.snapshot(first)
        restored = [client.restore(snapshot).session_id for _ in range(AFFINITY_SLACK - 1)]
        created = client.create_session("toy", "train-count/0").session_id  # home: SLACK sessions before it
        assert {_worker_of(server, session) for session in [*restored, created]} == {home}
        beyond = client.restore(snapshot).session_id  # home holds SLACK + 1 more than the other worker
        assert _worker_of(server, beyond) != home, "past the slack, the least-loaded worker again"
        other = client.create_session("toy", "train-count/1").session_id
        assert _worker_of(server, other) != home, "another task goes to the least-loaded worker"
        moved = client.reset_session(other, task="train-count/0")
        assert moved.view.text.startswith("train-count/0")
        assert server.server.pool.workers()[1 - home].tasks["train-count/0"] == 2  # `other` and `beyond`
