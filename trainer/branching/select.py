"""BranchOPD fork selection (paper 002 section 3, Appendix D; OBJECTIVES.md section 6) as pure functions.

Every function takes plain arrays over the *student tokens of the main trajectory tau_0*, in order
(turn after turn, observations skipped), so they can be tested on hand-built numbers:

    U_t = entropy of the student's top-20 log-probs, renormalised over those 20
    D_t = sum_{j in [t, t+W)} (-delta_j),   delta_j = max(logp_T, floor) - max(logp_old, floor)
    v_t = alpha * R(U_t) + (1 - alpha) * R(D_t)          R: rank normalisation to [0, 1] within tau_0

Agent tasks: a position is eligible when it is among the first `turn_open_tokens` tokens of its
turn and U_t >= `min_entropy`; a turn's score is the mean of its top `eta` share of eligible
scores; up to B turns are picked by that score, separated by at least `min_turn_gap` unpicked
turns, and each fork is drawn uniformly among the `candidates_per_turn` best eligible positions of
its turn. Mathematics (one turn): eligible when U_t >= `min_entropy`, the top-B positions by v_t.
The random-position control draws the same number of forks uniformly among eligible positions.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from trainer.errors import TrainerError

SelectionMode = Literal["agent", "math"]
Placement = Literal["scored", "random"]


@dataclass(frozen=True)
class ForkConfig:
    """Fork selection and branching settings (paper defaults; every one is configurable)."""

    num_forks: int = 3
    """B: most forks per main trajectory."""
    continuations: int = 2
    """k: continuations sampled from each fork."""
    alpha: float = 0.5
    """Weight of the entropy rank against the disagreement rank in v_t."""
    window: int = 128
    """Forward window (student tokens) of the disagreement score D_t."""
    top_logprobs: int = 20
    """Student top-k log-probs the entropy U_t is computed from (the rollout records this many)."""
    eta: float = 0.2
    """Share of a turn's eligible scores averaged into its turn score."""
    min_turn_gap: int = 1
    """Unpicked turns required between two picked turns (0 allows adjacent turns)."""
    candidates_per_turn: int = 3
    """The fork is drawn uniformly among this many best eligible positions of a picked turn."""
    turn_open_tokens: int = 16
    """Agent tasks: only the first N tokens of each turn are eligible (no initial-token skip)."""
    min_entropy: float = 0.0
    """Eligible positions need U_t >= this (paper: 0 for agent tasks, 0.5 for mathematics)."""
    mode: SelectionMode = "agent"
    """`agent`: turn-level selection; `math`: single-turn top-B positions."""
    placement: Placement = "scored"
    """`scored`: the rule above; `random`: the control with uniformly random eligible positions."""
    force_token: str | None = None
    """Control: force this text's first token (paper: "!") as every branch's first token."""
    logp_floor: float = -10.0
    """Both log-probs are floored here before delta_j (as in the OPD signal)."""

    def __post_init__(self) -> None:
        checks = {
            "num_forks": self.num_forks >= 1,
            "continuations": self.continuations >= 1,
            "alpha": 0.0 <= self.alpha <= 1.0,
            "window": self.window >= 1,
            "top_logprobs": self.top_logprobs >= 1,
            "eta": 0.0 < self.eta <= 1.0,
            "min_turn_gap": self.min_turn_gap >= 0,
            "candidates_per_turn": self.candidates_per_turn >= 1,
            "turn_open_tokens": self.turn_open_tokens >= 1,
            "mode": self.mode in ("agent", "math"),
            "placement": self.placement in ("scored", "random"),
            "logp_floor": self.logp_floor < 0,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise TrainerError(
                f"invalid branch setting(s) {', '.join(bad)} in {self!r}", reason="INVALID_BRANCH_CONFIG"
            )


@dataclass(frozen=True)
class ForkPoint:
    """One selected fork: a student token position of the main trajectory."""

    turn: int
    """Index of the turn (among the main trajectory's turns)."""
    offset: int
    """Position of the fork token inside that turn's response; the branch keeps tokens [0, offset)."""
    score: float
    """v_t at the fork (NaN for the random control)."""


def topk_entropy(top_logprobs: Sequence[Sequence[float]]) -> np.ndarray:
    """U_t: entropy of each position's top-k distribution, renormalised over those k (nats, >= 0)."""
    out = np.zeros(len(top_logprobs), dtype=np.float64)
    for i, row in enumerate(top_logprobs):
        logp = np.asarray(row, dtype=np.float64)
        if logp.size == 0:
            continue
        logp = logp - np.logaddexp.reduce(logp)
        out[i] = max(0.0, float(-(np.exp(logp) * logp).sum()))
    return out


def forward_disagreement(
    logp_old: Sequence[float] | np.ndarray,
    logp_teacher: Sequence[float] | np.ndarray,
    window: int = 128,
    logp_floor: float = -10.0,
) -> np.ndarray:
    """D_t = sum over j in [t, t + window) of -delta_j, with delta_j the floored teacher-minus-student log-ratio."""
    old = np.maximum(np.asarray(logp_old, dtype=np.float64), logp_floor)
    teacher = np.maximum(np.asarray(logp_teacher, dtype=np.float64), logp_floor)
    neg_delta = old - teacher
    cumulative = np.concatenate([[0.0], np.cumsum(neg_delta)])
    n = neg_delta.size
    ends = np.minimum(np.arange(n) + window, n)
    return np.asarray(cumulative[ends] - cumulative[:n], dtype=np.float64)


def rank_normalise(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """R(x): ranks scaled to [0, 1] (smallest 0, largest 1), ties share their mean rank; one value -> 0.5."""
    x = np.asarray(values, dtype=np.float64)
    n = x.size
    if n == 0:
        return x.copy()
    if n == 1:
        return np.full(1, 0.5)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(n, dtype=np.float64)
    ranks[order] = np.arange(n, dtype=np.float64)
    for value in np.unique(x):
        tied = x == value
        ranks[tied] = ranks[tied].mean()
    return np.asarray(ranks / (n - 1), dtype=np.float64)


def position_scores(entropy: np.ndarray, disagreement: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    """v_t = alpha * R(U) + (1 - alpha) * R(D)."""
    return alpha * rank_normalise(entropy) + (1.0 - alpha) * rank_normalise(disagreement)


def turn_score(scores: np.ndarray, eta: float = 0.2) -> float:
    """Mean of the top `eta` share (at least one) of a turn's eligible scores; -inf when it has none."""
    if scores.size == 0:
        return -math.inf
    keep = max(1, math.ceil(eta * scores.size))
    return float(np.sort(scores)[::-1][:keep].mean())


def eligible_agent(entropy: np.ndarray, offsets: np.ndarray, config: ForkConfig) -> np.ndarray:
    """Agent eligibility: among the first `turn_open_tokens` tokens of the turn and U_t >= min_entropy."""
    return (offsets < config.turn_open_tokens) & (entropy >= config.min_entropy)


def pick_turns(turn_scores: Sequence[float], limit: int, min_gap: int) -> list[int]:
    """Greedy: best turns first, skipping any within `min_gap` turns of one already picked; sorted result."""
    order = sorted((m for m, s in enumerate(turn_scores) if s > -math.inf), key=lambda m: (-turn_scores[m], m))
    picked: list[int] = []
    for m in order:
        if len(picked) == limit:
            break
        if all(abs(m - p) > min_gap for p in picked):
            picked.append(m)
    return sorted(picked)


def select_agent_forks(
    scores: np.ndarray,
    entropy: np.ndarray,
    turns: np.ndarray,
    offsets: np.ndarray,
    config: ForkConfig,
    rng: random.Random,
) -> list[ForkPoint]:
    """Agent-task forks from per-position arrays (`turns[t]`, `offsets[t]`: turn index and offset in it)."""
    eligible = eligible_agent(entropy, offsets, config)
    num_turns = int(turns.max()) + 1 if turns.size else 0
    per_turn = [np.flatnonzero(eligible & (turns == m)) for m in range(num_turns)]
    if config.placement == "random":
        candidates = [m for m in range(num_turns) if per_turn[m].size]
        rng.shuffle(candidates)
        picked: list[int] = []
        for m in candidates:
            if len(picked) < config.num_forks and all(abs(m - p) > config.min_turn_gap for p in picked):
                picked.append(m)
        positions = [int(rng.choice(list(per_turn[m]))) for m in sorted(picked)]
        return [ForkPoint(turn=int(turns[t]), offset=int(offsets[t]), score=math.nan) for t in positions]
    turn_scores = [turn_score(scores[idx], config.eta) for idx in per_turn]
    forks = []
    for m in pick_turns(turn_scores, config.num_forks, config.min_turn_gap):
        idx = per_turn[m]
        best = idx[np.lexsort((idx, -scores[idx]))][: config.candidates_per_turn]
        t = int(rng.choice(list(best)))
        forks.append(ForkPoint(turn=m, offset=int(offsets[t]), score=float(scores[t])))
    return forks


def select_math_forks(scores: np.ndarray, entropy: np.ndarray, config: ForkConfig, rng: random.Random) -> list[int]:
    """Single-turn forks: flat indices of the top-B eligible positions (U_t >= min_entropy) by v_t, ascending."""
    idx = np.flatnonzero(entropy >= config.min_entropy)
    if config.placement == "random":
        return sorted(int(t) for t in rng.sample(list(idx), min(config.num_forks, idx.size)))
    return sorted(int(t) for t in idx[np.lexsort((idx, -scores[idx]))][: config.num_forks])


@dataclass(frozen=True)
class MainTokens:
    """The main trajectory's student tokens as flat arrays (see `flatten_turns`)."""

    turns: np.ndarray
    offsets: np.ndarray
    logp_old: np.ndarray
    logp_teacher: np.ndarray
    entropy: np.ndarray


def flatten_turns(
    turns: Sequence[tuple[Sequence[float], Sequence[float], Sequence[Sequence[float]]]],
) -> MainTokens:
    """Flatten per-turn (logp_old, logp_teacher, top-k log-prob rows) into position arrays."""
    turn_idx, offsets, old, teacher, entropy = [], [], [], [], []
    for m, (logp_old, logp_teacher, top) in enumerate(turns):
        if not len(logp_old) == len(logp_teacher) == len(top):
            raise ValueError(f"turn {m}: logp_old, logp_teacher and top-k rows differ in length")
        turn_idx += [m] * len(logp_old)
        offsets += list(range(len(logp_old)))
        old += list(logp_old)
        teacher += list(logp_teacher)
        entropy += list(topk_entropy(top))
    return MainTokens(
        turns=np.asarray(turn_idx, dtype=np.int64),
        offsets=np.asarray(offsets, dtype=np.int64),
        logp_old=np.asarray(old, dtype=np.float64),
        logp_teacher=np.asarray(teacher, dtype=np.float64),
        entropy=np.asarray(entropy, dtype=np.float64),
    )


def select_forks(main: MainTokens, config: ForkConfig, rng: random.Random) -> list[ForkPoint]:
    """Forks of one main trajectory under `config` (agent or math rule, scored or random placement)."""
    if main.turns.size == 0:
        return []
    disagreement = forward_disagreement(main.logp_old, main.logp_teacher, config.window, config.logp_floor)
    scores = position_scores(main.entropy, disagreement, config.alpha)
    if config.mode == "math":
        chosen = select_math_forks(scores, main.entropy, config, rng)
        scored = config.placement == "scored"
        return [
            ForkPoint(int(main.turns[t]), int(main.offsets[t]), float(scores[t]) if scored else math.nan)
            for t in chosen
        ]
    return select_agent_forks(scores, main.entropy, main.turns, main.offsets, config, rng)
