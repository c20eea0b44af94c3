"""DivOPD batch-composition diagnostics (paper 001 Tables 2, 9, 10, 11, 12, 14, 16), logged under `divopd/*`.

Per batch: effective rollouts, top-1 rollout token share, turns per rollout. Cumulative over the
run (`Utilization`, `FlowCounters`): arrival/drain ratio, stale rows, never-selected share of valid
rollouts, Gini of selected-turn counts, teacher tokens scored per token trained.

Every arrived row is accounted once: arrived = batched + invalid + stale (unread) + stale pending +
expired + still queued + still pending.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from trainer.batching.divopd import RowMeta

ARRIVAL_DRAIN_RATIO = "divopd/arrival_drain_ratio"
STALE_ROWS = "divopd/stale_rows"
"""Rows that went stale unread in the arrival queue (paper Table 2, Figure 1B)."""
STALE_PENDING_ROWS = "divopd/stale_pending_rows"
"""Pending rows (seen fresh, passed over) dropped by the version bound; OBJECTIVES counts them as stale too."""
EFFECTIVE_ROLLOUTS = "divopd/effective_rollouts"
TOP1_SHARE = "divopd/top1_share"
TURNS_PER_ROLLOUT = "divopd/turns_per_rollout"
NEVER_SELECTED_SHARE = "divopd/never_selected_share"
GINI = "divopd/gini"
TEACHER_TOKENS_PER_TRAINED_TOKEN = "divopd/teacher_tokens_per_trained_token"
PLOTTED: tuple[str, ...] = (
    ARRIVAL_DRAIN_RATIO,
    STALE_ROWS,
    STALE_PENDING_ROWS,
    EFFECTIVE_ROLLOUTS,
    TOP1_SHARE,
    TURNS_PER_ROLLOUT,
    NEVER_SELECTED_SHARE,
    GINI,
    TEACHER_TOKENS_PER_TRAINED_TOKEN,
)


def batch_metrics(selected: Sequence[RowMeta]) -> dict[str, float]:
    """Effective rollouts, top-1 rollout share of the batch's tokens and turns per rollout."""
    rows = [r for r in selected if r.valid]
    per_rollout = Counter(r.rollout for r in rows)
    tokens = Counter[int]()
    for r in rows:
        tokens[r.rollout] += r.tokens
    total = sum(tokens.values())
    return {
        EFFECTIVE_ROLLOUTS: float(len(per_rollout)),
        TOP1_SHARE: max(tokens.values()) / total if total else 0.0,
        TURNS_PER_ROLLOUT: len(rows) / len(per_rollout) if per_rollout else 0.0,
    }


PROJECTION = "divopd/audit_projection"
"""Table 13 (audited updates, `trainer.gradient_audit`): <G, G_hat> / <G, G>, selected vs candidate-pool gradient."""
COSINE = "divopd/audit_cosine"
"""Table 13: cos(G, G_hat)."""
DROPPED_GRAD_NORM_SHARE = "divopd/focus_dropped_grad_norm_share"
"""Table 10's gradient column: the dropped turns' share of the summed per-turn gradient norms."""
POOL_ROWS = "divopd/audit_pool_rows"
AUDITED: tuple[str, ...] = (PROJECTION, COSINE, DROPPED_GRAD_NORM_SHARE)
"""The audit's measures the run summary averages over the audited updates (the paper: means over 8)."""
MEAN_ROW_AGE = "divopd/mean_row_age"
"""Table 12: mean age q - version (policy versions) of the rows an update consumed, dead rows included."""
DEPTH_BINS: tuple[tuple[str, int, int | None], ...] = (("lt2", 0, 2), ("2to4", 2, 4), ("4to6", 4, 6), ("ge6", 6, None))
"""Table 14's turn-depth bins (turn index t), plus the turns at depth 6 and beyond."""


def row_age_metrics(q: int, consumed: Sequence[RowMeta]) -> dict[str, float]:
    """Table 12's mean age of the rows this update consumed (selected, stale, invalid, expired: all it used up)."""
    if not consumed:
        return {}
    return {MEAN_ROW_AGE: sum(q - row.version for row in consumed) / len(consumed)}


def focus_metrics(selected: Sequence[RowMeta], pool: Sequence[RowMeta]) -> dict[str, float]:
    """Table 10's focus retention audit (its non-gradient columns), over the rollouts the batch drew from: the
    share of their valid pool turns left out, and mean turn depth and s(u) per token of kept and dropped turns."""
    chosen = {row.key for row in selected}
    rollouts = {row.rollout for row in selected if row.valid}
    candidates = [row for row in pool if row.rollout in rollouts]
    dropped = [row for row in candidates if row.key not in chosen]
    kept = [row for row in candidates if row.key in chosen]
    if not candidates:
        return {}
    out = {"divopd/focus_dropped_turn_share": len(dropped) / len(candidates)}
    for name, rows in (("kept", kept), ("dropped", dropped)):
        if rows:
            out[f"divopd/focus_{name}_depth"] = sum(row.turn for row in rows) / len(rows)
            out[f"divopd/focus_{name}_score_per_token"] = sum(row.score / max(row.tokens, 1) for row in rows) / len(
                rows
            )
    return out


