"""Which states of an episode a tree rollout forks at (`tree.select`), one score per turn it played.

    uniform       score_m ~ U(0, 1)
    entropy       score_m = mean_t U_t over turn m's response tokens (U_t: top-k entropy, renormalised)
    disagreement  score_m = mean_t (log pi_old(y_t) - log pi_T(y_t))      (needs the teacher's scores)

A fork at turn m restores the state turn m started from; the `forks` best-scoring turns among those the
episode played itself (after its own fork turn) are chosen, ties broken at random.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

import numpy as np

from trainer.branching.select import topk_entropy
from trainer.rollout.types import Trajectory, Turn

SelectRule = Literal["uniform", "entropy", "disagreement"]
SELECT_RULES: tuple[str, ...] = ("uniform", "entropy", "disagreement")


@dataclass(frozen=True)
class TreeConfig:
    """Tree rollouts from forks of the student's episodes (defaults and why: docs/tree-rollouts.md)."""

    forks: int = 2
    """N: states forked per expanded episode and level."""
    continuations: int = 2
    """M: new continuations played from each forked state (its siblings: these plus the episode's own)."""
    depth: int = 1
    """L: levels of forking; the continuations of level l are expanded at level l + 1."""
    select: SelectRule = "entropy"
    """How fork states are chosen: `uniform`, `entropy` (student top-k entropy), `disagreement` (teacher)."""
    top_logprobs: int = 20
    """Student top-k log-probs the entropy is computed from (`rollout.top_logprobs` must record as many)."""

    def __post_init__(self) -> None:
        if self.forks < 1 or self.continuations < 1 or self.depth < 1:
            raise ValueError(
                f"tree.forks, tree.continuations and tree.depth must be >= 1, got {self.forks}, "
                f"{self.continuations}, {self.depth}"
            )
        if self.select not in SELECT_RULES:
            raise ValueError(f"tree.select must be one of {', '.join(SELECT_RULES)}, got {self.select!r}")
        if self.top_logprobs < 1:
            raise ValueError(f"tree.top_logprobs must be >= 1, got {self.top_logprobs}")

    def branches_per_episode(self) -> int:
        """Continuations a root episode grows at most: sum over levels l = 1..L of (N M)^l."""
        return sum((self.forks * self.continuations) ** level for level in range(1, self.depth + 1))


def turn_score(turn: Turn, rule: SelectRule, rng: random.Random) -> float:
    """Turn `turn`'s fork score under `rule` (higher forks first)."""
    if rule == "uniform" or not turn.response_ids:
        return rng.random()
    if rule == "entropy":
        if turn.top_logprobs is None:
            raise ValueError("tree.select: entropy needs rollout.top_logprobs >= 1")
        return float(np.mean(topk_entropy([[lp for _, lp in top] for top in turn.top_logprobs])))
    if turn.logp_teacher is None:
        raise ValueError("tree.select: disagreement needs the teacher's scores of the episode")
    return float(np.mean(np.asarray(turn.logp_old) - np.asarray(turn.logp_teacher)))


def first_own_turn(trajectory: Trajectory) -> int:
    """The first turn the episode played itself: its fork turn (0 for a root episode)."""
    return trajectory.fork[0] if trajectory.fork is not None else 0


def select_fork_turns(trajectory: Trajectory, config: TreeConfig, rng: random.Random) -> list[int]:
    """Up to `config.forks` turns of `trajectory` to fork at, ascending; a continuation never forks again at
    its own first turn (that state is its parent's fork)."""
    if trajectory.dropped:
        return []
    start = first_own_turn(trajectory) + (trajectory.fork is not None)
    candidates = [m for m in range(start, len(trajectory.turns)) if not trajectory.turns[m].teacher]
    scored = [(turn_score(trajectory.turns[m], config.select, rng), rng.random(), m) for m in candidates]
    return sorted(m for _, _, m in sorted(scored, reverse=True)[: config.forks])
