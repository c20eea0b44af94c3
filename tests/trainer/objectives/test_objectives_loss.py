"""The PPO-clipped actor loss and its reductions against hand computations."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.errors import TrainerError
from trainer.objectives import ActorLossConfig, aggregate_loss, loss_weights, ppo_actor_loss, reduction_unit_ids
from trainer.objectives.loss import Reduction

NAN = float("nan")
LOSS_MAT = torch.tensor([[1.0, 2.0, 3.0, NAN], [4.0, NAN, float("inf"), 5.0], [NAN, NAN, NAN, NAN]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)


ALL_REDUCTIONS = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "turn-mean-token-mean"]


@pytest.mark.parametrize(
    ("reduction", "expected"),
    [
        ("token-mean", (1 + 2 + 3 + 4) / 4),
        ("seq-mean-token-mean", (2.0 + 4.0) / 2),  # rows with no supervised token do not count
        ("turn-mean-token-mean", (2.0 + 4.0) / 2),  # without unit ids every row is a unit
        ("seq-mean-token-sum", (6.0 + 4.0) / 2),
    ],
)
def test_reductions_by_hand(reduction: Reduction, expected: float) -> None:
    assert float(aggregate_loss(LOSS_MAT, MASK, reduction=reduction)) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("reduction", "expected"),
    [
        ("seq-mean-token-mean", (1.5 + 3.0 + 4.0) / 3),  # units {1, 2}, {3}, {4}
        ("seq-mean-token-sum", (3.0 + 3.0 + 4.0) / 3),
        ("token-mean", (1 + 2 + 3 + 4) / 4),  # unit ids do not change a token mean
    ],
)
def test_reductions_over_given_units(reduction: Reduction, expected: float) -> None:
    unit_ids = torch.tensor([[0, 0, 1, -1], [2, -1, -1, -1], [-1, -1, -1, -1]])
    value = aggregate_loss(LOSS_MAT, MASK, reduction=reduction, unit_ids=unit_ids)
    assert float(value) == pytest.approx(expected)


# The example: one trajectory, turn A of 1 token with loss 1 and turn B of 3 tokens with loss 0.
FULL_LOSS = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
FULL_MASK = torch.ones(1, 4, dtype=torch.bool)
FULL_TURNS = torch.tensor([[0, 1, 1, 1]])
HISTORY_LOSS = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
HISTORY_MASK = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
HISTORY_TURNS = torch.tensor([[0, -1, -1, -1], [1, 1, 1, -1]])


@pytest.mark.parametrize(
    ("reduction", "expected"),
    [("seq-mean-token-mean", 0.25), ("turn-mean-token-mean", 0.5), ("token-mean", 0.25), ("seq-mean-token-sum", 1.0)],
)
@pytest.mark.parametrize("context", ["full", "history"])
def test_the_trajectory_is_the_unit_in_both_context_modes(reduction: Reduction, expected: float, context: str) -> None:
    loss, mask, turns, traj = (
        (FULL_LOSS, FULL_MASK, FULL_TURNS, torch.tensor([0]))
        if context == "full"
        else (HISTORY_LOSS, HISTORY_MASK, HISTORY_TURNS, torch.tensor([0, 0]))
    )
    units = reduction_unit_ids(reduction, traj, turns)
    assert float(aggregate_loss(loss, mask, reduction=reduction, unit_ids=units)) == pytest.approx(expected)


def test_long_failures_do_not_outweigh_short_successes_in_history_mode() -> None:
    # Trajectory 0: 10 one-token turn rows of loss 1; trajectory 1: 1 turn row of loss 0.
    loss = torch.cat([torch.ones(10, 1), torch.zeros(1, 1)])
    mask = torch.ones(11, 1, dtype=torch.bool)
    turns = torch.arange(11)[:, None]
    traj = torch.tensor([0] * 10 + [1])
    seq = reduction_unit_ids("seq-mean-token-mean", traj, turns)
    per_turn = reduction_unit_ids("turn-mean-token-mean", traj, turns)
    assert float(aggregate_loss(loss, mask, reduction="seq-mean-token-mean", unit_ids=seq)) == pytest.approx(0.5)
    assert float(aggregate_loss(loss, mask, reduction="turn-mean-token-mean", unit_ids=per_turn)) == pytest.approx(
        10 / 11
    )


@pytest.mark.parametrize("reduction", ALL_REDUCTIONS)
def test_weights_sum_to_one_and_micro_batches_add_up(reduction: Reduction) -> None:
    # Trajectory 0 spans rows 0-1 (split across micro-batches below), trajectory 1 is row 2.
    traj = torch.tensor([0, 0, 1])
    turns = torch.tensor([[0, 0, 1, -1], [2, -1, -1, -1], [-1, -1, -1, -1]])
    mask = MASK.clone()
    mask[2, 0] = True
    turns[2, 0] = 3
    loss_mat = LOSS_MAT.clone()
    loss_mat[2, 0] = 7.0
    units = reduction_unit_ids(reduction, traj, turns)
    weights = loss_weights(mask, reduction=reduction, unit_ids=units)
    assert weights.dtype == torch.float64
    assert float(weights.sum()) == pytest.approx(1.0 if reduction != "seq-mean-token-sum" else 5 / 2)
    whole = aggregate_loss(loss_mat, mask, reduction=reduction, unit_ids=units)
    parts = sum(
        float(aggregate_loss(loss_mat[i : i + 1], mask[i : i + 1], weights=weights[i : i + 1])) for i in range(3)
    )
    assert parts == pytest.approx(float(whole))
    expected = {
        "token-mean": (1 + 2 + 3 + 4 + 7) / 5,
        "seq-mean-token-mean": ((1 + 2 + 3 + 4) / 4 + 7) / 2,
        "seq-mean-token-sum": (10 + 7) / 2,
        "turn-mean-token-mean": (1.5 + 3 + 4 + 7) / 4,
    }[reduction]
    assert float(whole) == pytest.approx(expected)


def test_unknown_reduction() -> None:
    with pytest.raises(TrainerError) as info:
        aggregate_loss(LOSS_MAT, MASK, reduction="seq-sum")  # type: ignore[arg-type]
    assert info.value.reason == "UNKNOWN_REDUCTION"
    assert "token-mean" in info.value.message


def test_clipped_surrogate_by_hand() -> None:
    log_ratio = torch.tensor([[math.log(1.5), math.log(1.5), math.log(0.5), math.log(0.5)]])
    logp_old = torch.full((1, 4), -1.0)
    advantages = torch.tensor([[1.0, -1.0, 1.0, -1.0]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    loss, metrics = ppo_actor_loss(logp_old + log_ratio, logp_old, advantages, mask, clip_eps=0.2)
    # per token max(-A r, -A clip(r, 0.8, 1.2)):
    #   r 1.5, A +1: max(-1.5, -1.2) = -1.2 (clipped)    r 1.5, A -1: max(1.5, 1.2) = 1.5
    #   r 0.5, A +1: max(-0.5, -0.8) = -0.5              r 0.5, A -1: max(0.5, 0.8) = 0.8 (clipped)
    assert float(loss) == pytest.approx((-1.2 + 1.5 - 0.5 + 0.8) / 4)
    assert float(metrics["actor/pg_loss"]) == pytest.approx(float(loss))
    assert float(metrics["actor/clipfrac"]) == pytest.approx(0.5)
    assert float(metrics["actor/ratio_mean"]) == pytest.approx((1.5 + 1.5 + 0.5 + 0.5) / 4)
    # k3 = (r - 1) - log r
    k3 = 2 * (0.5 - math.log(1.5)) + 2 * (-0.5 - math.log(0.5))
    assert float(metrics["actor/approx_kl"]) == pytest.approx(k3 / 4)


@pytest.mark.parametrize("reduction", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_gradient_at_ratio_one_is_minus_advantage_over_normaliser(reduction: Reduction) -> None:
    gen = torch.Generator().manual_seed(1)
    mask = torch.tensor([[1, 1, 1, 0], [0, 1, 0, 0], [1, 1, 0, 0]], dtype=torch.bool)
    logp_old = -torch.rand(3, 4, generator=gen)
    advantages = torch.randn(3, 4, generator=gen)
    logp = logp_old.clone().requires_grad_(True)
    loss, _ = ppo_actor_loss(logp, logp_old, advantages, mask, reduction=reduction)
    loss.backward()
    assert logp.grad is not None
    # token-mean: 6 supervised tokens; seq-mean-token-mean: 3 rows of 3, 1 and 2 tokens; token-sum: 3 rows.
    normaliser = {
        "token-mean": torch.full((3, 1), 6.0),
        "seq-mean-token-mean": torch.tensor([[3.0 * 3], [3.0 * 1], [3.0 * 2]]),
        "seq-mean-token-sum": torch.full((3, 1), 3.0),
    }[reduction]
    expected = torch.where(mask, -advantages / normaliser, 0.0)
    torch.testing.assert_close(logp.grad, expected)


def test_clipped_tokens_get_no_gradient() -> None:
    logp_old = torch.full((1, 2), -1.0)
    logp = (logp_old + torch.tensor([[math.log(1.5), 0.0]])).requires_grad_(True)
    loss, _ = ppo_actor_loss(logp, logp_old, torch.tensor([[1.0, 1.0]]), torch.ones(1, 2, dtype=torch.bool))
    loss.backward()
    assert logp.grad is not None
    assert logp.grad.tolist() == [[0.0, pytest.approx(-0.5)]]


def test_masked_positions_never_matter() -> None:
    gen = torch.Generator().manual_seed(2)
    mask = torch.tensor([[1, 0, 1], [0, 1, 1]], dtype=torch.bool)
    logp_old = -torch.rand(2, 3, generator=gen)
    logp_clean = logp_old + 0.1 * torch.randn(2, 3, generator=gen)
    advantages = torch.randn(2, 3, generator=gen)

    def run(logp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict]:
        leaf = logp.clone().requires_grad_(True)
        loss, metrics = ppo_actor_loss(leaf, old, adv, mask, reduction="seq-mean-token-mean")
        loss.backward()
        assert leaf.grad is not None
        return loss.detach(), leaf.grad, metrics

    clean = run(logp_clean, logp_old, advantages)
    off = ~mask
    noisy = run(
        logp_clean.masked_fill(off, NAN),
        logp_old.masked_fill(off, float("-inf")),
        advantages.masked_fill(off, float("inf")),
    )
    torch.testing.assert_close(noisy[0], clean[0])
    torch.testing.assert_close(noisy[1], clean[1])
    assert noisy[1][off].eq(0).all()
    for name, value in clean[2].items():
        torch.testing.assert_close(noisy[2][name], value)


def test_loss_config_validation() -> None:
    assert ActorLossConfig().reduction is None
    for kwargs in ({"clip_eps": 0.0}, {"reduction": "mean"}):
        with pytest.raises(TrainerError):
            ActorLossConfig(**kwargs)
