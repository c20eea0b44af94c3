"""One BranchOPD rollout step over a worker group: mains, teacher scores, forks, branches, diagnostics.

mains     = one trajectory per task (top-k log-probs and snapshots recorded)
teacher   scores the mains            (the fork disagreement D_t needs logp_T)
branches  = k continuations from each selected fork, every branch of every task in lock-step
teacher   scores the branches' trained tokens
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from trainer.branching.diagnostics import branch_metrics
from trainer.rollout import SamplingSettings, Trajectory

if TYPE_CHECKING:
    from trainer.workers import WorkerGroup

BRANCH_SEED_OFFSET = 500_009
"""Added to the step's sampling seed for the branch turns, so branches do not replay the mains' draws."""


def branch_rollout(
    workers: WorkerGroup, tasks: Sequence[tuple[str, int]], sampling: SamplingSettings, select_seed: int
) -> tuple[list[Trajectory], list[Trajectory], dict[str, float]]:
    """(mains, branches, metrics) of one step."""
    mains, stats = workers.rollout(tasks, sampling, 1)
    mains, scored = workers.score(mains)
    seed = None if sampling.seed is None else sampling.seed + BRANCH_SEED_OFFSET
    branches, branch_stats = workers.branch(mains, dataclasses.replace(sampling, seed=seed), select_seed)
    scored_branches = 0
    if branches:
        branches, scored_branches = workers.score(branches)
    metrics = {f"main/{k.removeprefix('rollout/')}": v for k, v in stats.as_metrics().items()}
    metrics.update({f"branch/rollout/{k.removeprefix('rollout/')}": v for k, v in branch_stats.as_metrics().items()})
    metrics["teacher/tokens_scored"] = float(scored + scored_branches)
    metrics.update(branch_metrics(mains, branches))
    return mains, branches, metrics
