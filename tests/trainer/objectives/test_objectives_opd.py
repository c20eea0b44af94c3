"""OPD advantages and the DivOPD turn score against hand computations (ATOD eq. 5-7)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from trainer.errors import TrainerError
from trainer.objectives import OpdConfig, TokenBatch, opd_advantage, turn_kl_scores

BatchBuilder = Callable[..., TokenBatch]


@pytest.fixture
def floored_batch(make_batch: BatchBuilder) -> TokenBatch:
    """Row 0: three supervised tokens, two below the -10 floor; row 1: one token, one masked slot."""
    return make_batch(
        [[1, 1, 1], [0, 1, 0]],
        logp_old=[[-2.0, -3.0, -11.0], [0.0, -0.25, 0.0]],
        logp_teacher=[[-1.0, -12.0, -0.5], [0.0, -4.25, 0.0]],
    )


def test_floor_and_difference_by_hand(floored_batch: TokenBatch) -> None:
    adv, metrics = opd_advantage(floored_batch, step=0)
    # max(-1,-10) - max(-2,-10) = 1;  max(-12,-10) - max(-3,-10) = -7;  max(-0.5,-10) - max(-11,-10) = 9.5
    # row 1: -4.25 - (-0.25) = -4
    assert adv.tolist() == [pytest.approx([1.0, -7.0, 9.5]), pytest.approx([0.0, -4.0, 0.0])]
    # k1 reverse KL: mean(logp_old - logp_T) = ((-1) + 9 + (-10.5) + 4) / 4
    assert metrics["opd/reverse_kl"] == pytest.approx(1.5 / 4)
    assert metrics["opd/adv_mean"] == pytest.approx((1.0 - 7.0 + 9.5 - 4.0) / 4)
    assert metrics["opd/adv_abs_mean"] == pytest.approx((1.0 + 7.0 + 9.5 + 4.0) / 4)
    assert metrics["opd/clamp_frac"] == pytest.approx(2 / 4)


def test_clamp(floored_batch: TokenBatch) -> None:
    adv, metrics = opd_advantage(floored_batch, step=0, adv_clamp=5.0)
    assert adv.tolist() == [pytest.approx([1.0, -5.0, 5.0]), pytest.approx([0.0, -4.0, 0.0])]
    assert metrics["opd/clamp_frac"] == pytest.approx(2 / 4)  # the same two tokens (floored, then clamped)


def test_masked_positions_never_matter(floored_batch: TokenBatch) -> None:
    reference, ref_metrics = opd_advantage(floored_batch, step=0)
    unsupervised = ~floored_batch.loss_mask
    noisy = TokenBatch(
        **{
            **floored_batch.__dict__,
            "logp_old": floored_batch.logp_old.masked_fill(unsupervised, float("nan")),
            "logp_teacher": floored_batch.logp_teacher.masked_fill(unsupervised, float("-inf")),  # type: ignore[union-attr]
        }
    )
    adv, metrics = opd_advantage(noisy, step=0)
    assert torch.equal(adv, reference)
    assert metrics == ref_metrics


def test_missing_teacher_is_a_clear_error(floored_batch: TokenBatch) -> None:
    no_teacher = TokenBatch(**{**floored_batch.__dict__, "logp_teacher": None})
    with pytest.raises(TrainerError) as info:
        opd_advantage(no_teacher, step=0)
    assert isinstance(info.value, ValueError)
    assert info.value.reason == "TEACHER_LOGPROBS_MISSING"


def test_turn_kl_scores_sum_per_turn() -> None:
    loss_mask = torch.tensor([[1, 1, 0, 1], [0, 1, 1, 0]], dtype=torch.bool)
    turn_ids = torch.tensor([[7, 7, -1, 9], [-1, 3, 3, -1]])
    logp_old = torch.tensor([[-1.0, -2.0, 5.0, -0.5], [9.0, -1.0, -1.5, 9.0]])
    logp_teacher = torch.tensor([[-2.0, -2.5, 0.0, -0.25], [0.0, -3.0, -0.5, 0.0]])
    ids, scores = turn_kl_scores(logp_old, logp_teacher, turn_ids, loss_mask)
    # turn 3: (-1 + 3) + (-1.5 + 0.5) = 1;  turn 7: (-1 + 2) + (-2 + 2.5) = 1.5;  turn 9: -0.5 + 0.25
    assert ids.tolist() == [3, 7, 9]
    assert scores.tolist() == pytest.approx([1.0, 1.5, -0.25])


@pytest.mark.parametrize("kwargs", [{"logp_floor": 0.0}, {"adv_clamp": -1.0}])
def test_config_validation(kwargs: dict[str, float]) -> None:
    with pytest.raises(TrainerError) as info:
        OpdConfig(**kwargs)
    assert info.value.reason == "INVALID_OBJECTIVE_CONFIG"
