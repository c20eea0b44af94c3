"""The versioned experience buffer: rows, versions, the gate, diagnostics, batches for SyncGroups."""

from __future__ import annotations

import pytest

from trainer.batching import SyncGroups
from trainer.batching.buffer import ExperienceBuffer, turn_is_valid, turn_score
from trainer.batching.divopd import SamplerSettings
from trainer.batching.divopd_stats import ARRIVAL_DRAIN_RATIO, NEVER_SELECTED_SHARE, STALE_ROWS
from trainer.rollout.types import Trajectory, Turn


def make_turn(n: int = 2, *, gap: float = 0.5, teacher: bool = False, scored: bool = True) -> Turn:
    return Turn(
        prompt_ids=[1, 2, 3],
        response_ids=[4 + i for i in range(n)],
        logp_old=[-1.0] * n,
        response_text="x",
        action="look",
        observation="o",
        teacher=teacher,
        logp_teacher=[-1.0 - gap] * n if scored else None,
    )


def rollout(task: str, turns: list[Turn], won: bool = False) -> Trajectory:
    return Trajectory(task_id=task, group=0, seed=1, turns=turns, won=won)


def test_gate_and_score() -> None:
    assert turn_is_valid(make_turn())
    assert not turn_is_valid(make_turn(teacher=True))
    assert not turn_is_valid(make_turn(scored=False))
    assert not turn_is_valid(make_turn(n=0))
    assert turn_score(make_turn(n=3, gap=0.5)) == pytest.approx(1.5)
    assert turn_score(make_turn(scored=False)) == 0.0


def test_take_returns_selected_turns_grouped_by_rollout_and_composable() -> None:
    buffer = ExperienceBuffer(SamplerSettings(batch_rows=3, pool_multiplier=2, initial_cap=1))
    small = [make_turn(gap=0.1), make_turn(gap=0.9), make_turn(teacher=True)]
    assert buffer.push([rollout("a", small, won=True), rollout("b", [make_turn()])], version=0) == 4
    taken = buffer.take(0)
    assert taken.rows == 3
    assert [t.task_id for t in taken.trajectories] == ["a", "b"]
    assert [len(t.turns) for t in taken.trajectories] == [2, 1]
    # within rollout "a": turn order is kept in the pseudo-trajectory
    assert taken.trajectories[0].turns == small[:2]
    assert taken.trajectories[0].won
    batch = SyncGroups("history").compose(taken.trajectories)
    assert batch.num_rows == 3 and batch.logp_teacher is not None
    assert buffer.available() == 0


def test_versions_expire_rows_and_diagnostics_accumulate() -> None:
    buffer = ExperienceBuffer(SamplerSettings(reader="vanilla", batch_rows=2, max_staleness=1))
    buffer.push([rollout("a", [make_turn() for _ in range(6)])], version=0)
    first = buffer.take(0)
    assert first.rows == 2
    buffer.push([rollout("b", [make_turn()])], version=2)
    second = buffer.take(2)  # v_min = 1: the four queued version-0 rows are stale
    assert second.rows == 1 and [t.task_id for t in second.trajectories] == ["b"]
    assert second.metrics[STALE_ROWS] == 4
    assert second.metrics[ARRIVAL_DRAIN_RATIO] == pytest.approx(7 / 3)
    assert second.metrics[NEVER_SELECTED_SHARE] == 0.0
    assert second.metrics["divopd/teacher_tokens_per_trained_token"] == pytest.approx(14 / 6)


def test_vanilla_spends_slots_on_invalid_rows() -> None:
    buffer = ExperienceBuffer(SamplerSettings(reader="vanilla", batch_rows=2))
    buffer.push([rollout("a", [make_turn(teacher=True), make_turn()])], version=0)
    taken = buffer.take(0)
    assert taken.rows == 2
    assert [len(t.turns) for t in taken.trajectories] == [1]


def test_empty_buffer_gives_an_empty_batch() -> None:
    taken = ExperienceBuffer(SamplerSettings()).take(0)
    assert taken.rows == 0 and taken.trajectories == []
