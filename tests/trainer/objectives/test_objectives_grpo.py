"""GRPO advantages against hand computations (ATOD eq. 2)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from trainer.errors import TrainerError
from trainer.objectives import GrpoConfig, TokenBatch, compute_grpo_outcome_advantage, grpo_advantage

BatchBuilder = Callable[..., TokenBatch]


def test_per_group_normalisation_by_hand() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 2.0])
    group_ids = torch.tensor([3, 3, 3, 3, 5, 5, 8])
    adv, metrics = compute_grpo_outcome_advantage(rewards, group_ids)
    # group 3: mean 0.5, unbiased std sqrt((4 * 0.25) / 3); group 5 all equal and group 8 alone: zero.
    a = 0.5 / (math.sqrt(1.0 / 3.0) + 1e-6)
    assert adv.tolist() == pytest.approx([a, -a, -a, a, 0.0, 0.0, 0.0], abs=1e-6)
    assert metrics["grpo/zero_adv_group_frac"] == pytest.approx(2.0 / 3.0)
    assert metrics["grpo/reward_mean"] == pytest.approx(5.0 / 7.0)
    assert metrics["grpo/num_groups"] == 3.0


def test_interleaved_groups_and_epsilon() -> None:
    rewards = torch.tensor([0.0, 3.0, 2.0, 3.0])
    group_ids = torch.tensor([1, 2, 1, 2])
    adv, metrics = compute_grpo_outcome_advantage(rewards, group_ids, epsilon=1.0)
    # group 1: mean 1, std sqrt(((-1)^2 + 1^2) / 1) = sqrt(2); group 2: all equal.
    a = 1.0 / (math.sqrt(2.0) + 1.0)
    assert adv.tolist() == pytest.approx([-a, 0.0, a, 0.0], abs=1e-6)
    assert metrics["grpo/zero_adv_group_frac"] == 0.5


def test_all_equal_rewards_give_zero_advantage() -> None:
    adv, metrics = compute_grpo_outcome_advantage(torch.full((8,), 0.7), torch.zeros(8, dtype=torch.long))
    assert torch.equal(adv, torch.zeros(8))
    assert metrics["grpo/zero_adv_group_frac"] == 1.0


def test_broadcast_to_every_loss_token_of_the_trajectory(make_batch: BatchBuilder) -> None:
    loss_mask = [[0, 1, 1, 0], [0, 0, 1, 1], [1, 1, 0, 0]]
    batch = make_batch(loss_mask, traj_ids=[0, 0, 1], rewards=[1.0, 0.0], group_ids=[4, 4])
    adv, _ = grpo_advantage(batch, step=0)
    # mean 0.5, unbiased std sqrt(0.5): trajectory 0 gets +0.5 / sqrt(0.5), trajectory 1 the opposite.
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    expected = [[0, a, a, 0], [0, 0, a, a], [-a, -a, 0, 0]]
    assert adv.tolist() == [pytest.approx(row, abs=1e-6) for row in expected]


def test_epsilon_must_be_positive() -> None:
    with pytest.raises(TrainerError, match="epsilon"):
        GrpoConfig(epsilon=0.0)
