"""The PPO-clipped actor loss shared by every objective (OBJECTIVES.md section 1), with verl's reductions.

    ratio_t = exp(logp(t) - logp_old(t))
    L = reduce_t[ max(-A_t ratio_t, -A_t clip(ratio_t, 1 - eps, 1 + eps)) ]
No KL penalty and no value model: the teacher enters only through the advantage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from trainer.errors import ObjectiveError
from trainer.objectives.segments import segment_count, segment_index

Reduction = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "turn-mean-token-mean"]
REDUCTIONS: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "turn-mean-token-mean")
"""Loss reductions, named as verl names them (`turn-mean-token-mean` is verl-agent's per-step unit).

* `token-mean`: every supervised token of the batch weighs the same.
* `seq-mean-token-mean`: mean over the student tokens of each *trajectory* (1/|T_i|, ATOD eq. 4-5),
  then mean over trajectories. The unit is the trajectory in both context modes: in `history` mode its
  turn rows share one normaliser.
* `seq-mean-token-sum`: sum over each trajectory's tokens, then mean over trajectories.
* `turn-mean-token-mean`: as `seq-mean-token-mean` with each turn as its own unit (verl-agent's
  per-step samples; DivOPD's turn rows).
"""
LOG_RATIO_LIMIT = 20.0
"""logp - logp_old is clamped to +-20 before exp (as verl does) so one stale token cannot overflow."""


@dataclass(frozen=True)
class ActorLossConfig:
    """Hyperparameters of `ppo_actor_loss` that a config file sets."""

    clip_eps: float = 0.2
    """PPO clip range epsilon: the ratio is clipped to [1 - eps, 1 + eps]."""
    reduction: Reduction | None = None
    """A name from REDUCTIONS; None takes the objective's default (ObjectiveSpec.default_reduction)."""

    def __post_init__(self) -> None:
        if not 0 < self.clip_eps < 1:
            raise ObjectiveError(f"clip_eps must be in (0, 1), got {self.clip_eps}", reason="INVALID_OBJECTIVE_CONFIG")
        if self.reduction is not None:
            check_reduction(self.reduction)


def check_reduction(reduction: str) -> None:
    """Raise ObjectiveError (reason UNKNOWN_REDUCTION) unless `reduction` is one of REDUCTIONS."""
    if reduction not in REDUCTIONS:
        raise ObjectiveError(
            f"unknown loss reduction {reduction!r}; choose one of {', '.join(REDUCTIONS)}",
            reason="UNKNOWN_REDUCTION",
        )


def reduction_unit_ids(reduction: str, traj_ids: torch.Tensor, turn_ids: torch.Tensor) -> torch.Tensor | None:
    """The unit id (N, S) of every position under `reduction`: its trajectory (`seq-*`), its turn
    (`turn-mean-token-mean`), or None for `token-mean` (no unit)."""
    check_reduction(reduction)
    if reduction == "token-mean":
        return None
    if reduction == "turn-mean-token-mean":
        return turn_ids
    return traj_ids[:, None].expand_as(turn_ids)


def loss_weights(
    loss_mask: torch.Tensor, *, reduction: Reduction = "token-mean", unit_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """Float64 weight (N, S) of each supervised token in the reduced loss (0 elsewhere); they sum to 1.

    `token-mean`: 1 / #tokens. `*-token-mean`: 1 / (#tokens of the token's unit x #units).
    `seq-mean-token-sum`: 1 / #units. A unit is the set of supervised tokens sharing a `unit_ids`
    entry (see `reduction_unit_ids`), or a row when `unit_ids` is None; units without supervised
    tokens do not count. Compute the weights once on the whole mini-batch and slice them per
    micro-batch: the micro-batch losses then add up to the mini-batch loss exactly, even when a unit
    (a trajectory's turn rows) spans several micro-batches.
    """
    check_reduction(reduction)
    weights = torch.zeros(loss_mask.shape, dtype=torch.float64, device=loss_mask.device)
    num_tokens = int(loss_mask.sum())
    if num_tokens == 0:
        return weights
    if reduction == "token-mean":
        return weights.masked_fill(loss_mask, 1.0 / num_tokens)
    if unit_ids is None:
        unit_ids = torch.arange(loss_mask.shape[0], device=loss_mask.device)[:, None].expand_as(loss_mask)
    unique_units, inverse = segment_index(unit_ids[loss_mask])
    num_units = int(unique_units.numel())
    if reduction == "seq-mean-token-sum":
        per_token = torch.full((num_tokens,), 1.0 / num_units, dtype=torch.float64, device=loss_mask.device)
    else:
        counts = segment_count(inverse, num_units, torch.float64)
        per_token = 1.0 / (counts[inverse] * num_units)
    return weights.masked_scatter(loss_mask, per_token)


def aggregate_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    reduction: Reduction = "token-mean",
    unit_ids: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss (N, S) over the supervised tokens to a scalar (in `loss_mat`'s dtype).

    The result is sum_t weight_t * loss_t with the weights of `loss_weights(loss_mask, reduction,
    unit_ids)`, accumulated in float64; pass `weights` (a slice of the whole mini-batch's) to reduce
    one micro-batch with the mini-batch's normalisers. Nothing off `loss_mask` (even NaN) matters.
    """
    if weights is None:
        weights = loss_weights(loss_mask, reduction=reduction, unit_ids=unit_ids)
    values = loss_mat[loss_mask].to(torch.float64) * weights[loss_mask]
    return values.sum().to(loss_mat.dtype)


def ppo_actor_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    clip_eps: float = 0.2,
    reduction: Reduction = "token-mean",
    unit_ids: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate loss on the supervised tokens.

    Args:
        logp: (N, S) current log-probs of the sampled tokens (carries the gradient).
        logp_old: (N, S) rollout log-probs; advantages: (N, S), treated as constants (detached here).
        loss_mask: (N, S) bool; nothing at other positions (even NaN or inf) affects the loss or gradient.
        clip_eps, reduction, unit_ids, weights: see `ActorLossConfig` and `aggregate_loss`.

    Returns:
        loss: scalar; metrics as detached 0-dim tensors (no device sync in the micro-batch loop):
        `actor/pg_loss`, `actor/clipfrac` (share of supervised tokens where the clipped term is taken),
        `actor/approx_kl` (k3 estimate of KL(old || new): mean of (ratio - 1) - log ratio),
        `actor/ratio_mean`; the last three are token means over this call's supervised tokens.
    """
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    logp = torch.where(loss_mask, logp, zero)
    logp_old = torch.where(loss_mask, logp_old.detach(), zero)
    adv = torch.where(loss_mask, advantages.detach(), zero)
    log_ratio = (logp - logp_old).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    ratio = torch.exp(log_ratio)
    pg_losses1 = -adv * ratio
    pg_losses2 = -adv * ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps)
    pg_losses = torch.maximum(pg_losses1, pg_losses2)
    loss = aggregate_loss(pg_losses, loss_mask, reduction=reduction, unit_ids=unit_ids, weights=weights)
    with torch.no_grad():
        n = loss_mask.sum().clamp(min=1).to(logp.dtype)
        clipped = (pg_losses2 > pg_losses1) & loss_mask
        k3 = torch.where(loss_mask, ratio - 1.0 - log_ratio, zero)
        metrics = {
            "actor/pg_loss": loss.detach(),
            "actor/clipfrac": clipped.sum().to(logp.dtype) / n,
            "actor/approx_kl": k3.sum() / n,
            "actor/ratio_mean": torch.where(loss_mask, ratio, zero).sum() / n,
        }
    return loss, metrics
