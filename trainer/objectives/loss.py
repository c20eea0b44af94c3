"""The PPO-clipped actor loss shared by every objective (OBJECTIVES.md section 1), with verl's reductions.

    ratio_t = exp(logp(t) - logp_old(t))
    L = reduce_t[ max(-A_t ratio_t, -A_t clip(ratio_t, 1 - eps, 1 + eps)) ]
No KL penalty and no value model: the teacher enters only through the advantage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from envhub.core.errors import invalid_argument
from trainer.objectives.segments import segment_index, segment_mean, segment_sum

Reduction = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]
REDUCTIONS: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
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
            raise invalid_argument(
                f"clip_eps must be in (0, 1), got {self.clip_eps}", reason="INVALID_OBJECTIVE_CONFIG"
            )
        if self.reduction is not None:
            check_reduction(self.reduction)


def check_reduction(reduction: str) -> None:
    """Raise INVALID_ARGUMENT (reason UNKNOWN_REDUCTION) unless `reduction` is one of REDUCTIONS."""
    if reduction not in REDUCTIONS:
        raise invalid_argument(
            f"unknown loss reduction {reduction!r}; choose one of {', '.join(REDUCTIONS)}",
            reason="UNKNOWN_REDUCTION",
        )


def _unit_ids(loss_mask: torch.Tensor, row_ids: torch.Tensor | None) -> torch.Tensor:
    """(M,) unit id of each supervised token: its `row_ids` entry, or its row index."""
    if row_ids is None:
        row_ids = torch.arange(loss_mask.shape[0], device=loss_mask.device)[:, None].expand_as(loss_mask)
    return row_ids[loss_mask]


def reduction_denominator(
    loss_mask: torch.Tensor, *, reduction: Reduction = "token-mean", row_ids: torch.Tensor | None = None
) -> float:
    """The denominator `aggregate_loss` divides by: supervised tokens (`token-mean`) or units (`seq-mean-*`).

    Compute it once on the whole mini-batch and pass it as `normaliser` to every micro-batch's loss.
    """
    check_reduction(reduction)
    if reduction == "token-mean":
        return float(loss_mask.sum())
    return float(torch.unique(_unit_ids(loss_mask, row_ids)).numel())


def aggregate_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    reduction: Reduction = "token-mean",
    row_ids: torch.Tensor | None = None,
    normaliser: float | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss (N, S) over the supervised tokens to a scalar.

    * `token-mean`: sum over supervised tokens / their number.
    * `seq-mean-token-mean`: mean within each unit, then mean over units.
    * `seq-mean-token-sum`: sum within each unit, then mean over units.
    A unit is a row, or, when `row_ids` (N, S) is given, the set of supervised tokens sharing an id (e.g.
    `turn_ids`, so a `full`-context row counts each turn once). Units without supervised tokens do not count.
    `normaliser` replaces the denominator (token or unit count) with the one of the whole mini-batch, so
    that the losses of its micro-batches add up to the mini-batch loss under gradient accumulation.
    """
    check_reduction(reduction)
    zero = torch.zeros((), dtype=loss_mat.dtype, device=loss_mat.device)
    if reduction == "token-mean":
        total = torch.where(loss_mask, loss_mat, zero).sum()
        if normaliser is not None:
            return total / max(normaliser, 1.0)
        return total / loss_mask.sum().clamp(min=1).to(loss_mat.dtype)
    unique_units, inverse = segment_index(_unit_ids(loss_mask, row_ids))
    num_units = int(unique_units.numel())
    values = loss_mat[loss_mask]
    per_unit = (segment_mean if reduction == "seq-mean-token-mean" else segment_sum)(values, inverse, num_units)
    denominator = float(num_units) if normaliser is None else normaliser
    return per_unit.sum() / max(denominator, 1.0)


def ppo_actor_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    clip_eps: float = 0.2,
    reduction: Reduction = "token-mean",
    row_ids: torch.Tensor | None = None,
    normaliser: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate loss on the supervised tokens.

    Args:
        logp: (N, S) current log-probs of the sampled tokens (carries the gradient).
        logp_old: (N, S) rollout log-probs; advantages: (N, S), treated as constants (detached here).
        loss_mask: (N, S) bool; nothing at other positions (even NaN or inf) affects the loss or gradient.
        clip_eps, reduction, row_ids, normaliser: see `ActorLossConfig` and `aggregate_loss`.

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
    loss = aggregate_loss(pg_losses, loss_mask, reduction=reduction, row_ids=row_ids, normaliser=normaliser)
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
