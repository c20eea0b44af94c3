"""T-DUR: turn-level disagreement-uncertainty reweighting (ATOD paper eq. 13-16, OBJECTIVES.md section 4).

For each unit k (a turn; or a token for the `token` ablation) over its N_k supervised tokens:
    d_k = mean_t |logp_old(t) - logp_T(t)|        h_k = mean_t -logp_old(t)
both min-max normalised within the trajectory (0.5 where the range is below `eps`), then
    w_k = 1 - (1 - d~_k)(1 - h~_k)                (Soft-OR, in [0, 1]).
"""

from __future__ import annotations

from typing import Literal

import torch

from trainer.errors import ObjectiveError
from trainer.objectives import diagnostics as names
from trainer.objectives.segments import segment_index, segment_mean, segment_minmax_normalise

TdurUnit = Literal["turn", "token", "none"]
TDUR_UNITS: tuple[str, ...] = ("turn", "token", "none")
DEGENERATE_VALUE = 0.5
"""Normalised d~ / h~ of a trajectory whose units all share one value (e.g. a single-turn trajectory)."""


def _unit_statistics(
    abs_gap: torch.Tensor, neg_logp: torch.Tensor, unit_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(d_k (K,), h_k (K,), inverse (M,)) for flat per-token values `(M,)` and their unit ids `(M,)`."""
    unique_units, inverse = segment_index(unit_ids)
    num_units = int(unique_units.numel())
    return segment_mean(abs_gap, inverse, num_units), segment_mean(neg_logp, inverse, num_units), inverse


def compute_tdur_weights(
    logp_old: torch.Tensor,
    logp_teacher: torch.Tensor,
    turn_ids: torch.Tensor,
    traj_ids: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    tdur: TdurUnit = "turn",
    eps: float = 1e-8,
) -> tuple[torch.Tensor, dict[str, float]]:
    """T-DUR weight of every supervised token: w_{k(t)} of its unit, normalised per trajectory.

    Args:
        logp_old, logp_teacher: (N, S) sampled-token log-probs of the rollout policy / teacher.
        turn_ids: (N, S) batch-unique turn id per token; traj_ids: (N,) trajectory of each row.
        loss_mask: (N, S) bool; only these tokens enter d_k, h_k, and they alone get a weight.
        tdur: `turn` (paper default), `token` (each token its own unit), `none` (w = 1).
        eps: a per-trajectory range below this normalises to 0.5.

    Returns:
        w: (N, S) in `logp_old`'s dtype (computed in float64), 0 off `loss_mask`; metrics
        `tdur/active_ratio`, `tdur/mean_weight` (over units),
        `tdur/gap_mean`, `tdur/uncertainty_mean` (over turns, whatever the unit).
    """
    if tdur not in TDUR_UNITS:
        raise ObjectiveError(f"tdur must be one of {TDUR_UNITS}, got {tdur!r}", reason="UNKNOWN_TDUR_UNIT")
    # float64 throughout: the degenerate-range test (max - min < eps) must not be decided by float32
    # rounding (two turns holding the same tokens in another order must tie exactly).
    lo = logp_old[loss_mask].to(torch.float64)
    abs_gap = (lo - logp_teacher[loss_mask].to(torch.float64)).abs()
    neg_logp = -lo
    token_turn = turn_ids[loss_mask]
    token_traj = traj_ids[:, None].expand_as(turn_ids)[loss_mask]
    if lo.numel() == 0:
        return torch.zeros_like(logp_old), dict.fromkeys(
            (names.TDUR_ACTIVE_RATIO, names.TDUR_MEAN_WEIGHT, names.TEACHER_STUDENT_GAP, names.UNCERTAINTY_MEAN), 0.0
        )
    d_turn, h_turn, turn_inverse = _unit_statistics(abs_gap, neg_logp, token_turn)
    if tdur == "none":
        w_unit = torch.ones_like(d_turn)
        unit_inverse = turn_inverse
    else:
        if tdur == "turn":
            d_k, h_k, unit_inverse = d_turn, h_turn, turn_inverse
        else:
            d_k, h_k, unit_inverse = abs_gap, neg_logp, torch.arange(lo.numel(), device=lo.device)
        unit_traj = torch.zeros(d_k.numel(), dtype=torch.long, device=lo.device).scatter(0, unit_inverse, token_traj)
        _, traj_inverse = segment_index(unit_traj)
        num_traj = int(traj_inverse.max()) + 1
        d_norm = segment_minmax_normalise(d_k, traj_inverse, num_traj, eps=eps, degenerate=DEGENERATE_VALUE)
        h_norm = segment_minmax_normalise(h_k, traj_inverse, num_traj, eps=eps, degenerate=DEGENERATE_VALUE)
        w_unit = 1.0 - (1.0 - d_norm) * (1.0 - h_norm)
    weights = torch.zeros_like(logp_old).masked_scatter(loss_mask, w_unit[unit_inverse].to(logp_old.dtype))
    metrics = {
        names.TDUR_ACTIVE_RATIO: float((w_unit > 0.5).to(lo.dtype).mean()),
        names.TDUR_MEAN_WEIGHT: float(w_unit.mean()),
        names.TEACHER_STUDENT_GAP: float(d_turn.mean()),
        names.UNCERTAINTY_MEAN: float(h_turn.mean()),
    }
    return weights, metrics
