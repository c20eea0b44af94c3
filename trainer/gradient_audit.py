"""DivOPD's per-turn gradient audit (paper 001 Tables 10 and 13): the selected turns' gradient against the
candidate pool's, at the learner's current parameters, before the update.

For every turn t of the candidate pool, g_t is the gradient of that turn's loss alone (the objective's PPO loss
on the turn's row, token mean), computed exactly (no sketch: the paper's sketch audit estimates these norms and
inner products; the tiny CPU models afford the real ones). G is the mean g_t over the pool, G_hat the mean over the
selected turns: under `turn-mean-token-mean` (divopd.yaml) G_hat is the update's gradient before clipping.

* Table 13: projection <G, G_hat> / ||G||^2 and cosine cos(G, G_hat).
* Table 10: dropped gradient-norm share, sum of ||g_t|| over the dropped turns / over all pool turns, counted
  over the rollouts the batch drew from (as `divopd/focus_dropped_turn_share`).

The audit leaves the optimizer, the parameters' `.grad` and the RNG as they were: training is unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from trainer.batching.divopd_stats import COSINE, DROPPED_GRAD_NORM_SHARE, POOL_ROWS, PROJECTION
from trainer.objectives.batch import TokenBatch
from trainer.objectives.loss import loss_weights, ppo_actor_loss

if TYPE_CHECKING:
    from trainer.learner import Learner


@dataclass
class AuditTotals:
    """Running sums over the pool's per-turn gradients (one flat gradient in memory at a time)."""

    pool_sum: torch.Tensor | None = None
    batch_sum: torch.Tensor | None = None
    pool_rows: int = 0
    batch_rows: int = 0
    counted_norm: float = 0.0
    dropped_norm: float = 0.0

    def add(self, gradient: torch.Tensor, *, selected: bool, counted: bool) -> None:
        """One pool turn's g_t (`selected`: it entered the batch; `counted`: its rollout gave the batch a turn,
        Table 10's scope)."""
        g = gradient.double()
        self.pool_sum = g.clone() if self.pool_sum is None else self.pool_sum + g
        self.pool_rows += 1
        if selected:
            self.batch_sum = g.clone() if self.batch_sum is None else self.batch_sum + g
            self.batch_rows += 1
        if counted:
            norm = float(g.norm())
            self.counted_norm += norm
            self.dropped_norm += 0.0 if selected else norm

    def metrics(self) -> dict[str, float]:
        """Tables 10 and 13 (`{}` without a selected turn)."""
        if self.pool_sum is None or self.batch_sum is None:
            return {}
        pool, batch = self.pool_sum / self.pool_rows, self.batch_sum / self.batch_rows
        dot, pool_sq, batch_norm = float(pool @ batch), float(pool @ pool), float(batch.norm())
        out = {POOL_ROWS: float(self.pool_rows)}
        if pool_sq > 0:
            out[PROJECTION] = dot / pool_sq
            if batch_norm > 0:
                out[COSINE] = dot / (pool_sq**0.5 * batch_norm)
        if self.counted_norm > 0:
            out[DROPPED_GRAD_NORM_SHARE] = self.dropped_norm / self.counted_norm
        return out


def audit(learner: Learner, batch: TokenBatch, selected: Sequence[bool], counted: Sequence[bool]) -> dict[str, float]:
    """Tables 10 and 13 for the pool `batch` (one row per pool turn; `selected`, `counted` per row)."""
    if not (batch.num_rows == len(selected) == len(counted)):
        raise ValueError(f"{batch.num_rows} pool rows for {len(selected)} selected and {len(counted)} counted flags")
    if learner.sharded:
        raise ValueError("the gradient audit runs on one learner rank (placement.learner_gpus <= 1)")
    totals = AuditTotals()
    device_rng = [learner.device] if learner.device.type == "cuda" else []
    with torch.random.fork_rng(devices=device_rng, device_type=learner.device.type):
        for row, gradient in enumerate(turn_gradients(learner, batch)):
            totals.add(gradient, selected=selected[row], counted=counted[row])
    return totals.metrics()


def turn_gradients(learner: Learner, batch: TokenBatch) -> Iterator[torch.Tensor]:
    """g_t of each row of `batch` in turn (one row per turn, `history` context) at the learner's parameters, flat
    float32; advantages and the ratio's `logp_old` as `Learner.step` takes them on the same rows."""
    from trainer.learner import own_logp_old

    batch = batch.to(learner.device)
    params = [p for p in learner.model.parameters() if p.requires_grad]
    if learner.separate_recompute:
        batch, _ = learner.recompute_old_logprobs(batch)
    advantages, _ = learner.spec.compute(batch, learner.hyperparameters, step=learner.global_step)
    for row in range(batch.num_rows):
        width = int(batch.attention_mask[row].sum())
        one = (slice(row, row + 1), slice(0, width))
        mask = batch.loss_mask[one]
        with torch.autocast(learner.device.type, dtype=torch.bfloat16, enabled=learner.device.type == "cuda"):
            logp, *_ = learner.scorer(batch.input_ids[one], batch.attention_mask[one])
        loss, _ = ppo_actor_loss(
            logp,
            own_logp_old(logp, batch.logp_old.dtype) if learner.on_policy_ratio else batch.logp_old[one],
            advantages[one].detach(),
            mask,
            clip_eps=learner.objective.clip_eps,
            weights=loss_weights(mask),
        )
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        flat = [
            (g if g is not None else torch.zeros_like(p)).reshape(-1).float()
            for g, p in zip(grads, params, strict=True)
        ]
        yield torch.cat(flat)
