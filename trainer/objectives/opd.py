"""OPD: on-policy distillation advantages (ATOD eq. 5-7, BranchOPD eq. 3, OBJECTIVES.md section 3).

Vanilla OPD (n = 1) and Multi-Rollout OPD (n > 1) differ only in how many trajectories the rollout
samples per task, so they share `opd_advantage`. DivOPD's turn score s(u) is `turn_kl_scores`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch

from trainer.errors import ObjectiveError
from trainer.objectives import diagnostics as names
from trainer.objectives.batch import TokenBatch
from trainer.objectives.listed import REPLY_KL, ReplyKl
from trainer.objectives.segments import segment_index, segment_sum

KlOver = Literal["tokens", "replies"]
KL_OVER: tuple[str, ...] = get_args(KlOver)
TokenKl = Literal["reverse", "forward"]
TOKEN_KL: tuple[str, ...] = get_args(TokenKl)
MAX_TEACHER_TOP_K = 20
"""vLLM's default `max_logprobs`: the most prompt log-probs a position returns (GPU-FACTS 3)."""


@dataclass(frozen=True)
class OpdConfig:
    """Hyperparameters of `opd_advantage` (field names are its keyword arguments)."""

    logp_floor: float = -10.0
    """Both log-probs are floored here before the difference, so one near-impossible token cannot dominate."""
    adv_clamp: float = 10.0
    """The signal delta_t is clamped to [-adv_clamp, adv_clamp]."""
    kl_over: KlOver = "tokens"
    """`tokens` (the papers): the sampled tokens' reverse-KL signal. `replies`: a turn drawn among listed replies
    (`rollout.action_match: choice`) learns the exact KL over its list instead, in the learner (docs/design/042);
    free-text turns keep the token signal."""
    reply_kl: ReplyKl = "reverse"
    """Under `kl_over: replies`, which KL the learner minimises: `reverse` KL(q_S || q_T) (the papers' OPD direction,
    which the token signal estimates) or `forward` KL(q_T || q_S) (the teacher's choice as soft labels on the
    student's states: GKD's on-policy forward KL; docs/design/044)."""
    token_kl: TokenKl = "reverse"
    """On free-text turns: `reverse` (the papers), the sampled-token signal delta_t as the token advantage;
    `forward`, the learner minimises instead, at each of the student's reply tokens, the forward KL from the
    teacher's next-token distribution over its `teacher_top_k` most likely tokens (renormalised over them) to the
    student's (GKD's on-policy forward KL; docs/design/053)."""
    teacher_top_k: int = 20
    """How many of the teacher's most likely tokens at each position `token_kl: forward` distils (1-20)."""

    def __post_init__(self) -> None:
        check_kl_over(self.kl_over, self.reply_kl)
        check_token_kl(self.token_kl, self.teacher_top_k)
        if not self.logp_floor < 0:
            raise ObjectiveError(
                f"opd.logp_floor must be < 0, got {self.logp_floor}", reason="INVALID_OBJECTIVE_CONFIG"
            )
        if not self.adv_clamp > 0:
            raise ObjectiveError(f"opd.adv_clamp must be > 0, got {self.adv_clamp}", reason="INVALID_OBJECTIVE_CONFIG")


def check_kl_over(kl_over: str, reply_kl: str = "reverse") -> None:
    """ObjectiveError unless `kl_over` is one of `KL_OVER` and `reply_kl` one of `REPLY_KL`."""
    if kl_over not in KL_OVER:
        raise ObjectiveError(f"kl_over must be one of {KL_OVER}, got {kl_over!r}", reason="INVALID_OBJECTIVE_CONFIG")
    if reply_kl != "reverse" and kl_over != "replies":
        raise ObjectiveError(f"reply_kl: {reply_kl} needs kl_over: replies", reason="INVALID_OBJECTIVE_CONFIG")
    if reply_kl not in REPLY_KL:
        raise ObjectiveError(f"reply_kl must be one of {REPLY_KL}, got {reply_kl!r}", reason="INVALID_OBJECTIVE_CONFIG")


def check_token_kl(token_kl: str, teacher_top_k: int) -> None:
    """ObjectiveError unless `token_kl` is one of `TOKEN_KL` and `teacher_top_k` lies in 1..`MAX_TEACHER_TOP_K`."""
    if token_kl not in TOKEN_KL:
        raise ObjectiveError(f"token_kl must be one of {TOKEN_KL}, got {token_kl!r}", reason="INVALID_OBJECTIVE_CONFIG")
    if not 1 <= teacher_top_k <= MAX_TEACHER_TOP_K:
        raise ObjectiveError(
            f"teacher_top_k must lie in 1..{MAX_TEACHER_TOP_K} (vLLM's max_logprobs), got {teacher_top_k}",
            reason="INVALID_OBJECTIVE_CONFIG",
        )


def teacher_top_k(config: object) -> int:
    """How many top tokens the teacher returns at each scored token for an objective's `config`: its
    `teacher_top_k` under `token_kl: forward`, else 0."""
    return int(getattr(config, "teacher_top_k", 0)) if getattr(config, "token_kl", "reverse") == "forward" else 0


def forward_token_kl_mask(batch: TokenBatch) -> torch.Tensor:
    """(N, S) float: 1 on the supervised tokens the teacher returned its top tokens for (`token_kl: forward`: the
    free-text turns; the turns drawn among listed replies keep their own KL), else 0."""
    if batch.teacher_top is None:
        raise ObjectiveError(
            "token_kl: forward needs the teacher's top tokens (TokenBatch.teacher_top); score the rollouts with "
            "the teacher's top_k",
            reason="TEACHER_LOGPROBS_MISSING",
        )
    return (batch.loss_mask & batch.teacher_top.scored).float()


