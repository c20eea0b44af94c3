"""Names of the ATOD diagnostics (paper 000 Appendix B.3; OBJECTIVES.md section 4) and their meaning.

The objectives compute the ones that follow from a TokenBatch. Success rate and mean turns come from
the rollouts, and actor entropy (full-vocabulary entropy of the current policy) from the learner's
forward pass, so those are computed there under the names below.
"""

from __future__ import annotations

KL_COEF = "hybrid/kl_coef"
"""kappa(s), the OPD coefficient; healthy runs show it decreasing."""
RL_COEF = "hybrid/rl_coef"
"""rho(s), the GRPO coefficient; healthy runs show it increasing."""
OPD_SIGNAL = "hybrid/opd_signal"
"""mean |kappa * w * A_OPD| over supervised tokens."""
RL_SIGNAL = "hybrid/rl_signal"
"""mean |rho * A_GRPO| over supervised tokens."""
OPD_RL_RATIO = "hybrid/opd_rl_ratio"
"""OPD_SIGNAL / RL_SIGNAL; above 1 early, below 1 late; NaN when RL_SIGNAL is 0 (every group all-equal)."""
TDUR_ACTIVE_RATIO = "tdur/active_ratio"
"""share of T-DUR units (turns, or tokens for tdur=token) with weight > 0.5."""
TDUR_MEAN_WEIGHT = "tdur/mean_weight"
"""mean T-DUR weight over units."""
TEACHER_STUDENT_GAP = "tdur/gap_mean"
"""mean over turns of d_k = mean_t |logp_old - logp_T| (always per turn, whatever the tdur unit)."""
UNCERTAINTY_MEAN = "tdur/uncertainty_mean"
"""mean over turns of h_k = mean_t -logp_old (sampled-token entropy estimate)."""

REVERSE_KL = "opd/reverse_kl"
"""mean over supervised tokens of logp_old - logp_T: the k1 estimate of KL(student || teacher) (OPD, ATOD)."""

LISTED_KL = "opd/listed_kl"
"""Mean over the turns drawn among listed replies of KL(student's choice || teacher's), each before its update
(`kl_over: replies`, the learner's)."""

# Computed outside trainer/objectives (named here so every producer and the plot agree).
ACTOR_ENTROPY = "actor/entropy"
"""mean full-vocabulary entropy of the current policy on supervised tokens (learner)."""
SUCCESS_RATE = "rollout/success_rate"
"""share of trajectories that solved their task (rollout)."""
MEAN_TURNS = "rollout/mean_turns"
"""mean number of turns per trajectory (rollout)."""
EVAL_SUCCESS_RATE = "eval/success_rate"
"""held-out success rate, every `eval.every` steps (driver)."""
EVAL_MEAN_TURNS = "eval/mean_turns"
"""held-out mean turns, every `eval.every` steps (driver)."""

ATOD_DIAGNOSTICS = (
    KL_COEF,
    RL_COEF,
    OPD_RL_RATIO,
    ACTOR_ENTROPY,
    TDUR_ACTIVE_RATIO,
    TDUR_MEAN_WEIGHT,
    TEACHER_STUDENT_GAP,
    SUCCESS_RATE,
    MEAN_TURNS,
)
"""Every diagnostic of OBJECTIVES.md section 4, in its order."""
