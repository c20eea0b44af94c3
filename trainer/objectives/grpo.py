"""GRPO: group-relative outcome advantages (ATOD paper eq. 2-4, OBJECTIVES.md section 2)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.errors import ObjectiveError
from trainer.objectives.batch import TokenBatch
from trainer.objectives.segments import segment_amax, segment_amin, segment_count, segment_index, segment_sum


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

    def __post_init__(self) -> None:
        if not self.epsilon > 0:
            raise ObjectiveError(f"grpo.epsilon must be > 0, got {self.epsilon}", reason="INVALID_OBJECTIVE_CONFIG")
        check_rl_credit(self.advantage, self.gamma, self.omega)


def check_rl_credit(advantage: str, gamma: float, omega: float) -> None:
    """ObjectiveError unless `advantage` is a registered turn credit, 0 < gamma <= 1 and omega >= 0."""
    from trainer.objectives.credit import check_credit

    check_credit(advantage)
    if not 0 < gamma <= 1 or omega < 0:
        raise ObjectiveError(
            f"need 0 < gamma <= 1 and omega >= 0, got gamma={gamma}, omega={omega}", reason="INVALID_OBJECTIVE_CONFIG"
        )


def compute_grpo_outcome_advantage(
    rewards: torch.Tensor, group_ids: torch.Tensor, *, epsilon: float = 1e-6
) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-trajectory GRPO advantage A_i = (r_i - mean_g(r)) / (std_g(r) + epsilon).

    Args:
        rewards: (T,) outcome reward r_i of each trajectory.
        group_ids: (T,) task group of each trajectory; any integers.
        epsilon: epsilon_A.

    `std_g` is the unbiased (Bessel-corrected) sample std of the group, as `torch.std` and verl compute
    it; a group of one trajectory has std 0 and hence advantage 0.

    Returns:
        A: (T,) advantages; metrics `grpo/zero_adv_group_frac` (share of groups whose rewards are all
        equal, which carry no signal), `grpo/reward_mean`, `grpo/num_groups`.
    """
    _, group = segment_index(group_ids)
    num_groups = int(group.max()) + 1
    r = rewards.to(torch.float64)
    count = segment_count(group, num_groups, r.dtype)
    mean = segment_sum(r, group, num_groups) / count
    centred = r - mean[group]
    var = segment_sum(centred * centred, group, num_groups) / (count - 1).clamp(min=1.0)
    std = var.sqrt()
    advantages = (centred / (std[group] + epsilon)).to(rewards.dtype)
    all_equal = segment_amax(r, group, num_groups) == segment_amin(r, group, num_groups)
    metrics = {
        "grpo/zero_adv_group_frac": float(all_equal.to(torch.float64).mean()),
        "grpo/reward_mean": float(r.mean()),
        "grpo/num_groups": float(num_groups),
    }
    return advantages, metrics


def broadcast_trajectory_values(values: torch.Tensor, traj_ids: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Give every supervised token its trajectory's value: `values (T,)` -> `(N, S)`, 0 off `loss_mask`."""
    per_row = values[traj_ids]
    return torch.where(loss_mask, per_row[:, None], torch.zeros((), dtype=values.dtype, device=values.device))


def grpo_advantage(
    batch: TokenBatch,
    *,
    step: int = 0,
    epsilon: float = 1e-6,
    advantage: str = "outcome",
    gamma: float = 0.95,
    omega: float = 1.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GRPO token advantages (N, S): each supervised token gets its turn's credit (`advantage`; `outcome`:
    A_i of its trajectory i), 0 elsewhere.

    `step` is unused (GRPO has no schedule); it is accepted for the registry's uniform signature.
    """
    from trainer.objectives.credit import rl_advantage

    del step
    return rl_advantage(batch, advantage=advantage, epsilon=epsilon, gamma=gamma, omega=omega)
