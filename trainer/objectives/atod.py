"""ATOD: the annealed OPD-GRPO hybrid advantage (ATOD paper section 4, OBJECTIVES.md section 4).

    A_t = kappa(s) * A_OPD_t * w_{k(t)} + rho(s) * A_GRPO_t
    p(s) = min(s / T, 1);  kappa(s) = max(kappa_min, kappa_init - (kappa_init - kappa_min) p(s))
                           rho(s)   = rho_init + (rho_max - rho_init) p(s)
with w from T-DUR (`trainer.objectives.tdur`), A_OPD from `opd`, A_GRPO from `grpo` (or another turn credit,
`advantage`: `trainer.objectives.credit`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from trainer.errors import ObjectiveError
from trainer.objectives import diagnostics as names
from trainer.objectives.batch import TokenBatch
from trainer.objectives.credit import rl_advantage
from trainer.objectives.grpo import GrpoConfig
from trainer.objectives.listed import ReplyKl
from trainer.objectives.opd import (
    KlOver,
    OpdConfig,
    TokenKl,
    compute_opd_token_advantage,
    forward_token_kl_mask,
    require_teacher,
    without_listed_turns,
)
from trainer.objectives.reply_rl import RlOver
from trainer.objectives.tdur import TDUR_UNITS, TdurUnit, compute_tdur_weights

_REASON = "INVALID_OBJECTIVE_CONFIG"


@dataclass(frozen=True)
class AtodConfig:
    """Hyperparameters of `atod_advantage` (field names are its keyword arguments).

    The paper's table of schedule values was lost; the schedule defaults are OBJECTIVES.md's.
    """

    kappa_init: float = 1.0
    """OPD coefficient kappa at step 0."""
    kappa_min: float = 0.1
    """Floor of kappa after annealing: a weak teacher anchor."""
    rho_init: float = 0.1
    """GRPO coefficient rho at step 0."""
    rho_max: float = 1.0
    """rho once annealing is complete."""
    coef_anneal_steps: int = 100
    """T: learner steps over which p(s) = min(s / T, 1) goes from 0 to 1."""
    anneal: bool = True
    """False fixes kappa = kappa_init and rho = rho_init (the `w/o Annealing` ablation)."""
    tdur: TdurUnit = "turn"
    """T-DUR unit: `turn` (ATOD), `token` (token-level reweighting ablation), `none` (w = 1)."""
    tdur_eps: float = 1e-8
    """A per-trajectory range of d or h below this normalises to 0.5."""
    epsilon: float = 1e-6
    """GRPO epsilon_A (see GrpoConfig)."""
    advantage: str = "outcome"
    """Turn credit of the RL term (see GrpoConfig.advantage)."""
    gamma: float = 0.95
    """GiGPO discount (see GrpoConfig.gamma)."""
    omega: float = 1.0
    """GiGPO step weight (see GrpoConfig.omega)."""
    logp_floor: float = -10.0
    """OPD log-prob floor (see OpdConfig)."""
    adv_clamp: float = 10.0
    """OPD signal clamp (see OpdConfig)."""
    kl_over: KlOver = "tokens"
    """Where the OPD term's KL is taken (see OpdConfig); under `replies` each listed turn's KL is weighted kappa(s)
    times its T-DUR weight (`atod_listed_turn_weights`)."""
    reply_kl: ReplyKl = "reverse"
    """Which KL over the listed replies (see OpdConfig)."""
    rl_over: RlOver = "tokens"
    """Where the RL term's ratio is taken (see GrpoConfig); `replies` needs `kl_over: replies`, so that what is left
    on a listed turn's tokens is the RL term alone."""
    token_kl: TokenKl = "reverse"
    """The OPD term on free-text turns (see OpdConfig); under `forward` the learner's forward KL over the teacher's
    top tokens, each token weighted kappa(s) times its T-DUR weight (`atod_token_kl_weights`), replaces
    kappa * A_OPD * w in the advantage."""
    teacher_top_k: int = 20
    """Teacher tokens per position under `token_kl: forward` (see OpdConfig)."""

    def __post_init__(self) -> None:
        GrpoConfig(
            epsilon=self.epsilon, advantage=self.advantage, gamma=self.gamma, omega=self.omega, rl_over=self.rl_over
        )
        if self.rl_over == "replies" and self.kl_over != "replies":
            raise ObjectiveError(
                "atod rl_over: replies moves each listed turn's RL term to its reply: set kl_over: replies too",
                reason=_REASON,
            )
        OpdConfig(
            logp_floor=self.logp_floor,
            adv_clamp=self.adv_clamp,
            kl_over=self.kl_over,
            reply_kl=self.reply_kl,
            token_kl=self.token_kl,
            teacher_top_k=self.teacher_top_k,
        )
        if self.kl_over == "replies" and self.tdur == "token":
            raise ObjectiveError(
                "atod kl_over: replies weighs each listed turn's KL by its turn's T-DUR weight: set tdur: turn or none",
                reason=_REASON,
            )
        if not 0 <= self.kappa_min <= self.kappa_init:
            raise ObjectiveError(
                f"atod needs 0 <= kappa_min <= kappa_init, got kappa_min={self.kappa_min}, "
                f"kappa_init={self.kappa_init}",
                reason=_REASON,
            )
        if self.rho_init < 0 or self.rho_max < 0:
            raise ObjectiveError(
                f"atod rho_init and rho_max must be >= 0, got {self.rho_init}, {self.rho_max}", reason=_REASON
            )
        if self.coef_anneal_steps < 1:
            raise ObjectiveError(f"atod.coef_anneal_steps must be >= 1, got {self.coef_anneal_steps}", reason=_REASON)
        if self.tdur not in TDUR_UNITS:
            raise ObjectiveError(f"atod.tdur must be one of {TDUR_UNITS}, got {self.tdur!r}", reason=_REASON)
        if not self.tdur_eps > 0:
            raise ObjectiveError(f"atod.tdur_eps must be > 0, got {self.tdur_eps}", reason=_REASON)