@dataclass
class DepthOutcome:
    """Table 14: where the selected turns come from, by turn depth and rollout outcome, over the run."""

    counts: Counter[tuple[str, bool]] = field(default_factory=Counter)

    def add(self, selected: Iterable[RowMeta]) -> None:
        """Count the valid selected rows of one update."""
        for row in selected:
            if row.valid:
                name = next(n for n, low, high in DEPTH_BINS if row.turn >= low and (high is None or row.turn < high))
                self.counts[(name, row.won)] += 1

    def metrics(self) -> dict[str, float]:
        """`divopd/depth_<bin>_<success|failure>`: each cell's share of every selected turn so far."""
        total = sum(self.counts.values())
        return {
            f"divopd/depth_{name}_{'success' if won else 'failure'}": self.counts[(name, won)] / total
            for name, _, _ in DEPTH_BINS
            for won in (False, True)
            if total
        }


def gini(values: Iterable[float]) -> float:
    """Gini coefficient of non-negative values (0: equal; towards 1: concentrated); 0 for an all-zero list."""
    xs = sorted(values)
    n, total = len(xs), sum(xs)
    if n == 0 or total == 0:
        return 0.0
    return sum((2 * i - n - 1) * x for i, x in enumerate(xs, start=1)) / (n * total)


@dataclass
class Utilization:
    """Per-rollout bookkeeping: rows still in the queue or pending, trained rows.

    A rollout is *resolved* once none of its rows is left in the queue or the pending pool; only
    resolved rollouts with at least one valid row enter the never-selected share and the Gini.
    """

    outstanding: Counter[int] = field(default_factory=Counter)
    trained: Counter[int] = field(default_factory=Counter)
    valid: set[int] = field(default_factory=set)
    resolved: set[int] = field(default_factory=set)

    def arrived(self, rows: Sequence[RowMeta]) -> None:
        """Rows pushed into the buffer."""
        for row in rows:
            self.outstanding[row.rollout] += 1
            if row.valid:
                self.valid.add(row.rollout)

    def left(self, rows: Iterable[RowMeta], *, trained: bool) -> None:
        """Rows that left for good: selected (`trained`: valid ones count) or dropped."""
        for row in rows:
            self.outstanding[row.rollout] -= 1
            if trained and row.valid:
                self.trained[row.rollout] += 1
            if self.outstanding[row.rollout] == 0:
                del self.outstanding[row.rollout]
                self.resolved.add(row.rollout)

    def metrics(self) -> dict[str, float]:
        """Never-selected share and Gini over resolved valid rollouts."""
        done = sorted(self.resolved & self.valid)
        counts = [self.trained[r] for r in done]
        never = sum(1 for c in counts if c == 0)
        return {NEVER_SELECTED_SHARE: never / len(done) if done else 0.0, GINI: gini(counts)}


@dataclass
class FlowCounters:
    """Run totals of the buffer's flow."""

    arrived_rows: int = 0
    drained_rows: int = 0
    """Rows the learner read off the queue into a batch or its pool (stale ones excluded)."""
    batched_rows: int = 0
    """Rows that entered a batch (a `vanilla` batch may hold invalid rows, which train nothing)."""
    stale_rows: int = 0
    """Rows that went stale unread: version < q - delta when the reader reached them in the queue."""
    stale_pending_rows: int = 0
    """Pending rows (read while fresh, not selected) dropped for version < q - delta."""
    invalid_rows: int = 0
    expired_rows: int = 0
    teacher_tokens: int = 0
    """Tokens the teacher scored (every pushed student turn's response)."""
    trained_tokens: int = 0
    """Response tokens of selected valid rows."""

    def metrics(self) -> dict[str, float]:
        """Cumulative arrival/drain ratio (rows pushed / rows drained), stale rows and more."""
        return {
            ARRIVAL_DRAIN_RATIO: self.arrived_rows / self.drained_rows if self.drained_rows else 0.0,
            STALE_ROWS: float(self.stale_rows),
            TEACHER_TOKENS_PER_TRAINED_TOKEN: self.teacher_tokens / self.trained_tokens if self.trained_tokens else 0.0,
            STALE_PENDING_ROWS: float(self.stale_pending_rows),
            "divopd/batched_rows": float(self.batched_rows),
            "divopd/invalid_rows": float(self.invalid_rows),
            "divopd/expired_rows": float(self.expired_rows),
            "divopd/arrived_rows": float(self.arrived_rows),
            "divopd/drained_rows": float(self.drained_rows),
        }
