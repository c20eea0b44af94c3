"""ALFWorld sessions started on one thread while others step on another (a worker's start thread, design note
031) play exactly as alone: TextWorld's grammar parsers are per thread (`envhub.envs.alfworld.parsers`).

The parse memos are emptied before every start and every play, so both threads parse (on shared parsers,
this raised IndexError / FailedToken inside TatSu within a few starts).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from envhub.core.environment import TaskSpec
from envhub.core.session import Session
from envhub.envs.alfworld import memo
from envhub.envs.alfworld.kind import AlfWorldKind


def _forget_parses() -> None:
    for cached in (memo._logic_model, memo._logic_parse, memo._textgen_model, memo._conjunctive_query):
        cached.cache_clear()


def _play(kind: AlfWorldKind, task: TaskSpec, expert: str) -> list[str]:
    """Observations of 12 turns: the expert's action, and every third turn an admissible one off its path."""
    _forget_parses()
    session = Session.start(kind, task, options={"expert": expert})
    texts = [session.observation.text]
    for turn in range(12):
        if session.done:
            break
        action = session.admissible_actions()[turn] if turn % 3 == 0 else session.expert_actions()[0]
        texts.append(session.step(action).result.observation.text)
    return texts


def test_starts_beside_steps_leave_every_observation_as_alone(
    kind: AlfWorldKind, starts_beside: Callable[[Callable[[int], None]], AbstractContextManager[list[Exception]]]
) -> None:
    tasks = kind.tasks("train")
    played, started = tasks[:4], tasks[4:10]
    experts = ["observed", "planner"]
    alone = {(task.task_id, expert): _play(kind, task, expert) for task in played for expert in experts}

    def start(turn: int) -> None:
        _forget_parses()
        Session.start(kind, started[turn % len(started)])

    with starts_beside(start) as failures:
        beside = {(task.task_id, expert): _play(kind, task, expert) for task in played for expert in experts}
    assert failures == []
    assert beside == alone