def atod_coefficients(
    step: int,
    *,
    kappa_init: float = 1.0,
    kappa_min: float = 0.1,
    rho_init: float = 0.1,
    rho_max: float = 1.0,
    coef_anneal_steps: int = 100,
    anneal: bool = True,
) -> tuple[float, float]:
    """(kappa(s), rho(s)) at global learner step `s` (eq. 10-12); the init values when `anneal` is off."""
    if not anneal:
        return kappa_init, rho_init
    progress = min(max(step, 0) / coef_anneal_steps, 1.0)
    kappa = max(kappa_min, kappa_init - (kappa_init - kappa_min) * progress)
    rho = rho_init + (rho_max - rho_init) * progress
    return kappa, rho


def _kappa(config: AtodConfig, step: int) -> float:
    return atod_coefficients(
        step,
        kappa_init=config.kappa_init,
        kappa_min=config.kappa_min,
        rho_init=config.rho_init,
        rho_max=config.rho_max,
        coef_anneal_steps=config.coef_anneal_steps,
        anneal=config.anneal,
    )[0]


def atod_listed_coef(config: AtodConfig, step: int) -> float:
    """Weight of the KL over listed replies at learner step `step`: kappa(s) under `kl_over: replies`, else 0."""
    return _kappa(config, step) if config.kl_over == "replies" else 0.0


def atod_token_kl_weights(batch: TokenBatch, config: AtodConfig, step: int) -> torch.Tensor | None:
    """Under `token_kl: forward`, each token's weight on the forward KL over the teacher's top tokens at learner
    step `step`: kappa(s) times its T-DUR weight (the weights of the OPD term it replaces); None under `reverse`."""
    if config.token_kl != "forward":
        return None
    w, _ = compute_tdur_weights(
        batch.logp_old,
        require_teacher(batch, "atod"),
        batch.turn_ids,
        batch.traj_ids,
        batch.loss_mask,
        tdur=config.tdur,
        eps=config.tdur_eps,
    )
    return _kappa(config, step) * w.to(torch.float32) * forward_token_kl_mask(batch)


