"""The `branch` strategy's driver step over a worker group: mains, teacher scores, forks, branches, diagnostics.

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
from trainer.branching.strategy import BranchStrategy
from trainer.rollout import RolloutStats, SamplingSettings, Trajectory
from trainer.runs import trajectory_metrics
from trainer.workers import RolloutWorker, merge_rollouts, split_tasks

if TYPE_CHECKING:
    from trainer.config import TrainerConfig
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
    branches, branch_stats = play_branches(workers, mains, dataclasses.replace(sampling, seed=seed), select_seed)
    scored_branches = 0
    if branches:
        branches, scored_branches = workers.score(branches)
    metrics = {f"main/{k.removeprefix('rollout/')}": v for k, v in stats.as_metrics().items()}
    metrics.update({f"branch/rollout/{k.removeprefix('rollout/')}": v for k, v in branch_stats.as_metrics().items()})
    metrics["teacher/tokens_scored"] = float(scored + scored_branches)
    metrics.update(branch_metrics(mains, branches))
    return mains, branches, metrics


def play_branches(
    workers: WorkerGroup, mains: list[Trajectory], sampling: SamplingSettings, select_seed: int
) -> tuple[list[Trajectory], RolloutStats]:
    """BranchOPD continuations of `mains` (one per task, in `rollout`'s order): each rollout worker
    branches the mains it played, since its server signed their snapshots; groups are kept."""
    chunks = split_tasks(mains, len(workers.rollout_workers))
    pending = [
        workers.executor.submit(worker, RolloutWorker.play, BranchStrategy.branch, chunk, sampling, select_seed + i)
        for i, (worker, chunk) in enumerate(zip(workers.rollout_workers, chunks, strict=True))
        if chunk
    ]
    return merge_rollouts(workers.executor.gather(pending), renumber=False)


def branch_step(
    config: TrainerConfig,
    workers: WorkerGroup,
    tasks: Sequence[tuple[str, int]],
    sampling: SamplingSettings,
    step: int,
) -> tuple[list[Trajectory], dict[str, float]]:
    """The driver step of `rollout.strategy: branch`: mains and their branches, both trained on."""
    mains, branches, metrics = branch_rollout(workers, tasks, sampling, config.seed * 7919 + step)
    metrics.update(trajectory_metrics(mains))
    return mains + branches, metrics
