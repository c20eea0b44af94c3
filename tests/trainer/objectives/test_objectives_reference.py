"""The objectives against a plain numpy re-implementation of OBJECTIVES.md sections 1-4 on random batches.

The reference below is written from the equations, one trajectory / turn / token at a time with Python
loops in float64; it shares no code with `trainer.objectives`. Each random batch mixes task groups of
different sizes, trajectories of 1-5 turns, `history` rows (one per turn) or `full` rows (one per
trajectory), prompt and observation positions that are never supervised, log-probs below the OPD
floor, and turns that repeat an earlier turn's tokens in another order (exact T-DUR ties).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from trainer.objectives import TokenBatch, aggregate_loss, loss_weights, ppo_actor_loss, reduction_unit_ids
from trainer.objectives.registry import build_config, get_objective

BATCHES = 200
TOL = 1e-5


# --------------------------------------------------------------------------- the random batches


@dataclass
class RefTurn:
    logp_old: np.ndarray
    logp_teacher: np.ndarray


@dataclass
class RefTrajectory:
    group: int
    reward: float
    turns: list[RefTurn] = field(default_factory=list)


def _f32(values: np.ndarray) -> np.ndarray:
    """Round to float32 (the batch dtype) and back, so both sides read the same numbers."""
    return values.astype(np.float32).astype(np.float64)


def random_trajectories(rng: np.random.Generator) -> list[RefTrajectory]:
    trajectories = []
    for group in range(int(rng.integers(1, 4))):
        for _ in range(int(rng.integers(1, 5))):
            reward = float(rng.choice([0.0, 1.0])) if rng.random() < 0.7 else float(rng.normal())
            trajectory = RefTrajectory(group=group, reward=reward)
            for _ in range(int(rng.integers(1, 6))):
                if trajectory.turns and rng.random() < 0.2:  # an earlier turn's tokens, permuted
                    source = trajectory.turns[int(rng.integers(len(trajectory.turns)))]
                    order = rng.permutation(len(source.logp_old))
                    trajectory.turns.append(RefTurn(source.logp_old[order], source.logp_teacher[order]))
                    continue
                n = int(rng.integers(1, 6))
                scale = 14.0 if rng.random() < 0.2 else 3.0  # sometimes below the -10 floor
                trajectory.turns.append(RefTurn(_f32(-rng.random(n) * scale), _f32(-rng.random(n) * scale)))
            trajectories.append(trajectory)
    return trajectories


def to_token_batch(trajectories: list[RefTrajectory], context: str, rng: np.random.Generator) -> TokenBatch:
    """Rows as SyncGroups lays them out: prompt positions, then the response(s), padding at the end."""
    rows: list[list[tuple[int, int, float, float]]] = []  # per position: (supervised, turn id, old, teacher)
    traj_of_row: list[int] = []
    turn_id = 0
    for index, trajectory in enumerate(trajectories):
        row: list[tuple[int, int, float, float]] = []
        for turn in trajectory.turns:
            row += [(0, -1, 0.0, 0.0)] * int(rng.integers(1, 4))  # prompt / observation
            row += [(1, turn_id, o, t) for o, t in zip(turn.logp_old, turn.logp_teacher, strict=True)]
            turn_id += 1
            if context == "history":
                rows.append(row)
                traj_of_row.append(index)
                row = []
        if context == "full":
            rows.append(row)
            traj_of_row.append(index)
    width = max(len(r) for r in rows) + 1
    pad = [(0, -1, 0.0, 0.0)]
    grid = [r + pad * (width - len(r)) for r in rows]
    lengths = torch.tensor([len(r) for r in rows])
    return TokenBatch(
        input_ids=torch.randint(0, 50, (len(rows), width), generator=torch.Generator().manual_seed(0)),
        attention_mask=torch.arange(width)[None, :] < lengths[:, None],
        loss_mask=torch.tensor([[p[0] == 1 for p in r] for r in grid]),
        logp_old=torch.tensor([[p[2] for p in r] for r in grid], dtype=torch.float32),
        logp_teacher=torch.tensor([[p[3] for p in r] for r in grid], dtype=torch.float32),
        turn_ids=torch.tensor([[p[1] for p in r] for r in grid]),
        traj_ids=torch.tensor(traj_of_row),
        rewards=torch.tensor([t.reward for t in trajectories], dtype=torch.float32),
        group_ids=torch.tensor([t.group for t in trajectories]),
    )


def supervised(values: torch.Tensor, batch: TokenBatch) -> np.ndarray:
    """The supervised entries of an (N, S) tensor in row-major order: the reference's token order."""
    return values[batch.loss_mask].detach().double().numpy()


