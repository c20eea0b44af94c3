"""ATOD: schedule endpoints, the hybrid advantage by hand, ablation switches, diagnostics."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from trainer.errors import TrainerError
from trainer.objectives import AtodConfig, TokenBatch, atod_advantage, atod_coefficients, get_advantage

BatchBuilder = Callable[..., TokenBatch]


@pytest.mark.parametrize(
    ("step", "kappa", "rho"),
    [
        (0, 1.0, 0.1),  # p = 0
        (25, 1.0 - 0.9 * 0.25, 0.1 + 0.9 * 0.25),
        (50, 0.55, 0.55),
        (100, 0.1, 1.0),  # p = 1
        (1000, 0.1, 1.0),  # p stays 1
        (-5, 1.0, 0.1),  # before the start: p = 0
    ],
)
def test_schedule_defaults(step: int, kappa: float, rho: float) -> None:
    assert atod_coefficients(step) == pytest.approx((kappa, rho))


def test_schedule_floor_and_custom_window() -> None:
    # kappa_init - (kappa_init - kappa_min) p never drops below kappa_min; p = 10 / 20.
    assert atod_coefficients(10, kappa_init=2.0, kappa_min=0.5, rho_init=0.0, rho_max=4.0, coef_anneal_steps=20) == (
        pytest.approx(1.25),
        pytest.approx(2.0),
    )
    assert atod_coefficients(20, kappa_init=2.0, kappa_min=0.5, coef_anneal_steps=20)[0] == pytest.approx(0.5)


@pytest.mark.parametrize("step", [0, 50, 10_000])
def test_anneal_off_keeps_init_values(step: int) -> None:
    assert atod_coefficients(step, kappa_init=0.7, rho_init=0.3, anneal=False) == (0.7, 0.3)


@pytest.fixture
def pair(make_batch: BatchBuilder) -> TokenBatch:
    """Two single-turn trajectories of one group, rewards 1 and 0."""
    return make_batch(
        [[1, 1], [1, 0]],
        logp_old=[[-1.0, -2.0], [-1.0, 0.0]],
        logp_teacher=[[-0.5, -2.5], [-3.0, 0.0]],
        rewards=[1.0, 0.0],
        group_ids=[0, 0],
    )


# A_GRPO = +-0.5 / (sqrt(0.5) + 1e-6);  A_OPD = [0.5, -0.5] and [-2];  single-turn trajectories: w = 0.75.
G = 0.5 / (math.sqrt(0.5) + 1e-6)


def test_hybrid_at_start_by_hand(pair: TokenBatch) -> None:
    adv, metrics = atod_advantage(pair, step=0)
    kappa, rho, w = 1.0, 0.1, 0.75
    expected = [[kappa * w * 0.5 + rho * G, kappa * w * -0.5 + rho * G], [kappa * w * -2.0 - rho * G, 0.0]]
    assert adv.tolist() == [pytest.approx(row) for row in expected]
    opd_signal = (0.375 + 0.375 + 1.5) / 3
    rl_signal = rho * G
    assert metrics["hybrid/kl_coef"] == 1.0
    assert metrics["hybrid/rl_coef"] == 0.1
    assert metrics["hybrid/opd_signal"] == pytest.approx(opd_signal)
    assert metrics["hybrid/rl_signal"] == pytest.approx(rl_signal)
    assert metrics["hybrid/opd_rl_ratio"] == pytest.approx(opd_signal / rl_signal)
    assert metrics["tdur/mean_weight"] == 0.75
    assert metrics["grpo/zero_adv_group_frac"] == 0.0


def test_hybrid_after_annealing_without_tdur(pair: TokenBatch) -> None:
    adv, metrics = atod_advantage(pair, step=100, tdur="none")
    kappa, rho = 0.1, 1.0
    expected = [[kappa * 0.5 + rho * G, kappa * -0.5 + rho * G], [kappa * -2.0 - rho * G, 0.0]]
    assert adv.tolist() == [pytest.approx(row) for row in expected]
    assert metrics["hybrid/opd_rl_ratio"] < 1.0 < atod_advantage(pair, step=0)[1]["hybrid/opd_rl_ratio"]


def test_anneal_off_ablation(pair: TokenBatch) -> None:
    late_off, metrics = atod_advantage(pair, step=100, anneal=False)
    early, _ = atod_advantage(pair, step=0)
    assert torch.equal(late_off, early)
    assert (metrics["hybrid/kl_coef"], metrics["hybrid/rl_coef"]) == (1.0, 0.1)


def test_is_the_sum_of_its_parts(canonical_batch: TokenBatch) -> None:
    step = 37
    kappa, rho = atod_coefficients(step)
    opd, _ = get_advantage("opd")(canonical_batch, step=step)
    grpo, _ = get_advantage("grpo")(canonical_batch, step=step)
    none, _ = atod_advantage(canonical_batch, step=step, tdur="none")
    torch.testing.assert_close(none, kappa * opd + rho * grpo)


def test_ratio_is_nan_without_reward_signal(pair: TokenBatch) -> None:
    flat = TokenBatch(**{**pair.__dict__, "rewards": torch.tensor([1.0, 1.0])})
    adv, metrics = atod_advantage(flat, step=0)
    assert metrics["hybrid/rl_signal"] == 0.0
    assert math.isnan(metrics["hybrid/opd_rl_ratio"])
    assert bool(torch.isfinite(adv).all())


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kappa_min": 2.0},
        {"kappa_min": -0.1},
        {"rho_max": -1.0},
        {"coef_anneal_steps": 0},
        {"tdur": "sentence"},
        {"tdur_eps": 0.0},
        {"epsilon": 0.0},
        {"logp_floor": 1.0},
    ],
)
def test_config_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises(TrainerError) as info:
        AtodConfig(**kwargs)  # type: ignore[arg-type]
    assert info.value.reason == "INVALID_OBJECTIVE_CONFIG"
