"""Fork-state selection and the `tree` section's checks."""

from __future__ import annotations

import math
import random

import pytest

from trainer.rollout.types import Trajectory, Turn
from trainer.tree.select import TreeConfig, select_fork_turns, turn_score


def turn(top: list[float], *, teacher_logp: float | None = None, teacher: bool = False) -> Turn:
    """A one-token turn whose top-k log-probs are `top` (the sampled token is the first)."""
    return Turn(
        prompt_ids=[1],
        response_ids=[2],
        logp_old=[top[0]],
        response_text="x",
        action="x",
        observation="o",
        top_logprobs=[[(i, lp) for i, lp in enumerate(top)]],
        logp_teacher=None if teacher_logp is None else [teacher_logp],
        teacher=teacher,
    )


SURE, UNSURE, HALF = [math.log(0.99), math.log(0.01)], [math.log(0.5), math.log(0.5)], [math.log(0.7), math.log(0.3)]


def test_entropy_forks_at_the_most_uncertain_turns() -> None:
    episode = Trajectory("t", 0, 0, turns=[turn(SURE), turn(UNSURE), turn(SURE), turn(HALF)])
    assert select_fork_turns(episode, TreeConfig(forks=2), random.Random(0)) == [1, 3]
    assert turn_score(episode.turns[1], "entropy", random.Random(0)) == pytest.approx(math.log(2))


def test_disagreement_forks_where_the_teacher_disagrees_most() -> None:
    episode = Trajectory("t", 0, 0, turns=[turn(HALF, teacher_logp=-5.0), turn(HALF, teacher_logp=-0.1)])
    assert select_fork_turns(episode, TreeConfig(forks=1, select="disagreement"), random.Random(0)) == [0]
    with pytest.raises(ValueError, match="teacher's scores"):
        select_fork_turns(Trajectory("t", 0, 0, turns=[turn(HALF)]), TreeConfig(select="disagreement"), random.Random())


def test_a_continuation_forks_only_after_its_own_first_turn_and_never_at_teacher_turns() -> None:
    turns = [turn(UNSURE), turn(UNSURE), turn(UNSURE), turn(UNSURE, teacher=True), turn(SURE)]
    child = Trajectory("t", 0, 0, turns=turns, fork=(1, 0))
    assert select_fork_turns(child, TreeConfig(forks=4), random.Random(0)) == [2, 4]
    assert select_fork_turns(Trajectory("t", 0, 0, turns=turns, dropped="X"), TreeConfig(), random.Random(0)) == []


def test_uniform_picks_distinct_turns_and_depends_on_the_seed() -> None:
    episode = Trajectory("t", 0, 0, turns=[turn(SURE) for _ in range(12)])
    picks = {
        tuple(select_fork_turns(episode, TreeConfig(forks=3, select="uniform"), random.Random(s))) for s in range(8)
    }
    assert all(len(set(p)) == 3 for p in picks) and len(picks) > 1


def test_budget_and_bad_settings() -> None:
    assert TreeConfig().branches_per_episode() == 4
    assert TreeConfig(forks=2, continuations=2, depth=2).branches_per_episode() == 4 + 16
    for bad in ({"forks": 0}, {"depth": 0}, {"continuations": 0}, {"select": "random"}, {"top_logprobs": 0}):
        with pytest.raises(ValueError, match="tree"):
            TreeConfig(**bad)  # type: ignore[arg-type]