def atod_listed_turn_weights(batch: TokenBatch, config: AtodConfig) -> torch.Tensor | None:
    """T-DUR's w_k of each turn drawn among listed replies (in `batch.listed`'s order) under `kl_over: replies` and
    `tdur: turn`: eq. 13-16 unchanged, d_k and h_k over the drawn reply's tokens and normalised within the trajectory
    with its other turns (docs/design/046); None where every listed turn weighs 1."""
    if config.kl_over != "replies" or config.tdur == "none" or batch.listed is None or not len(batch.listed):
        return None
    logp_teacher = require_teacher(batch, "atod")
    w, _ = compute_tdur_weights(
        batch.logp_old, logp_teacher, batch.turn_ids, batch.traj_ids, batch.loss_mask, tdur="turn", eps=config.tdur_eps
    )
    supervised = batch.turn_ids[batch.loss_mask]
    per_turn = torch.zeros(int(supervised.max()) + 1, dtype=w.dtype, device=w.device)
    per_turn = per_turn.scatter(0, supervised, w[batch.loss_mask])  # every token of a turn carries its turn's w_k
    return per_turn[torch.tensor(batch.listed.turn_ids, device=w.device)]


def atod_advantage(
    batch: TokenBatch,
    *,
    step: int,
    kappa_init: float = 1.0,
    kappa_min: float = 0.1,
    rho_init: float = 0.1,
    rho_max: float = 1.0,
    coef_anneal_steps: int = 100,
    anneal: bool = True,
    tdur: TdurUnit = "turn",
    tdur_eps: float = 1e-8,
    epsilon: float = 1e-6,
    advantage: str = "outcome",
    gamma: float = 0.95,
    omega: float = 1.0,
    logp_floor: float = -10.0,
    adv_clamp: float = 10.0,
    kl_over: KlOver = "tokens",
    reply_kl: ReplyKl = "reverse",
    rl_over: RlOver = "tokens",
    token_kl: TokenKl = "reverse",
    teacher_top_k: int = 20,
) -> tuple[torch.Tensor, dict[str, float]]:
    """ATOD hybrid token advantages (N, S), 0 off `loss_mask`, at global learner step `step` (under `kl_over:
    replies` no OPD term on the turns drawn among listed replies: `atod_listed_coef` weighs their KL; under
    `token_kl: forward` none at all, the RL term alone: `atod_token_kl_weights` weighs the learner's forward KL, and
    the `hybrid/*` signals stay the sampled-token term's; `reply_kl`, `rl_over` and `teacher_top_k` are the learner's
    and the teacher's, unused here).

    Metrics: the `grpo/*`, `opd/*` and `tdur/*` ones of its parts, plus `hybrid/kl_coef` (kappa),
    `hybrid/rl_coef` (rho), `hybrid/opd_signal`, `hybrid/rl_signal` and `hybrid/opd_rl_ratio`.
    """
    del reply_kl, rl_over, teacher_top_k
    logp_teacher = require_teacher(batch, "atod")
    kappa, rho = atod_coefficients(
        step,
        kappa_init=kappa_init,
        kappa_min=kappa_min,
        rho_init=rho_init,
        rho_max=rho_max,
        coef_anneal_steps=coef_anneal_steps,
        anneal=anneal,
    )
    a_grpo, grpo_metrics = rl_advantage(batch, advantage=advantage, epsilon=epsilon, gamma=gamma, omega=omega)
    a_opd, opd_metrics = compute_opd_token_advantage(
        logp_teacher, batch.logp_old, batch.loss_mask, logp_floor=logp_floor, adv_clamp=adv_clamp
    )
    w, tdur_metrics = compute_tdur_weights(
        batch.logp_old, logp_teacher, batch.turn_ids, batch.traj_ids, batch.loss_mask, tdur=tdur, eps=tdur_eps
    )
    if kl_over == "replies":
        a_opd = without_listed_turns(a_opd, batch)
    opd_term = kappa * a_opd * w
    rl_term = rho * a_grpo
    num_tokens = batch.loss_mask.sum().clamp(min=1).to(batch.logp_old.dtype)
    opd_signal = float(opd_term.abs().sum() / num_tokens)
    rl_signal = float(rl_term.abs().sum() / num_tokens)
    metrics = {
        **grpo_metrics,
        **opd_metrics,
        **tdur_metrics,
        names.KL_COEF: kappa,
        names.RL_COEF: rho,
        names.OPD_SIGNAL: opd_signal,
        names.RL_SIGNAL: rl_signal,
        names.OPD_RL_RATIO: opd_signal / rl_signal if rl_signal > 0 else math.nan,
    }
    return (rl_term if token_kl == "forward" else opd_term + rl_term), metrics