# --------------------------------------------------------------------------- the reference (OBJECTIVES.md)


def ref_grpo(trajectories: list[RefTrajectory], epsilon: float = 1e-6) -> list[float]:
    """Section 2: A_i = (r_i - mean) / (std_{n-1} + eps); a group of one gets 0."""
    out = []
    for trajectory in trajectories:
        group = [t.reward for t in trajectories if t.group == trajectory.group]
        mean = sum(group) / len(group)
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / (len(group) - 1)) if len(group) > 1 else 0.0
        out.append((trajectory.reward - mean) / (std + epsilon))
    return out


def ref_opd_token(old: float, teacher: float) -> float:
    """Section 3: clamp(max(logp_T, -10) - max(logp_old, -10), -10, 10)."""
    return min(max(max(teacher, -10.0) - max(old, -10.0), -10.0), 10.0)


def _normalise(values: list[float], eps: float = 1e-8) -> list[float]:
    lo, hi = min(values), max(values)
    return [0.5] * len(values) if hi - lo < eps else [(v - lo) / (hi - lo) for v in values]


def ref_tdur(trajectory: RefTrajectory, unit: str) -> list[float]:
    """Section 4: one weight per supervised token of the trajectory, in turn then token order."""
    if unit == "none":
        return [1.0] * sum(len(turn.logp_old) for turn in trajectory.turns)
    if unit == "turn":
        units = [(list(turn.logp_old), list(turn.logp_teacher)) for turn in trajectory.turns]
    else:
        units = [([o], [t]) for turn in trajectory.turns for o, t in zip(turn.logp_old, turn.logp_teacher, strict=True)]
    d = [sum(abs(o - t) for o, t in zip(old, tea, strict=True)) / len(old) for old, tea in units]
    h = [sum(-o for o in old) / len(old) for old, _ in units]
    weights = [1 - (1 - dn) * (1 - hn) for dn, hn in zip(_normalise(d), _normalise(h), strict=True)]
    return [w for (old, _), w in zip(units, weights, strict=True) for _ in old]


def ref_coefficients(step: int, anneal: bool) -> tuple[float, float]:
    """Section 4 schedule with the defaults: kappa 1.0 -> 0.1, rho 0.1 -> 1.0 over T = 100 steps."""
    if not anneal:
        return 1.0, 0.1
    p = min(step / 100, 1.0)
    return max(0.1, 1.0 - 0.9 * p), 0.1 + 0.9 * p


def ref_token_order(trajectories: list[RefTrajectory]) -> list[tuple[int, int, float, float]]:
    """(trajectory, turn, logp_old, logp_teacher) of every supervised token, as `supervised` orders them."""
    out = []
    turn_id = 0
    for index, trajectory in enumerate(trajectories):
        for turn in trajectory.turns:
            out += [(index, turn_id, o, t) for o, t in zip(turn.logp_old, turn.logp_teacher, strict=True)]
            turn_id += 1
    return out


def ref_advantages(trajectories: list[RefTrajectory], name: str, params: dict, step: int) -> np.ndarray:
    tokens = ref_token_order(trajectories)
    if name == "grpo":
        grpo = ref_grpo(trajectories)
        return np.array([grpo[i] for i, _, _, _ in tokens])
    if name == "opd":
        return np.array([ref_opd_token(o, t) for _, _, o, t in tokens])
    kappa, rho = ref_coefficients(step, params.get("anneal", True))
    grpo = ref_grpo(trajectories)
    weights = [w for trajectory in trajectories for w in ref_tdur(trajectory, params.get("tdur", "turn"))]
    return np.array(
        [kappa * ref_opd_token(o, t) * w + rho * grpo[i] for (i, _, o, t), w in zip(tokens, weights, strict=True)]
    )