def opd_token_kl_weights(batch: TokenBatch, config: OpdConfig, step: int) -> torch.Tensor | None:
    """Each token's weight on the learner's forward KL over the teacher's top tokens: 1 where the teacher returned
    them under `token_kl: forward`; None under `reverse` (no such term)."""
    del step
    return forward_token_kl_mask(batch) if config.token_kl == "forward" else None


def without_listed_turns(advantage: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
    """`advantage` zeroed on the tokens of the turns drawn among listed replies (`kl_over: replies`: their OPD
    signal is the learner's KL over the list)."""
    if batch.listed is None or not len(batch.listed):
        return advantage
    listed = torch.isin(batch.turn_ids, torch.tensor(batch.listed.turn_ids, device=batch.turn_ids.device))
    return advantage.masked_fill(listed, 0.0)


def opd_listed_coef(config: OpdConfig, step: int) -> float:
    """Weight of the KL over listed replies at learner step `step`: 1 under `kl_over: replies`, else 0."""
    del step
    return 1.0 if config.kl_over == "replies" else 0.0


def require_teacher(batch: TokenBatch, objective: str) -> torch.Tensor:
    """The batch's teacher log-probs, or ObjectiveError (TEACHER_LOGPROBS_MISSING) naming who needs them."""
    if batch.logp_teacher is None:
        raise ObjectiveError(
            f"objective {objective!r} needs teacher log-probs, but TokenBatch.logp_teacher is None; "
            "score the rollouts with the teacher (ScoringBackend) before computing advantages",
            reason="TEACHER_LOGPROBS_MISSING",
        )
    return batch.logp_teacher


def compute_opd_token_advantage(
    logp_teacher: torch.Tensor,
    logp_old: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    logp_floor: float = -10.0,
    adv_clamp: float = 10.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Sampled-token reverse-KL signal A_OPD_t = clamp(max(logp_T, floor) - max(logp_old, floor), -c, c).

    Args:
        logp_teacher, logp_old: (N, S) log-probs of the sampled tokens under the teacher / rollout policy.
        loss_mask: (N, S) bool, the supervised tokens; the result is 0 elsewhere.

    Returns:
        A_OPD: (N, S); metrics `opd/reverse_kl` (mean of logp_old - logp_T over supervised tokens: the k1
        estimate of KL(student || teacher) on student-visited states), `opd/adv_mean`, `opd/adv_abs_mean`,
        `opd/clamp_frac` (share of supervised tokens the floor or the clamp changed).
    """
    zero = torch.zeros((), dtype=logp_old.dtype, device=logp_old.device)
    logp_t = torch.where(loss_mask, logp_teacher, zero)
    logp_s = torch.where(loss_mask, logp_old, zero)
    delta = logp_t.clamp(min=logp_floor) - logp_s.clamp(min=logp_floor)
    a_opd = torch.where(loss_mask, delta.clamp(-adv_clamp, adv_clamp), zero)
    changed = (logp_t < logp_floor) | (logp_s < logp_floor) | (delta.abs() > adv_clamp)
    n = loss_mask.sum().clamp(min=1).to(logp_old.dtype)
    metrics = {
        names.REVERSE_KL: float((logp_s - logp_t).sum() / n),
        "opd/adv_mean": float(a_opd.sum() / n),
        "opd/adv_abs_mean": float(a_opd.abs().sum() / n),
        "opd/clamp_frac": float((changed & loss_mask).sum() / n),
    }
    return a_opd, metrics


def opd_advantage(
    batch: TokenBatch,
    *,
    step: int = 0,
    logp_floor: float = -10.0,
    adv_clamp: float = 10.0,
    kl_over: KlOver = "tokens",
    reply_kl: ReplyKl = "reverse",
    token_kl: TokenKl = "reverse",
    teacher_top_k: int = 20,
) -> tuple[torch.Tensor, dict[str, float]]:
    """OPD token advantages (N, S) for vanilla (n = 1) and Multi-Rollout (n > 1) OPD (under `kl_over: replies`,
    0 on the turns drawn among listed replies: the learner's KL over the list trains them; under `token_kl:
    forward`, 0 everywhere: the learner's forward KL over the teacher's top tokens trains the free-text turns; the
    metrics stay the sampled-token signal's).

    `step` (OPD has no schedule), `reply_kl` and `teacher_top_k` (the learner's and the teacher's) are unused;
    accepted for the registry's uniform signature.
    """
    del step, reply_kl, teacher_top_k
    advantage, metrics = compute_opd_token_advantage(
        require_teacher(batch, "opd"), batch.logp_old, batch.loss_mask, logp_floor=logp_floor, adv_clamp=adv_clamp
    )
    if token_kl == "forward":
        return torch.zeros_like(advantage), metrics
    return (without_listed_turns(advantage, batch) if kl_over == "replies" else advantage), metrics


def turn_kl_scores(
    logp_old: torch.Tensor, logp_teacher: torch.Tensor, turn_ids: torch.Tensor, loss_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """DivOPD turn score s(u) = sum_t (logp_old(t) - logp_T(t)) over each turn's supervised tokens.

    Args: (N, S) tensors as in TokenBatch. Returns `(turn ids (K,), s (K,))`, ids sorted ascending;
    only turns with at least one supervised token appear.
    """
    unique_turns, inverse = segment_index(turn_ids[loss_mask])
    signal = (logp_old - logp_teacher)[loss_mask]
    return unique_turns, segment_sum(signal, inverse, int(unique_turns.numel()))
