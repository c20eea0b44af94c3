"""The RL term on the policy a `choice` turn is drawn from (`rl_over: replies`, docs/design/047-reply-level-rl.md).

Under `rollout.action_match: choice` a turn's reply a is drawn from q(a) = P(a | prompt) normalised over its listed
replies. The token-level PPO term follows grad log P(a); this one follows grad log q(a) = grad log P(a) minus the
q-weighted mean of grad log P(b) over the list, so a negative advantage moves the drawn reply's mass to the other
listed replies instead of anywhere off the list:

    r_u = exp(log q(a_u) - log q_old(a_u))
    L   = sum_u w_u max(-A_u r_u, -A_u clip(r_u, 1 - eps, 1 + eps))

with A_u the turn's advantage (one value per turn for every turn credit) and w_u the loss weight the objective's
reduction gives each of its tokens, so at r = 1 the gradient is the token term's with log q in place of log P.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal, get_args

import torch

from trainer.errors import ObjectiveError
from trainer.objectives.batch import TokenBatch
from trainer.objectives.loss import ppo_actor_loss

RlOver = Literal["tokens", "replies"]
RL_OVER: tuple[str, ...] = get_args(RlOver)


def check_rl_over(rl_over: str) -> None:
    """ObjectiveError unless `rl_over` is one of `RL_OVER`."""
    if rl_over not in RL_OVER:
        raise ObjectiveError(f"rl_over must be one of {RL_OVER}, got {rl_over!r}", reason="INVALID_OBJECTIVE_CONFIG")


def turn_means(values: torch.Tensor, batch: TokenBatch, turn_ids: Sequence[int]) -> torch.Tensor:
    """The mean of `values` (N, S) over each of `turn_ids`' supervised tokens in `batch` (fp64; 0 for a turn with
    none)."""
    ids = batch.turn_ids[batch.loss_mask]
    wanted = torch.tensor(list(turn_ids), dtype=torch.long, device=ids.device)
    size = int(max(int(ids.max()) if ids.numel() else -1, int(wanted.max()) if wanted.numel() else -1)) + 1
    sums = torch.zeros(size, dtype=torch.float64, device=ids.device)
    sums = sums.index_add(0, ids, values[batch.loss_mask].to(torch.float64))
    counts = torch.zeros(size, dtype=torch.float64, device=ids.device).index_add(
        0, ids, torch.ones_like(ids, dtype=torch.float64)
    )
    return sums[wanted] / counts[wanted].clamp(min=1.0)


def move_rl_to_replies(batch: TokenBatch, advantages: torch.Tensor) -> tuple[TokenBatch, torch.Tensor]:
    """Each listed turn's advantage onto `batch.listed.advantages`, and off its tokens: the batch and the token
    advantages the token term keeps (a turn whose response is none of its replies, `drawn` -1, keeps its own)."""
    listed = batch.listed
    if listed is None or not len(listed):
        return batch, advantages
    if listed.drawn is None:
        raise ObjectiveError("rl_over: replies needs the reply each listed turn drew", reason="LISTED_UNDRAWN")
    per_turn = turn_means(advantages, batch, listed.turn_ids)
    moved = [turn for turn, index in zip(listed.turn_ids, listed.drawn, strict=True) if index >= 0]
    on_moved = torch.isin(batch.turn_ids, torch.tensor(moved, dtype=torch.long, device=batch.turn_ids.device))
    kept = advantages.masked_fill(on_moved & batch.loss_mask, 0.0)
    values = [float(a) if index >= 0 else 0.0 for a, index in zip(per_turn.tolist(), listed.drawn, strict=True)]
    return dataclasses.replace(batch, listed=dataclasses.replace(listed, advantages=values)), kept


def drawn_logq(student: Sequence[torch.Tensor], drawn: Sequence[int]) -> torch.Tensor:
    """log q(a) of each turn's drawn reply (fp32; 0 where `drawn` is -1), from each turn's total log-prob of every
    listed reply (K_i,)."""
    picked = [torch.log_softmax(s.float(), dim=0)[max(index, 0)] for s, index in zip(student, drawn, strict=True)]
    logq = torch.stack(picked)
    return torch.where(torch.tensor(list(drawn), device=logq.device) >= 0, logq, torch.zeros_like(logq))


def reply_policy_loss(
    logq: torch.Tensor,
    logq_old: torch.Tensor,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    drawn: Sequence[int],
    clip_eps: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's clipped surrogate on each turn's reply-level ratio (U,), weighted `weights` (U,), over the turns whose
    reply is one of their list; its metrics as `actor/reply_*`."""
    mask = torch.tensor([index >= 0 for index in drawn], dtype=torch.bool, device=logq.device)[:, None]
    loss, metrics = ppo_actor_loss(
        logq[:, None],
        logq_old[:, None],
        advantages[:, None],
        mask,
        clip_eps=clip_eps,
        weights=weights.to(torch.float64)[:, None],
    )
    return loss, {name.replace("actor/", "actor/reply_"): value for name, value in metrics.items()}


def choice_entropy(student: Sequence[torch.Tensor]) -> float:
    """The summed entropy of each turn's choice q over its listed replies (nats)."""
    total = 0.0
    for s in student:
        logq = torch.log_softmax(s.detach().float(), dim=0)
        total += float(-(logq.exp() * logq).sum())
    return total