def ref_loss(
    trajectories: list[RefTrajectory], logp: np.ndarray, adv: np.ndarray, reduction: str, clip_eps: float = 0.2
) -> float:
    """Section 1: PPO clipped surrogate, reduced over tokens, trajectories or turns."""
    tokens = ref_token_order(trajectories)
    per_token = []
    for (_, _, old, _), lp, a in zip(tokens, logp, adv, strict=True):
        ratio = math.exp(lp - old)
        per_token.append(-min(ratio * a, min(max(ratio, 1 - clip_eps), 1 + clip_eps) * a))
    if reduction == "token-mean":
        return sum(per_token) / len(per_token)
    key = 1 if reduction == "turn-mean-token-mean" else 0
    units: dict[int, list[float]] = {}
    for token, value in zip(tokens, per_token, strict=True):
        units.setdefault(token[key], []).append(value)
    if reduction == "seq-mean-token-sum":
        return sum(sum(v) for v in units.values()) / len(units)
    return sum(sum(v) / len(v) for v in units.values()) / len(units)


# --------------------------------------------------------------------------- the comparison

OBJECTIVES = [
    ("grpo", {}),
    ("opd", {}),
    ("atod", {"tdur": "turn"}),
    ("atod", {"tdur": "token"}),
    ("atod", {"tdur": "none"}),
    ("atod", {"tdur": "turn", "anneal": False}),
]
REDUCTIONS = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "turn-mean-token-mean"]


@pytest.mark.parametrize("context", ["history", "full"])
def test_objectives_and_losses_match_the_reference(context: str) -> None:
    rng = np.random.default_rng(8 if context == "history" else 9)
    checks = 0
    for index in range(BATCHES):
        trajectories = random_trajectories(rng)
        batch = to_token_batch(trajectories, context, rng)
        name, params = OBJECTIVES[index % len(OBJECTIVES)]
        step = int(rng.integers(0, 150))
        advantages, _ = get_objective(name).compute(batch, build_config(name, params), step=step)
        expected = ref_advantages(trajectories, name, params, step)
        np.testing.assert_allclose(supervised(advantages, batch), expected, rtol=TOL, atol=TOL, err_msg=name)
        assert advantages[~batch.loss_mask].eq(0).all()

        logp_np = _f32(supervised(batch.logp_old, batch) + rng.normal(0, 0.3, expected.shape))
        logp = torch.zeros_like(batch.logp_old).masked_scatter(batch.loss_mask, torch.tensor(logp_np).float())
        reduction = REDUCTIONS[index % len(REDUCTIONS)]
        units = reduction_unit_ids(reduction, batch.traj_ids, batch.turn_ids)
        leaf = logp.clone().requires_grad_(True)
        loss, _ = ppo_actor_loss(leaf, batch.logp_old, advantages, batch.loss_mask, reduction=reduction, unit_ids=units)
        want = ref_loss(trajectories, logp_np, supervised(advantages, batch), reduction)
        assert float(loss.detach()) == pytest.approx(want, rel=TOL, abs=TOL), reduction

        # Micro-batches of random row slices with the whole batch's weights give the same gradient.
        loss.backward()
        assert leaf.grad is not None
        weights = loss_weights(batch.loss_mask, reduction=reduction, unit_ids=units)  # type: ignore[arg-type]
        micro = logp.clone().requires_grad_(True)
        cuts = sorted({0, batch.num_rows, *rng.integers(0, batch.num_rows + 1, 2).tolist()})
        for lo, hi in itertools.pairwise(cuts):
            part, _ = ppo_actor_loss(
                micro[lo:hi], batch.logp_old[lo:hi], advantages[lo:hi], batch.loss_mask[lo:hi], weights=weights[lo:hi]
            )
            part.backward()
        assert micro.grad is not None
        torch.testing.assert_close(micro.grad, leaf.grad, rtol=1e-5, atol=1e-7)
        assert float(aggregate_loss(logp, batch.loss_mask, weights=weights)) == pytest.approx(
            float(aggregate_loss(logp, batch.loss_mask, reduction=reduction, unit_ids=units)), rel=1e-6
        )
        checks += 1
    assert checks == BATCHES
