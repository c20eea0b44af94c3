"""The versioned experience buffer: rows, versions, the gate, diagnostics, batches for SyncGroups."""

from __future__ import annotations

import pytest

from trainer.batching import SyncGroups
from trainer.batching.buffer import ExperienceBuffer, turn_is_valid, turn_score
from trainer.batching.divopd import SamplerSettings
from trainer.batching.divopd_stats import ARRIVAL_DRAIN_RATIO, NEVER_SELECTED_SHARE, STALE_PENDING_ROWS, STALE_ROWS
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


ACCOUNTED = (
    "divopd/batched_rows",
    "divopd/invalid_rows",
    STALE_ROWS,
    STALE_PENDING_ROWS,
    "divopd/expired_rows",
    "divopd/queued_rows",
    "divopd/pending_rows",
)


@pytest.mark.parametrize(
    ("reader", "stale", "stale_pending", "left", "never"),
    [
        # reads B = 2 a update from the head: d's rows sit in the queue until they are stale
        ("vanilla", 2, 0, 6, 1 / 5),
        # reads up to c*B = 4: every row is seen fresh; c's and d's second turns age out pending
        ("divopd", 0, 2, 6, 0.0),
    ],
)
def test_stale_accounting_under_producer_overload(
    reader: str, stale: int, stale_pending: int, left: int, never: float
) -> None:
    """4 rows arrive per update (version q at update q), the learner trains 2, delta = 1: a backlog.

    Both readers drop the same number of rows (the surplus has to go somewhere); vanilla lets them
    go stale unread in its queue, divopd reads them while fresh and passes them over.
    """
    buffer = ExperienceBuffer(
        SamplerSettings(reader=reader, batch_rows=2, pool_multiplier=2, initial_cap=1, max_staleness=1)  # type: ignore[arg-type]
    )
    for q, names in enumerate(["ab", "cd", "ef", "gh"]):
        buffer.push([rollout(name, [make_turn(gap=0.1), make_turn(gap=0.9)]) for name in names], version=q)
        taken = buffer.take(q)
        assert taken.rows == 2
    m = taken.metrics
    assert (m[STALE_ROWS], m[STALE_PENDING_ROWS]) == (stale, stale_pending)
    assert m["divopd/queued_rows"] + m["divopd/pending_rows"] == left
    assert m["divopd/arrived_rows"] == 16 and m["divopd/batched_rows"] == 8
    assert sum(m[key] for key in ACCOUNTED) == m["divopd/arrived_rows"]
    assert m[NEVER_SELECTED_SHARE] == pytest.approx(never)


def test_audit_pool_is_the_candidate_pool_with_the_batch_and_its_rollouts_marked() -> None:
    # DivOPD, B = 2, k = 1: rollout a (3 valid turns, gaps 0.1/0.9/0.5 + a teacher turn), rollout b (1 turn)
    buffer = ExperienceBuffer(SamplerSettings(batch_rows=2, pool_multiplier=4, initial_cap=1))
    a = [make_turn(gap=0.1), make_turn(gap=0.9), make_turn(gap=0.5), make_turn(teacher=True)]
    b, c = make_turn(gap=0.2), make_turn(gap=0.3)
    buffer.push([rollout("a", a), rollout("b", [b]), rollout("c", [c])], version=0)
    taken = buffer.take(0, audit=True)
    pool = taken.audit
    assert pool is not None and taken.rows == 2
    assert [t.task_id for t in pool.trajectories] == ["a", "b", "c"]  # the valid pool, teacher turn gated out
    assert [t.turns for t in pool.trajectories] == [a[:3], [b], [c]]
    assert pool.selected == [False, True, False, True, False]  # a's top-s(u) turn (gap 0.9) and b's
    assert pool.counted == [True, True, True, True, False]  # c gave the batch nothing: outside Table 10's scope
    assert SyncGroups("history").compose(pool.trajectories).num_rows == len(pool.selected)
    assert buffer.take(1).audit is None  # only when asked


def test_audit_pool_of_a_reader_without_a_pool_is_the_queue_head_it_read_from() -> None:
    buffer = ExperienceBuffer(SamplerSettings(reader="gate-only", batch_rows=2, pool_multiplier=2))
    buffer.push([rollout("a", [make_turn(teacher=True), *(make_turn() for _ in range(5))])], version=0)
    pool = buffer.take(0, audit=True).audit
    assert pool is not None
    assert pool.selected == [True, True, False]  # the first c*B = 4 queue rows, the teacher turn gated out
    assert pool.counted == [True] * 3
