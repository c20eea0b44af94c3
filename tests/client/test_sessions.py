"""The session port (`Sessions`) over a real server (the toy kind): what every integration and the trainer play."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from envhub.client import EnvhubClient, EnvhubError, EnvView, SessionPort, Sessions, StatusCode
from envhub.server.background import BackgroundServer
from envhub.testing import REFERENCE

TASK = "train-count/0"


@pytest.fixture(scope="module")
def server() -> Iterator[BackgroundServer]:
    with BackgroundServer.local(REFERENCE, workers=2, max_sessions=64) as s:
        yield s


@pytest.fixture()
def sessions(server: BackgroundServer) -> Iterator[Sessions]:
    port = Sessions.connect(server.target, "toy", options={"success_reward": "5"}, max_steps=3)
    yield port
    port.close()


def test_a_session_starts_steps_and_ends_as_views(sessions: SessionPort) -> None:
    assert sessions.task_ids("test") == [f"test-count/{i}" for i in range(4)]
    assert sessions.task_ids("test", families=["no-such-family"]) == []
    view = sessions.start(TASK, seed=2)
    assert (view.text, view.step_index, view.admissible, view.reward, view.done) == (
        "train-count/0 seed 2: 0",
        0,
        ("inc", "win"),
        0.0,
        False,
    )
    stepped = sessions.step(view.session_id, "inc")
    assert (stepped.session_id, stepped.text, stepped.step_index, stepped.info) == (
        view.session_id,
        "train-count/0 seed 2: 1",
        1,
        {"count": 1},
    )
    assert sessions.expert(view.session_id) == ["win"]
    won = sessions.step(view.session_id, "win")
    assert won.won and won.terminated and won.reward == 5.0, "the port's options reach every session"
    again = sessions.reset(view.session_id, task="test-count/1", seed=3)
    assert (again.session_id, again.text, again.step_index) == (view.session_id, "test-count/1 seed 3: 0", 0)
    sessions.end(view.session_id)
    with pytest.raises(EnvhubError) as caught:
        sessions.step(view.session_id, "inc")
    assert caught.value.code == StatusCode.NOT_FOUND


def test_the_port_step_limit_applies_unless_a_start_gives_its_own(sessions: SessionPort) -> None:
    short = sessions.start(TASK)
    assert [sessions.step(short.session_id, "inc").truncated for _ in range(3)] == [False, False, True]
    long = sessions.start(TASK, max_steps=10)
    assert not any(sessions.step(long.session_id, "inc").truncated for _ in range(3))
    for view in (short, long):
        sessions.end(view.session_id)


def test_steps_of_many_sessions_go_together_with_errors_in_place(sessions: SessionPort) -> None:
    first, second = (sessions.start(TASK).session_id for _ in range(2))
    answers = sessions.step_each([(first, "inc"), ("nosuchreplica.0", "inc"), (second, "inc")])
    assert isinstance(answers[0], EnvView) and isinstance(answers[2], EnvView)
    assert [answers[0].session_id, answers[2].session_id] == [first, second]
    assert isinstance(answers[1], EnvhubError) and answers[1].code == StatusCode.NOT_FOUND
    with pytest.raises(EnvhubError):  # every step ran, then the failure is raised
        sessions.step_many([(first, "inc"), (second, "")])
    assert sessions.step(first, "inc").step_index == 3
    for session_id in (first, second):
        sessions.end(session_id)


def test_snapshots_and_forks_continue_the_same_episode(sessions: SessionPort) -> None:
    view = sessions.start(TASK)
    sessions.step(view.session_id, "inc")
    snapshot = sessions.snapshot(view.session_id)
    restored = sessions.restore(snapshot)
    forks = sessions.fork(view.session_id, 2)
    assert restored.session_id not in (view.session_id, *forks) and len(set(forks)) == 2
    assert (restored.text, restored.step_index, restored.reward) == ("train-count/0 seed 0: 1", 1, 0.0)
    assert sessions.step(restored.session_id, "inc") == sessions.step(forks[0], "inc"), "equal views, other ids"
    for session_id in (view.session_id, restored.session_id, *forks):
        sessions.end(session_id)


def test_views_list_admissible_actions_only_when_the_port_asks(server: BackgroundServer) -> None:
    with EnvhubClient(server.target) as client:
        quiet = Sessions(client, "toy", admissible=False)
        view = quiet.start(TASK)
        assert view.admissible is None and quiet.step(view.session_id, "inc").admissible is None
        quiet.end(view.session_id)
