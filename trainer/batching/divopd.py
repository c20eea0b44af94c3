"""The DivOPD learner-side sampler (OBJECTIVES.md section 5, paper 001 Algorithm 1), as a pure function.

`select_batch(q, pending, arrivals, settings)` decides, at learner update `q`, which turn rows enter
the batch, which stay pending and how many rows of the buffer's arrival queue it consumed. It reads
only its arguments (row metadata, never tokens) and returns a new value, so it is tested step by
step on hand-built pools and runs unchanged inside the buffer actor.

Readers (the paper's composers under the paper's names; docs/divopd.md quotes the text each follows):
* `vanilla` (Vanilla OPD): arrival order; rows older than the staleness bound are dropped, nothing else is gated.
* `divopd` (DivOPD, Algorithm 1): staleness drop, validity gate, rollout-first coverage with a growing
  per-rollout cap, within-rollout focus by cumulative disagreement s(u), pending pool with maximum age W.
* `divopd-base` (DivOPD-base): Algorithm 1 with another within-rollout selection ("DivOPD-base and DivOPD
  share these sampler values; only their within-rollout selection differs", Table 3): no s(u) focus, the turns
  of a rollout in a uniformly random order (`base_order: random`, seeded by (seed, q, r)) or in turn order.
* `divopd-focus` (DivOPD-focus, "focus-only", Table 9's highest coverage): the same pool and gate, then the
  pool's turns by descending s(u) across rollouts, each rollout giving at most h turns (h = k, growing as in
  Algorithm 1 when the cap leaves the batch short); no oldest-first rollout order.
Audit composers (Tables 11 and 13, reference rows rather than methods):
* `top-b` (Table 11 "Top-B (no rollout limit)"): the same pool and gate, then the top B turns by s(u).
* `gate-only` (Table 13 "Gate only", Table 14 "+ Gate"): vanilla's arrival order with the validity gate: invalid
  rows are dropped and take no batch slot; no pool.
* `arrival-pool` (Table 13 "Arrival order, drawn from the finite-k composer's pool"): Algorithm 1's pool and gate,
  then the first B valid rows in arrival order (r, t).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

Reader = Literal["vanilla", "divopd", "divopd-base", "divopd-focus", "top-b", "gate-only", "arrival-pool"]
READERS: tuple[str, ...] = ("vanilla", "divopd", "divopd-base", "divopd-focus", "top-b", "gate-only", "arrival-pool")
POOLED = ("divopd", "divopd-base", "divopd-focus", "top-b", "arrival-pool")
"""Readers with Algorithm 1's candidate pool (steps 1-3) and pending rows."""


@dataclass(frozen=True)
class RowMeta:
    """What the sampler knows of one turn row."""

    rollout: int
    """Rollout id r (assigned in arrival order, unique per run)."""
    turn: int
    """Turn index t inside its rollout."""
    version: int
    """Policy version that generated the turn."""
    score: float
    """s(u) = sum over the turn's tokens of (logp_old - logp_teacher); `raw_kl_sum`."""
    valid: bool
    """Passes the gate: teacher log-probs on every response token, >= 1 token, student-generated."""
    tokens: int = 0
    """Response tokens (diagnostics only)."""
    won: bool = False
    """Whether the rollout succeeded (diagnostics only: Table 14's depth x outcome)."""

    @property
    def key(self) -> tuple[int, int]:
        """(r, t): unique per run; the final tie break."""
        return (self.rollout, self.turn)


@dataclass(frozen=True)
class PendingRow:
    """A valid, unselected row kept for later updates, stamped with the update that first saw it."""

    row: RowMeta
    first_seen: int


