"""T-DUR weights against hand computations (ATOD eq. 13-16) and the ablation units."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from trainer.errors import TrainerError
from trainer.objectives import TokenBatch, compute_tdur_weights

BatchBuilder = Callable[..., TokenBatch]

# One trajectory of four turns (one turn per row; S = 3, padded with masked zeros).
LOSS_MASK = [[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]]
LOGP_OLD = [[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0], [-2.0, -2.0, -2.0], [-1.0, -1.0, 0.0]]
LOGP_TEACHER = [[-1.0, -1.0, 0.0], [-2.5, 0.0, 0.0], [-2.0, -2.0, -2.0], [-1.25, -0.75, 0.0]]


def soft_or(d_norm: float, h_norm: float) -> float:
    return 1.0 - (1.0 - d_norm) * (1.0 - h_norm)


# d_k = mean |logp_old - logp_T|: turn 0 (0 + 1)/2 = 0.5, turn 1 2, turn 2 0, turn 3 (0.25 + 0.25)/2 = 0.25
# h_k = mean -logp_old:           turn 0 (1 + 2)/2 = 1.5, turn 1 0.5, turn 2 2, turn 3 1
# d~ = d / 2 (min 0, max 2);  h~ = (h - 0.5) / 1.5
TURN_W = [
    soft_or(0.25, 1.0 / 1.5),  # 0.75
    soft_or(1.0, 0.0),  # 1
    soft_or(0.0, 1.0),  # 1
    soft_or(0.125, 0.5 / 1.5),  # 0.41667
]


def _weights(batch: TokenBatch, tdur: str = "turn") -> tuple[torch.Tensor, dict[str, float]]:
    assert batch.logp_teacher is not None
    return compute_tdur_weights(
        batch.logp_old,
        batch.logp_teacher,
        batch.turn_ids,
        batch.traj_ids,
        batch.loss_mask,
        tdur=tdur,  # type: ignore[arg-type]
    )


def _per_token(row_weights: list[float]) -> list[list[float]]:
    return [[w * m for m in row] for w, row in zip(row_weights, LOSS_MASK, strict=True)]


@pytest.fixture
def trajectory(make_batch: BatchBuilder) -> TokenBatch:
    return make_batch(LOSS_MASK, logp_old=LOGP_OLD, logp_teacher=LOGP_TEACHER, traj_ids=[0, 0, 0, 0])


def test_turn_weights_by_hand(trajectory: TokenBatch) -> None:
    w, metrics = _weights(trajectory)
    assert w.tolist() == [pytest.approx(row) for row in _per_token(TURN_W)]
    assert metrics["tdur/active_ratio"] == pytest.approx(3 / 4)  # w > 0.5 on turns 0, 1, 2
    assert metrics["tdur/mean_weight"] == pytest.approx(sum(TURN_W) / 4)
    assert metrics["tdur/gap_mean"] == pytest.approx((0.5 + 2.0 + 0.0 + 0.25) / 4)
    assert metrics["tdur/uncertainty_mean"] == pytest.approx((1.5 + 0.5 + 2.0 + 1.0) / 4)


def test_token_unit_by_hand(trajectory: TokenBatch) -> None:
    w, metrics = _weights(trajectory, "token")
    # per token d = [0, 1 | 2 | 0, 0, 0 | 0.25, 0.25], h = [1, 2 | 0.5 | 2, 2, 2 | 1, 1]
    # d~ = d / 2, h~ = (h - 0.5) / 1.5 over the trajectory's eight tokens
    expected = [
        [soft_or(0.0, 0.5 / 1.5), soft_or(0.5, 1.0), 0.0],
        [soft_or(1.0, 0.0), 0.0, 0.0],
        [soft_or(0.0, 1.0)] * 3,
        [soft_or(0.125, 0.5 / 1.5)] * 2 + [0.0],
    ]
    assert w.tolist() == [pytest.approx(row) for row in expected]
    assert metrics["tdur/active_ratio"] == pytest.approx(5 / 8)
    assert metrics["tdur/gap_mean"] == pytest.approx((0.5 + 2.0 + 0.0 + 0.25) / 4)  # still per turn


def test_none_is_uniform(trajectory: TokenBatch) -> None:
    w, metrics = _weights(trajectory, "none")
    assert w.tolist() == [[float(m) for m in row] for row in LOSS_MASK]
    assert metrics["tdur/mean_weight"] == 1.0
    assert metrics["tdur/active_ratio"] == 1.0


def test_single_turn_trajectory_uses_half(make_batch: BatchBuilder) -> None:
    # d~ = h~ = 0.5 (range below 1e-8), so w = 1 - 0.5 * 0.5 = 0.75 whatever the values.
    batch = make_batch([[1, 1, 0]], logp_old=[[-0.1, -3.0, 0.0]], logp_teacher=[[-5.0, -0.2, 0.0]])
    w, metrics = _weights(batch)
    assert w.tolist() == [pytest.approx([0.75, 0.75, 0.0])]
    assert metrics["tdur/active_ratio"] == 1.0


def test_min_equals_max_in_one_signal(make_batch: BatchBuilder) -> None:
    # Three turns with equal d (= 1) but h = 1, 2, 3: d~ = 0.5, h~ = 0, 0.5, 1, so w = 0.5 + 0.5 h~.
    batch = make_batch(
        [[1], [1], [1]], logp_old=[[-1.0], [-2.0], [-3.0]], logp_teacher=[[-2.0], [-1.0], [-4.0]], traj_ids=[0, 0, 0]
    )
    w, metrics = _weights(batch)
    assert w.flatten().tolist() == pytest.approx([0.5, 0.75, 1.0])
    assert metrics["tdur/active_ratio"] == pytest.approx(2 / 3)  # 0.5 is not > 0.5


def test_normalisation_is_per_trajectory(make_batch: BatchBuilder) -> None:
    # Trajectory 1 repeats trajectory 0 with every log-prob doubled: d and h double, d~ and h~ do not change.
    doubled = [[2 * v for v in row] for row in LOGP_OLD]
    doubled_teacher = [[2 * v for v in row] for row in LOGP_TEACHER]
    batch = make_batch(
        LOSS_MASK + LOSS_MASK,
        logp_old=LOGP_OLD + doubled,
        logp_teacher=LOGP_TEACHER + doubled_teacher,
        traj_ids=[0, 0, 0, 0, 1, 1, 1, 1],
        group_ids=[0, 0],
    )
    w, _ = _weights(batch)
    assert w.tolist() == [pytest.approx(row) for row in _per_token(TURN_W) * 2]


def test_full_context_row_matches_turn_rows(make_batch: BatchBuilder) -> None:
    # The same four turns in one row, separated by unsupervised observation tokens (turn id -1, garbage log-probs).
    loss_mask = [[1, 1, 0, 1, 0, 1, 1, 1, 0, 1, 1]]
    obs = 9.0
    logp_old = [[-1.0, -2.0, obs, -0.5, obs, -2.0, -2.0, -2.0, obs, -1.0, -1.0]]
    logp_teacher = [[-1.0, -1.0, obs, -2.5, obs, -2.0, -2.0, -2.0, obs, -1.25, -0.75]]
    turn_ids = [[10, 10, -1, 11, -1, 12, 12, 12, -1, 13, 13]]
    batch = make_batch(loss_mask, logp_old=logp_old, logp_teacher=logp_teacher, turn_ids=turn_ids)
    w, _ = _weights(batch)
    expected = [TURN_W[0]] * 2 + [0.0, TURN_W[1], 0.0] + [TURN_W[2]] * 3 + [0.0] + [TURN_W[3]] * 2
    assert w.tolist() == [pytest.approx(expected)]


def test_unknown_unit_is_refused(trajectory: TokenBatch) -> None:
    with pytest.raises(TrainerError) as info:
        _weights(trajectory, "sentence")
    assert info.value.reason == "UNKNOWN_TDUR_UNIT"


def test_no_supervised_token(make_batch: BatchBuilder) -> None:
    batch = make_batch([[0, 0]], logp_old=[[0.0, 0.0]], logp_teacher=[[0.0, 0.0]], turn_ids=[[-1, -1]])
    w, metrics = _weights(batch)
    assert w.tolist() == [[0.0, 0.0]]
    assert metrics["tdur/mean_weight"] == 0.0


# Three float32 log-probs whose float32 sums depend on the order they are added in.
PERMUTED_OLD = [-2.527949810028076, -0.23507559299468994, -1.1266734600067139]
PERMUTED_TEACHER = [-1.5676839351654053, -1.7188515663146973, -1.8557614088058472]


@pytest.mark.parametrize("context", ["history", "full"])
def test_permuted_turns_tie_exactly_in_float32(make_batch: BatchBuilder, context: str) -> None:
    # One trajectory, two turns holding the same three tokens in another order: d and h tie, so both
    # normalise to 0.5 and w = 1 - 0.5 * 0.5 = 0.75 on every token (float32 rounding once gave [0.5, 1.0]).
    order = [2, 0, 1]
    old = PERMUTED_OLD + [PERMUTED_OLD[i] for i in order]
    teacher = PERMUTED_TEACHER + [PERMUTED_TEACHER[i] for i in order]
    if context == "full":
        batch = make_batch([[1] * 6], logp_old=[old], logp_teacher=[teacher], turn_ids=[[0, 0, 0, 1, 1, 1]])
    else:
        batch = make_batch(
            [[1, 1, 1], [1, 1, 1]],
            logp_old=[old[:3], old[3:]],
            logp_teacher=[teacher[:3], teacher[3:]],
            traj_ids=[0, 0],
        )
    assert batch.logp_old.dtype == torch.float32
    w, metrics = _weights(batch)
    assert w[batch.loss_mask].tolist() == [0.75] * 6
    assert metrics["tdur/active_ratio"] == 1.0
