"""The PPO-clipped actor loss and its reductions against hand computations."""

from __future__ import annotations

import math

import pytest
import torch

from envhub.core.errors import EnvhubError
from trainer.objectives import ActorLossConfig, aggregate_loss, ppo_actor_loss, reduction_denominator
from trainer.objectives.loss import Reduction

NAN = float("nan")
LOSS_MAT = torch.tensor([[1.0, 2.0, 3.0, NAN], [4.0, NAN, float("inf"), 5.0], [NAN, NAN, NAN, NAN]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)


@pytest.mark.parametrize(
    ("reduction", "expected"),
    [
        ("token-mean", (1 + 2 + 3 + 4) / 4),
        ("seq-mean-token-mean", (2.0 + 4.0) / 2),  # rows with no supervised token do not count
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
        ("token-mean", (1 + 2 + 3 + 4) / 4),  # row_ids do not change a token mean
    ],
)
def test_reductions_over_turn_units(reduction: Reduction, expected: float) -> None:
    row_ids = torch.tensor([[0, 0, 1, -1], [2, -1, -1, -1], [-1, -1, -1, -1]])
    value = aggregate_loss(LOSS_MAT, MASK, reduction=reduction, row_ids=row_ids)
    assert float(value) == pytest.approx(expected)


@pytest.mark.parametrize("reduction", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("units", ["rows", "turns"])
def test_micro_batches_with_normaliser_add_up(reduction: Reduction, units: str) -> None:
    row_ids = torch.tensor([[0, 0, 1, -1], [2, -1, -1, -1], [-1, -1, -1, -1]]) if units == "turns" else None
    whole = aggregate_loss(LOSS_MAT, MASK, reduction=reduction, row_ids=row_ids)
    normaliser = reduction_denominator(MASK, reduction=reduction, row_ids=row_ids)
    # 4 supervised tokens; 2 non-empty rows; 3 turns
    assert normaliser == {"token-mean": 4.0}.get(reduction, 3.0 if units == "turns" else 2.0)
    parts = sum(
        float(
            aggregate_loss(
                LOSS_MAT[i : i + 1],
                MASK[i : i + 1],
                reduction=reduction,
                row_ids=None if row_ids is None else row_ids[i : i + 1],
                normaliser=normaliser,
            )
        )
        for i in range(3)
    )
    assert parts == pytest.approx(float(whole))


def test_unknown_reduction() -> None:
    with pytest.raises(EnvhubError) as info:
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
        with pytest.raises(EnvhubError):
            ActorLossConfig(**kwargs)