@dataclass(frozen=True)
class SamplerSettings:
    """Algorithm 1's settings; defaults are the paper's (Table 3)."""

    reader: Reader = "divopd"
    batch_rows: int = 64
    """B: turn rows per learner batch."""
    pool_multiplier: int = 4
    """c: the candidate pool holds at most c*B pending + fresh rows."""
    initial_cap: int = 4
    """k: turns a rollout may give in the first sweep; grows by one per further sweep."""
    max_staleness: int = 2
    """delta: rows of a policy version older than q - delta are dropped as stale."""
    max_pending_age: int = 8
    """W: a pending row is dropped once q - first_seen > W."""
    base_order: Literal["random", "turn"] = "random"
    """DivOPD-base's order within a rollout (the paper does not say): uniformly random, or earliest turn first."""
    seed: int = 0
    """Seed of DivOPD-base's random within-rollout order (with q and r: a pure function of its arguments)."""

    def __post_init__(self) -> None:
        if self.reader not in READERS:
            raise ValueError(f"unknown reader {self.reader!r}; choose one of {', '.join(READERS)}")
        if self.base_order not in ("random", "turn"):
            raise ValueError(f"base_order must be random or turn, got {self.base_order!r}")
        for name in ("batch_rows", "pool_multiplier", "initial_cap"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("max_staleness", "max_pending_age"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class Selection:
    """The outcome of one update's selection."""

    selected: tuple[RowMeta, ...]
    """Rows for the learner batch, in selection order."""
    pending: tuple[PendingRow, ...]
    """The pending pool for the next update."""
    consumed: int
    """How many rows of `arrivals` (from its head) were read; the buffer removes them."""
    drained: int = 0
    """Of those, the rows that entered the batch or the pool (not stale): the learner's drain."""
    stale: tuple[RowMeta, ...] = ()
    """Queue rows dropped because version < q - delta when the reader reached them: they went stale
    unread, before the learner ever saw them (paper Figure 1B, Table 2's stale rows)."""
    stale_pending: tuple[RowMeta, ...] = ()
    """Pending rows dropped because version < q - delta: read while fresh, passed over, then aged out
    (OBJECTIVES step 1 counts them as stale too; kept apart so both counts are visible)."""
    invalid: tuple[RowMeta, ...] = ()
    """Rows dropped permanently by the validity gate."""
    expired: tuple[RowMeta, ...] = ()
    """Pending rows dropped because q - first_seen > W."""
    cap: int = 0
    """The per-rollout cap h after the last sweep (capped readers: divopd, divopd-base, divopd-focus)."""
    pool: tuple[RowMeta, ...] = ()
    """The valid candidate pool V the batch was chosen from (pooled readers; diagnostics and audits)."""


def select_batch(
    q: int, pending: Sequence[PendingRow], arrivals: Sequence[RowMeta], settings: SamplerSettings
) -> Selection:
    """Select update `q`'s batch from the pending pool and the buffer's arrival queue (oldest first)."""
    if settings.reader not in POOLED:
        return _arrival_order(q, arrivals, settings, gate=settings.reader == "gate-only")
    v_min = max(q - settings.max_staleness, 0)
    stale_pending = [p.row for p in pending if p.row.version < v_min]
    stale: list[RowMeta] = []
    expired = [p.row for p in pending if p.row.version >= v_min and q - p.first_seen > settings.max_pending_age]
    kept = [p for p in pending if p.row.version >= v_min and q - p.first_seen <= settings.max_pending_age]
    limit = settings.pool_multiplier * settings.batch_rows
    fresh: list[RowMeta] = []
    consumed = 0
    for row in arrivals:
        if len(kept) + len(fresh) >= limit:
            break
        consumed += 1
        if row.version < v_min:
            stale.append(row)
        else:
            fresh.append(row)
    invalid = [row for row in fresh if not row.valid]
    pool = kept + [PendingRow(row, q) for row in fresh if row.valid]
    chosen, cap = _compose(q, pool, settings)
    chosen_keys = {p.row.key for p in chosen}
    return Selection(
        selected=tuple(p.row for p in chosen),
        pending=tuple(p for p in pool if p.row.key not in chosen_keys),
        consumed=consumed,
        drained=len(fresh),
        stale=tuple(stale),
        stale_pending=tuple(stale_pending),
        invalid=tuple(invalid),
        expired=tuple(expired),
        cap=cap,
        pool=tuple(p.row for p in pool),
    )


def _compose(q: int, pool: Sequence[PendingRow], settings: SamplerSettings) -> tuple[list[PendingRow], int]:
    """Steps 4-7 of the pooled reader: the batch from the valid pool, and the final per-rollout cap (0: none)."""
    batch, k = settings.batch_rows, settings.initial_cap
    if settings.reader == "top-b":
        return sorted(pool, key=_rank)[:batch], 0
    if settings.reader == "arrival-pool":
        return sorted(pool, key=lambda p: p.row.key)[:batch], 0
    if settings.reader == "divopd-focus":
        return _capped_by_score(pool, batch, k)
    within = _rank if settings.reader == "divopd" else _base_order(q, settings)
    return _rollout_first(pool, batch, k, within)


def _arrival_order(q: int, arrivals: Sequence[RowMeta], settings: SamplerSettings, *, gate: bool) -> Selection:
    """`vanilla` (and with `gate`, `gate-only`): the next B rows of the queue, stale rows dropped; with the gate
    invalid rows are dropped too and take no slot."""
    v_min = max(q - settings.max_staleness, 0)
    selected: list[RowMeta] = []
    stale: list[RowMeta] = []
    invalid: list[RowMeta] = []
    consumed = 0
    for row in arrivals:
        if len(selected) >= settings.batch_rows:
            break
        consumed += 1
        if row.version < v_min:
            stale.append(row)
        else:
            (invalid if gate and not row.valid else selected).append(row)
    return Selection(
        selected=tuple(selected),
        pending=(),
        consumed=consumed,
        drained=len(selected) + len(invalid),
        stale=tuple(stale),
        invalid=tuple(invalid),
    )


def _rank(p: PendingRow) -> tuple[float, int, int]:
    """Descending s(u), ties by (r, t)."""
    return (-p.row.score, p.row.rollout, p.row.turn)


def _base_order(q: int, settings: SamplerSettings) -> Callable[[PendingRow], tuple[float, int, int]]:
    """DivOPD-base's within-rollout order: earliest turn first, or a uniform random order drawn per (seed, q, r)
    (a pure function of the rows: the same set gives the same order whatever order it arrives in)."""
    if settings.base_order == "turn":
        return lambda p: (0.0, p.row.rollout, p.row.turn)
    return lambda p: (random.Random(f"{settings.seed}:{q}:{p.row.rollout}:{p.row.turn}").random(), *p.row.key)


def _capped_by_score(pool: Sequence[PendingRow], batch: int, cap: int) -> tuple[list[PendingRow], int]:
    """DivOPD-focus: the pool's turns by descending s(u), skipping a turn whose rollout has given h; when a pass
    leaves the batch short, h grows by one and the pass repeats over what is left."""
    ranked = sorted(pool, key=_rank)
    given: dict[int, int] = defaultdict(int)
    chosen: list[PendingRow] = []
    taken: set[tuple[int, int]] = set()
    total = min(batch, len(pool))
    h = cap
    while True:
        for p in ranked:
            if len(chosen) >= total:
                return chosen, h
            if p.row.key not in taken and given[p.row.rollout] < h:
                chosen.append(p)
                taken.add(p.row.key)
                given[p.row.rollout] += 1
        if len(chosen) >= total:
            return chosen, h
        h += 1


def _rollout_first(
    pool: Sequence[PendingRow], batch: int, cap: int, within: Callable[[PendingRow], tuple[float, int, int]]
) -> tuple[list[PendingRow], int]:
    """Steps 4-7: rollout groups by oldest first-seen (ties by r), each group's turns in the `within` order (DivOPD:
    descending s(u)), sweeps with a cap that grows by one."""
    groups: dict[int, list[PendingRow]] = defaultdict(list)
    for p in pool:
        groups[p.row.rollout].append(p)
    order = sorted(groups, key=lambda r: (min(p.first_seen for p in groups[r]), r))
    ranked = {r: sorted(groups[r], key=within) for r in order}
    given = dict.fromkeys(order, 0)
    chosen: list[PendingRow] = []
    total = min(batch, len(pool))
    h = cap
    while True:
        for r in order:
            take = min(h, len(ranked[r])) - given[r]
            take = min(take, total - len(chosen))
            if take > 0:
                chosen.extend(ranked[r][given[r] : given[r] + take])
                given[r] += take
        if len(chosen) >= total:
            return chosen, h
        h += 1
