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

    def __post_init__(self) -> None:
        if not self.epsilon > 0:
            raise ObjectiveError(f"grpo.epsilon must be > 0, got {self.epsilon}", reason="INVALID_OBJECTIVE_CONFIG")


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


def grpo_advantage(batch: TokenBatch, *, step: int = 0, epsilon: float = 1e-6) -> tuple[torch.Tensor, dict[str, float]]:
    """GRPO token advantages (N, S): A_i of trajectory i on each of its supervised tokens, 0 elsewhere.

    `step` is unused (GRPO has no schedule); it is accepted for the registry's uniform signature.
    """
    del step
    per_traj, metrics = compute_grpo_outcome_advantage(batch.rewards, batch.group_ids, epsilon=epsilon)
    return broadcast_trajectory_values(per_traj.to(batch.logp_old.dtype), batch.traj_ids, batch.loss_mask), metrics
