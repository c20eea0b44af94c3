"""PBR, protocol-boundary repair (paper 002 section 3.4, OBJECTIVES.md section 6): the auxiliary loss.

Detection rules (trainer/branching/rules.py) scan generated responses and emit constraints
(s, C, b): at prefix s the next token should (b = 1) or should not (b = 0) lie in the token set C.
In a batch a constraint is (row, position): the prefix is `input_ids[row, :position]`, so the
constrained prediction is the model's distribution at `position - 1`.

    L_PBR = mean_c psi(lambda * u_c),   u_c = -log p(C|s) if b else -log(1 - p(C|s)),   psi(x) = min(x, cap)

The cap applies to the weighted term (defaults lambda = 0.01, cap = 0.02, as the paper states); above
it the term's gradient is zero. No constraint in the batch: no term.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.errors import ObjectiveError

PBR_CONSTRAINTS = "pbr/constraints"
PBR_LOSS = "pbr/loss"
PBR_EVENT_PROB = "pbr/event_prob"


@dataclass(frozen=True)
class PbrConfig:
    """Weight and cap of the PBR term."""

    weight: float = 0.01
    """lambda."""
    cap: float | None = 0.02
    """Cap on each term; None: no cap (psi is the identity)."""
    cap_on: str = "weighted"
    """`weighted`: psi(lambda * u_c) (OBJECTIVES.md: the cap 0.02 bounds the weighted term); `term`:
    lambda * psi(u_c) (the paper's lambda * mean psi(u) read literally)."""

    def __post_init__(self) -> None:
        if self.cap_on not in ("weighted", "term"):
            raise ObjectiveError(
                f"pbr.cap_on must be weighted or term, got {self.cap_on!r}", reason="INVALID_OBJECTIVE_CONFIG"
            )
        if self.weight < 0 or (self.cap is not None and self.cap <= 0):
            raise ObjectiveError(
                f"pbr.weight must be >= 0 and pbr.cap > 0 (or null), got {self.weight}, {self.cap}",
                reason="INVALID_OBJECTIVE_CONFIG",
            )


@dataclass
class ConstraintBatch:
    """K constraints located in a TokenBatch."""

    rows: torch.Tensor
    """(K,) long: row of each constraint."""
    positions: torch.Tensor
    """(K,) long, >= 1: the slot whose token is constrained; the prefix is input_ids[row, :position]."""
    token_sets: torch.Tensor
    """(K, C) long: token ids of each set C, right-padded with -1."""
    targets: torch.Tensor
    """(K,) bool: b, whether the next token should be in C."""

    @property
    def count(self) -> int:
        return int(self.rows.numel())

    def to(self, device: torch.device | str) -> ConstraintBatch:
        return ConstraintBatch(*(t.to(device) for t in (self.rows, self.positions, self.token_sets, self.targets)))

    def in_rows(self, rows: slice) -> ConstraintBatch:
        """The constraints of rows `rows.start <= row < rows.stop`, renumbered from 0."""
        keep = (self.rows >= rows.start) & (self.rows < rows.stop)
        return ConstraintBatch(
            self.rows[keep] - rows.start, self.positions[keep], self.token_sets[keep], self.targets[keep]
        )


def event_logprob(dist: torch.Tensor, constraints: ConstraintBatch) -> torch.Tensor:
    """(K,) log p(C|s) from `dist` (K, V), the log-softmax of the next token at each constraint's prefix."""
    valid = constraints.token_sets >= 0
    picked = dist.gather(-1, constraints.token_sets.clamp(min=0))
    picked = torch.where(valid, picked, torch.full_like(picked, -torch.inf))
    return torch.logsumexp(picked, dim=-1)


def pbr_loss(
    dist: torch.Tensor,
    constraints: ConstraintBatch,
    *,
    weight: float,
    cap: float | None,
    normaliser: float,
    cap_on: str = "weighted",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Sum of psi(lambda * u_c) (`cap_on="term"`: lambda * psi(u_c)) over `constraints`, divided by `normaliser`
    (the whole batch's constraint count).

    `dist` (K, V) is the next-token log-softmax at each constraint's prefix (row `rows[k]`, slot
    `positions[k] - 1`). Returns the loss (0 without constraints) and the summed event probability.
    """
    if constraints.count == 0:
        return dist.new_zeros(()), {"event_prob_sum": 0.0}
    logp_c = event_logprob(dist, constraints).clamp(max=0.0)
    # -log(1 - p) = -log(-expm1(log p)), kept finite when p rounds to 1.
    unlikely = -torch.log((-torch.expm1(logp_c)).clamp(min=1e-12))
    u = torch.where(constraints.targets, -logp_c, unlikely)
    if cap_on == "term":
        terms = weight * (u if cap is None else torch.clamp(u, max=cap))
    else:
        terms = weight * u if cap is None else torch.clamp(weight * u, max=cap)
    loss = terms.sum() / max(normaliser, 1.0)
    return loss, {"event_prob_sum": float(logp_c.detach().exp().sum())}
