"""The DivOPD sampler, step by step on hand-built pools, and its invariants as properties."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.batching.divopd import POOLED, READERS, PendingRow, RowMeta, SamplerSettings, select_batch
from trainer.batching.divopd_stats import (
    EFFECTIVE_ROLLOUTS,
    GINI,
    NEVER_SELECTED_SHARE,
    TOP1_SHARE,
    TURNS_PER_ROLLOUT,
    Utilization,
    batch_metrics,
    gini,
)


def row(r: int, t: int, score: float = 0.0, version: int = 5, valid: bool = True, tokens: int = 1) -> RowMeta:
    return RowMeta(rollout=r, turn=t, version=version, score=score, valid=valid, tokens=tokens)


def base(**kw: object) -> SamplerSettings:
    values: dict = {"reader": "divopd", "batch_rows": 4, "pool_multiplier": 2, "initial_cap": 1}
    values.update(kw)
    return SamplerSettings(**values)


def keys(rows: tuple[RowMeta, ...]) -> list[tuple[int, int]]:
    return [r.key for r in rows]


# ---------------------------------------------------------------- step 1-2: staleness, pool size


def test_stale_pending_and_fresh_rows_are_dropped_and_counted() -> None:
    pending = [PendingRow(row(0, 0, version=2), first_seen=3), PendingRow(row(0, 1, version=3), first_seen=3)]
    arrivals = [row(1, 0, version=2), row(2, 0, version=3)]
    out = select_batch(5, pending, arrivals, base(max_staleness=2))  # v_min = 3
    assert keys(out.stale_pending) == [(0, 0)]  # read while fresh at update 3, aged out pending
    assert keys(out.stale) == [(1, 0)]  # reached stale in the queue: never read fresh
    assert sorted(keys(out.selected)) == [(0, 1), (2, 0)]
    assert out.consumed == 2 and out.drained == 1


def test_v_min_is_clamped_at_zero() -> None:
    out = select_batch(1, [], [row(0, 0, version=0)], base(max_staleness=2))
    assert keys(out.selected) == [(0, 0)] and out.stale == ()


def test_reads_fresh_rows_until_the_pool_holds_c_times_b() -> None:
    pending = [PendingRow(row(9, t), first_seen=5) for t in range(3)]
    arrivals = [row(r, 0) for r in range(10)]
    out = select_batch(5, pending, arrivals, base(batch_rows=4, pool_multiplier=2))  # pool limit 8
    assert out.consumed == 5
    assert len(out.selected) + len(out.pending) == 8


def test_stale_fresh_rows_do_not_count_toward_the_pool() -> None:
    arrivals = [row(0, 0, version=0), row(1, 0), row(2, 0)]
    out = select_batch(5, [], arrivals, base(batch_rows=1, pool_multiplier=2))
    assert out.consumed == 3 and keys(out.stale) == [(0, 0)] and out.drained == 2


# ---------------------------------------------------------------- step 3: gate


def test_invalid_rows_are_dropped_for_good_and_never_pending() -> None:
    arrivals = [row(0, 0, valid=False), row(0, 1), row(1, 0, valid=False)]
    out = select_batch(5, [], arrivals, base(batch_rows=1, pool_multiplier=3))
    assert keys(out.invalid) == [(0, 0), (1, 0)]
    assert keys(out.selected) == [(0, 1)] and out.pending == ()


def test_fresh_rows_are_stamped_with_the_current_update() -> None:
    out = select_batch(7, [], [row(0, t) for t in range(3)], base(batch_rows=1, initial_cap=1))
    assert {p.first_seen for p in out.pending} == {7}


# ---------------------------------------------------------------- steps 4-7: ordering and sweeps


def test_groups_ordered_by_oldest_first_seen_then_rollout_id() -> None:
    pending = [PendingRow(row(5, 0), first_seen=2), PendingRow(row(3, 0), first_seen=4)]
    arrivals = [row(1, 0), row(4, 0)]
    out = select_batch(4, pending, arrivals, base(batch_rows=4, initial_cap=1))
    # rollout 5 first (first seen 2), then 1, 3, 4 all first seen at 4 in rollout-id order
    assert keys(out.selected) == [(5, 0), (1, 0), (3, 0), (4, 0)]


def test_within_a_rollout_highest_score_first_ties_by_turn() -> None:
    arrivals = [row(0, 0, 1.0), row(0, 1, 3.0), row(0, 2, 3.0), row(0, 3, 2.0)]
    out = select_batch(5, [], arrivals, base(batch_rows=3, initial_cap=3))
    assert keys(out.selected) == [(0, 1), (0, 2), (0, 3)]
    assert keys(tuple(p.row for p in out.pending)) == [(0, 0)]


def test_first_sweep_takes_k_per_rollout_spreading_the_budget() -> None:
    long = [row(0, t, score=10.0 + t) for t in range(6)]
    short = [row(1, 0), row(2, 0, score=0.5)]
    out = select_batch(5, [], long + short, base(batch_rows=4, pool_multiplier=4, initial_cap=2))
    assert keys(out.selected) == [(0, 5), (0, 4), (1, 0), (2, 0)]
    assert out.cap == 2


def test_cap_grows_until_the_batch_is_full() -> None:
    rows = [row(0, t, score=float(t)) for t in range(5)] + [row(1, t, score=float(t)) for t in range(2)]
    out = select_batch(5, [], rows, base(batch_rows=6, pool_multiplier=2, initial_cap=1))
    # sweep h=1: (0,4) (1,1); h=2: (0,3) (1,0); h=3: (0,2); h=4: (0,1)
    assert keys(out.selected) == [(0, 4), (1, 1), (0, 3), (1, 0), (0, 2), (0, 1)]
    assert out.cap == 4


def test_batch_stops_mid_sweep_at_b() -> None:
    rows = [row(r, t) for r in range(3) for t in range(2)]
    out = select_batch(5, [], rows, base(batch_rows=4, pool_multiplier=2, initial_cap=1))
    assert keys(out.selected) == [(0, 0), (1, 0), (2, 0), (0, 1)]
    assert len(out.pending) == 2


# ---------------------------------------------------------------- step 8: pending age


def test_pending_rows_expire_once_older_than_w() -> None:
    pending = [PendingRow(row(0, 0, version=10), first_seen=1), PendingRow(row(1, 0, version=10), first_seen=2)]
    out = select_batch(10, pending, [], base(max_pending_age=8))
    assert keys(out.expired) == [(0, 0)]  # 10 - 1 > 8; 10 - 2 = 8 is still allowed
    assert keys(out.selected) == [(1, 0)]


def test_unselected_rows_carry_their_first_seen_forward() -> None:
    first = select_batch(3, [], [row(0, t, version=3) for t in range(4)], base(batch_rows=1, pool_multiplier=4))
    second = select_batch(4, first.pending, [row(1, 0, version=4)], base(batch_rows=1, pool_multiplier=4))
    assert {p.row.key: p.first_seen for p in second.pending} == {(0, 2): 3, (0, 3): 3, (1, 0): 4}


# ---------------------------------------------------------------- focus and vanilla


def test_top_b_audit_composer_is_top_b_by_score_without_a_rollout_limit() -> None:
    rows = [row(0, t, score=10.0 + t) for t in range(3)] + [row(1, 0, score=1.0), row(2, 0, score=11.0)]
    out = select_batch(5, [], rows, base(reader="top-b", batch_rows=3, pool_multiplier=4))
    assert keys(out.selected) == [(0, 2), (0, 1), (2, 0)]  # 12, 11, 11 (tie: r=0 before r=2)
    assert out.cap == 0 and sorted(keys(out.pool)) == sorted(r.key for r in rows)


def test_vanilla_reads_in_arrival_order_without_gate_or_pool() -> None:
    arrivals = [row(3, 0, valid=False), row(1, 0, version=0), row(2, 0), row(0, 0), row(4, 0)]
    out = select_batch(5, [], arrivals, SamplerSettings(reader="vanilla", batch_rows=3))
    assert keys(out.selected) == [(3, 0), (2, 0), (0, 0)]
    assert keys(out.stale) == [(1, 0)]
    assert out.consumed == 4 and out.pending == () and out.drained == 3


def test_gate_only_is_arrival_order_whose_invalid_rows_take_no_slot() -> None:
    arrivals = [row(3, 0, valid=False), row(1, 0, version=0), row(2, 0), row(0, 0), row(4, 0), row(5, 0)]
    out = select_batch(5, [], arrivals, SamplerSettings(reader="gate-only", batch_rows=3))
    assert keys(out.selected) == [(2, 0), (0, 0), (4, 0)]  # vanilla would spend a slot on (3, 0)
    assert keys(out.invalid) == [(3, 0)] and keys(out.stale) == [(1, 0)]
    assert out.consumed == 5 and out.pending == () and out.drained == 4


def test_arrival_pool_takes_the_pool_in_arrival_order() -> None:
    pending = [PendingRow(row(4, 1, score=9.0), first_seen=3)]
    arrivals = [row(2, 0, score=1.0), row(2, 1, score=5.0, valid=False), row(1, 0, score=0.5), row(6, 0)]
    out = select_batch(5, pending, arrivals, base(reader="arrival-pool", batch_rows=2, pool_multiplier=4))
    assert keys(out.selected) == [(1, 0), (2, 0)]  # (r, t) order, no score, no cap; the gate still applies
    assert keys(out.invalid) == [(2, 1)] and sorted(keys(tuple(p.row for p in out.pending))) == [(4, 1), (6, 0)]


# ------------------------------------------------------- the paper's three variants on one constructed buffer

# Algorithm 1's pool after the gate at update 5: rollout 0 (first seen at update 3, the oldest) has six turns,
# rollouts 1 to 4 (first seen at 5) have two each. Scores: rollout 0 holds the three highest (9, 8, 7).
PAPER_POOL = [PendingRow(row(0, t, score=[1.0, 7.0, 9.0, 0.5, 0.2, 8.0][t]), first_seen=3) for t in range(6)] + [
    PendingRow(row(r, t, score=float(r) + t / 10), first_seen=5) for r in range(1, 5) for t in range(2)
]


def test_divopd_is_algorithm_1_rollout_first_then_disagreement_within() -> None:
    out = select_batch(5, PAPER_POOL, [], base(reader="divopd", batch_rows=6, pool_multiplier=8, initial_cap=2))
    # oldest rollout first, its two highest s(u) turns (9.0, 8.0), then rollouts 1, 2 in id order, best first
    assert keys(out.selected) == [(0, 2), (0, 5), (1, 1), (1, 0), (2, 1), (2, 0)]
    assert out.cap == 2


def test_divopd_base_differs_from_divopd_only_within_a_rollout() -> None:
    settings = {"batch_rows": 6, "pool_multiplier": 8, "initial_cap": 2}
    divopd = select_batch(5, PAPER_POOL, [], base(reader="divopd", **settings))
    per_rollout = Counter(r.rollout for r in divopd.selected)
    orders = set()
    for seed in range(8):
        out = select_batch(5, PAPER_POOL, [], base(reader="divopd-base", seed=seed, **settings))
        # the same rollouts, the same number of turns from each, the same cap: only which turns differs
        assert Counter(r.rollout for r in out.selected) == per_rollout and out.cap == divopd.cap
        orders.add(tuple(r.turn for r in out.selected if r.rollout == 0))
        again = select_batch(5, list(reversed(PAPER_POOL)), [], base(reader="divopd-base", seed=seed, **settings))
        assert again.selected == out.selected  # a pure function of the rows, whatever their order
    assert len(orders) > 2  # not s(u) (always turns 2 and 5): rollout 0's picks vary with the seed
    in_turn_order = select_batch(5, PAPER_POOL, [], base(reader="divopd-base", base_order="turn", **settings))
    assert keys(in_turn_order.selected) == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]


def test_divopd_focus_ranks_by_disagreement_across_rollouts_under_the_cap() -> None:
    out = select_batch(5, PAPER_POOL, [], base(reader="divopd-focus", batch_rows=6, pool_multiplier=8, initial_cap=2))
    # descending s(u) over the whole pool: 9.0 (0,2), 8.0 (0,5), then rollout 0 is at the cap (7.0 skipped),
    # 4.1 (4,1), 4.0 (4,0), 3.1 (3,1), 3.0 (3,0): no oldest-first rollout order
    assert keys(out.selected) == [(0, 2), (0, 5), (4, 1), (4, 0), (3, 1), (3, 0)]
    top_b = select_batch(5, PAPER_POOL, [], base(reader="top-b", batch_rows=6, pool_multiplier=8))
    assert Counter(r.rollout for r in top_b.selected)[0] == 3  # no rollout limit: rollout 0 gives three


def test_focus_covers_more_rollouts_than_divopd_when_disagreement_is_spread() -> None:
    """Table 9's pattern: DivOPD fills the batch from the oldest rollouts, k turns each; DivOPD-focus follows s(u),
    which spreads over more rollouts when every rollout has one or two high-disagreement turns."""
    pool = [
        PendingRow(row(r, t, score=5.0 if t == r % 4 else 0.1), first_seen=r // 4) for r in range(16) for t in range(4)
    ]
    settings = {"batch_rows": 16, "pool_multiplier": 4, "initial_cap": 4}
    divopd = batch_metrics(select_batch(3, pool, [], base(reader="divopd", **settings)).selected)
    focus = batch_metrics(select_batch(3, pool, [], base(reader="divopd-focus", **settings)).selected)
    assert divopd[EFFECTIVE_ROLLOUTS] == 4 and divopd[TURNS_PER_ROLLOUT] == 4
    assert focus[EFFECTIVE_ROLLOUTS] == 16 and focus[TURNS_PER_ROLLOUT] == 1


def test_settings_reject_unknown_reader_and_bad_sizes() -> None:
    with pytest.raises(ValueError, match="unknown reader"):
        SamplerSettings(reader="random")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch_rows"):
        SamplerSettings(batch_rows=0)


# ---------------------------------------------------------------- properties

rows_strategy = st.lists(
    st.builds(
        row,
        r=st.integers(0, 6),
        t=st.integers(0, 5),
        score=st.floats(-5, 5, allow_nan=False),
        version=st.integers(0, 10),
        valid=st.booleans(),
        tokens=st.integers(0, 9),
    ),
    max_size=40,
    unique_by=lambda r: r.key,
)


@settings(max_examples=200, deadline=None)
@given(
    rows=rows_strategy,
    split=st.integers(0, 40),
    q=st.integers(0, 12),
    reader=st.sampled_from(READERS),
    batch=st.integers(1, 8),
    c=st.integers(1, 4),
    k=st.integers(1, 4),
    delta=st.integers(0, 3),
    age=st.integers(0, 3),
    seen=st.integers(0, 12),
)
def test_selection_invariants(
    rows: list[RowMeta],
    split: int,
    q: int,
    reader: str,
    batch: int,
    c: int,
    k: int,
    delta: int,
    age: int,
    seen: int,
) -> None:
    config = SamplerSettings(
        reader=reader,  # type: ignore[arg-type]
        batch_rows=batch,
        pool_multiplier=c,
        initial_cap=k,
        max_staleness=delta,
        max_pending_age=age,
    )
    pending = [PendingRow(r, min(seen, q)) for r in rows[:split] if r.valid] if reader in POOLED else []
    arrivals = rows[split:] if reader in POOLED else rows
    out = select_batch(q, pending, arrivals, config)
    v_min = max(q - delta, 0)
    pool = {r.key for r in [p.row for p in pending] + list(arrivals[: out.consumed])}
    assert len(out.selected) <= batch
    assert all(r.version >= v_min for r in out.selected)
    assert all(r.key in pool for r in out.selected)
    assert len({r.key for r in out.selected}) == len(out.selected)
    if reader != "vanilla":
        assert all(r.valid for r in out.selected)
    if reader in POOLED:
        assert all(p.row.valid and p.row.version >= v_min for p in out.pending)
        assert len(out.pending) + len(out.selected) <= max(c * batch, len(pending))
        # every pool row is accounted for exactly once
        dropped = [*out.stale, *out.stale_pending, *out.invalid, *out.expired]
        accounted = [*out.selected, *(p.row for p in out.pending), *dropped]
        assert sorted(r.key for r in accounted) == sorted(pool)
        # the batch is as full as the valid, fresh pool allows
        assert len(out.selected) == min(batch, len(out.selected) + len(out.pending))


@settings(max_examples=100, deadline=None)
@given(rows=rows_strategy, q=st.integers(0, 12), batch=st.integers(1, 8), k=st.integers(1, 4))
def test_base_selection_is_deterministic_and_order_independent(rows: list[RowMeta], q: int, batch: int, k: int) -> None:
    config = SamplerSettings(batch_rows=batch, pool_multiplier=64, initial_cap=k)
    pending = [PendingRow(r, q) for r in rows if r.valid]
    a = select_batch(q, pending, [], config)
    b = select_batch(q, list(reversed(pending)), [], config)
    assert a.selected == b.selected


# ---------------------------------------------------------------- diagnostics


def test_batch_metrics() -> None:
    selected = (row(0, 0, tokens=6), row(0, 1, tokens=2), row(1, 0, tokens=2), row(2, 0, valid=False, tokens=5))
    m = batch_metrics(selected)
    assert m[EFFECTIVE_ROLLOUTS] == 2
    assert m[TOP1_SHARE] == pytest.approx(0.8)
    assert m[TURNS_PER_ROLLOUT] == pytest.approx(1.5)


def test_gini_values() -> None:
    assert gini([1, 1, 1, 1]) == 0.0
    assert gini([0, 0, 0, 4]) == pytest.approx(0.75)
    assert gini([]) == 0.0 and gini([0, 0]) == 0.0


def test_utilization_counts_never_selected_valid_rollouts_once_resolved() -> None:
    u = Utilization()
    rows = [row(0, 0), row(0, 1), row(1, 0), row(2, 0, valid=False)]
    u.arrived(rows)
    u.left([rows[0]], trained=True)
    u.left([rows[2], rows[3]], trained=False)
    # rollout 0 still has a row out; 1 is resolved unselected; 2 has no valid row
    assert u.metrics()[NEVER_SELECTED_SHARE] == 1.0
    u.left([rows[1]], trained=False)
    assert u.metrics()[NEVER_SELECTED_SHARE] == 0.5
    assert u.metrics()[GINI] == pytest.approx(0.5)


def test_table_10_12_14_diagnostics_on_a_constructed_update() -> None:
    from trainer.batching.divopd_stats import MEAN_ROW_AGE, DepthOutcome, focus_metrics, row_age_metrics

    pool = [
        RowMeta(0, 0, 4, 6.0, True, 2, won=True),
        RowMeta(0, 5, 4, 1.0, True, 1, won=True),
        RowMeta(1, 1, 3, 4.0, True, 4, won=False),
        RowMeta(1, 7, 3, 0.0, True, 2, won=False),
        RowMeta(2, 0, 5, 9.0, True, 3),  # a rollout the batch did not draw from: not in the audit
    ]
    selected = (pool[0], pool[2])
    # Table 12: mean q - version over what the update used up (here the batch plus one stale row)
    assert row_age_metrics(5, [*selected, RowMeta(3, 0, 1, 0.0, True)])[MEAN_ROW_AGE] == pytest.approx((1 + 2 + 4) / 3)
    # Table 10: kept turns are shallower and disagree more per token than the dropped ones of the same rollouts
    focus = focus_metrics(selected, pool)
    assert focus["divopd/focus_dropped_turn_share"] == 0.5
    assert (focus["divopd/focus_kept_depth"], focus["divopd/focus_dropped_depth"]) == (0.5, 6.0)
    assert focus["divopd/focus_kept_score_per_token"] == pytest.approx((3.0 + 1.0) / 2)
    assert focus["divopd/focus_dropped_score_per_token"] == pytest.approx((1.0 + 0.0) / 2)
    # Table 14: shares of selected turns by depth bin and outcome, over the run
    table = DepthOutcome()
    table.add(selected)
    table.add([pool[1], pool[3], RowMeta(9, 0, 5, 0.0, False)])  # the invalid row is not a trained turn
    shares = table.metrics()
    assert shares["divopd/depth_lt2_success"] == 0.25 and shares["divopd/depth_lt2_failure"] == 0.25
    assert shares["divopd/depth_4to6_success"] == 0.25 and shares["divopd/depth_ge6_failure"] == 0.25
    assert sum(shares.values()) == pytest.approx(1.0)
