"""Outcome advantages of GRPO (ATOD paper eq. 2-4) and their spread over a trajectory's tokens."""

from __future__ import annotations

import torch

from trainer.objectives.segments import segment_amax, segment_amin, segment_count, segment_index, segment_sum


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
