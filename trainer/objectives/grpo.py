"""GRPO: group-relative outcome advantages (ATOD paper eq. 2-4, OBJECTIVES.md section 2)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.errors import ObjectiveError
from trainer.objectives.batch import TokenBatch
from trainer.objectives.credit import check_credit, rl_advantage
from trainer.objectives.reply_rl import RlOver, check_rl_over


@dataclass(frozen=True)
class GrpoConfig:
    """Hyperparameters of `grpo_advantage` (field names are its keyword arguments)."""

    epsilon: float = 1e-6
    """epsilon_A in A_i = (r_i - mean(r)) / (std(r) + epsilon_A): keeps all-equal groups finite."""
    advantage: str = "outcome"
    """Turn credit (`trainer.objectives.credit`): `outcome` (GRPO), `anchor` (GiGPO), `tree_mc` (VinePPO-style
    Monte Carlo values), `tree_sibling` (TreeRL / Tree-GRPO); the tree ones need `rollout.strategy: tree`
    to credit more than the first turn."""
    gamma: float = 0.95
    """GiGPO's discount of the anchor-state return G_u = gamma^(turns to go) R (its paper's 0.95)."""
    omega: float = 1.0
    """GiGPO's weight of the step advantage against the episode's (its paper's 1)."""
    rl_over: RlOver = "tokens"
    """`tokens` (the papers): PPO's ratio on each sampled token. `replies`: a turn drawn among listed replies
    (`rollout.action_match: choice`) takes PPO's ratio on its reply's probability normalised over the list, the
    policy it was drawn from (`trainer.objectives.reply_rl`, docs/design/047); free-text turns keep the token term."""

    def __post_init__(self) -> None:
        if not self.epsilon > 0:
            raise ObjectiveError(f"grpo.epsilon must be > 0, got {self.epsilon}", reason="INVALID_OBJECTIVE_CONFIG")
        check_rl_credit(self.advantage, self.gamma, self.omega)
        check_rl_over(self.rl_over)


def check_rl_credit(advantage: str, gamma: float, omega: float) -> None:
    """ObjectiveError unless `advantage` is a registered turn credit, 0 < gamma <= 1 and omega >= 0."""
    check_credit(advantage)
    if not 0 < gamma <= 1 or omega < 0:
        raise ObjectiveError(
            f"need 0 < gamma <= 1 and omega >= 0, got gamma={gamma}, omega={omega}", reason="INVALID_OBJECTIVE_CONFIG"
        )


def grpo_advantage(
    batch: TokenBatch,
    *,
    step: int = 0,
    epsilon: float = 1e-6,
    advantage: str = "outcome",
    gamma: float = 0.95,
    omega: float = 1.0,
    rl_over: RlOver = "tokens",
) -> tuple[torch.Tensor, dict[str, float]]:
    """GRPO token advantages (N, S): each supervised token gets its turn's credit (`advantage`; `outcome`:
    A_i of its trajectory i), 0 elsewhere.

    `step` is unused (GRPO has no schedule); `rl_over` is the learner's (it moves a listed turn's advantage to its
    reply); both are accepted for the registry's uniform signature.
    """
    del step, rl_over
    return rl_advantage(batch, advantage=advantage, epsilon=epsilon, gamma=gamma, omega=omega)
