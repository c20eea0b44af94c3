"""ScienceWorld sessions started on one thread while others step on another (a worker's start thread, design
notes 031 and 034) play exactly as alone: the JVM-global random and object-id counter are taken in turns
(`Jvm.turns`).

grow-fruit/0's gold path draws from the JVM-global random from pollination on (step ~60), and a load sets the
global object-id counter back to 0: without turns, a start's load or replayed actions running between a step's
seeding and its draws change that step's observation, and the replays of restores on the start thread diverge.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest

from envhub.core.session import Session
from envhub.envs.scienceworld.kind import ScienceWorldKind

RANDOM_TASK = "grow-fruit/0"
WALK = 66
"""Steps of its gold path played: past pollination, where steps draw from the JVM-global random."""
STARTED = ("boil/0", "melt/1", "grow-plant/0")
"""Tasks whose sessions the start thread creates."""


def _walk(kind: ScienceWorldKind, actions: list[str], seed: int) -> list[str]:
    session = Session.start(kind, kind.task(RANDOM_TASK), seed=seed)
    try:
        return [session.observation.text] + [session.step(action).result.observation.text for action in actions]
    finally:
        session.close()


def _first_text(kind: ScienceWorldKind, task_id: str) -> str:
    session = Session.start(kind, kind.task(task_id), seed=11)
    session.close()
    return session.observation.text


@pytest.mark.slow
def test_starts_beside_steps_leave_every_observation_as_alone(
    kind: ScienceWorldKind, starts_beside: Callable[[Callable[[int], None]], AbstractContextManager[list[Exception]]]
) -> None:
    source = Session.start(kind, kind.task(RANDOM_TASK), seed=3)
    walk = source.expert_actions()[:WALK]
    for action in walk:
        source.step(action)
    state = source.state()  # a restore replays all of it, verified against its digests
    source.close()
    seeds = (1, 2, 3)
    alone = {seed: _walk(kind, walk, seed) for seed in seeds}
    started_alone = {task_id: _first_text(kind, task_id) for task_id in STARTED}
    restores: list[str] = []
    started: dict[str, set[str]] = {task_id: set() for task_id in STARTED}

    def start(turn: int) -> None:
        task_id = STARTED[turn % len(STARTED)]
        started[task_id].add(_first_text(kind, task_id))
        restored = Session.restore(kind, state)
        restores.append(restored.observation.text)
        restored.close()

    with starts_beside(start) as failures:
        beside = {seed: _walk(kind, walk, seed) for seed in seeds}
    assert failures == []
    assert restores and set(restores) == {alone[3][-1]}
    assert beside == alone
    assert all(texts <= {started_alone[task_id]} for task_id, texts in started.items())
