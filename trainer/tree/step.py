"""The `tree` strategy's driver step: root episodes, then `tree.depth` levels of continuations, each level
forking the episodes of the level before on the worker that played them (its server signed their snapshots).

roots     = `rollout.group_size` episodes per task
level l   = M continuations from each of N states of every episode of level l - 1
teacher   scores each episode's own turns once, as soon as it is played, when the objective or
          `tree.select: disagreement` needs it (a continuation's copies of shared turns are never scored)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from trainer.objectives.registry import get_objective
from trainer.rollout import RolloutStats, SamplingSettings, Trajectory
from trainer.rollout.strategies import get_strategy
from trainer.runs import trajectory_metrics
from trainer.tree.diagnostics import STUDENT_TOKENS, tree_metrics
from trainer.tree.select import TreeConfig
from trainer.tree.strategy import TreeStrategy
from trainer.workers import RolloutWorker, merge_rollouts, split_tasks

if TYPE_CHECKING:
    from trainer.config import TrainerConfig
    from trainer.workers import WorkerGroup

LEVEL_SEED_OFFSET = 700_001
"""Added to the step's sampling seed once per level, so continuations do not replay their parents' draws."""


def tree_step(
    config: TrainerConfig,
    workers: WorkerGroup,
    tasks: Sequence[tuple[str, int]],
    sampling: SamplingSettings,
    step: int,
) -> tuple[list[Trajectory], dict[str, float]]:
    """The driver step of `rollout.strategy: tree`: every episode of every tree, all trained on."""
    tree: TreeConfig = get_strategy(config.rollout.strategy).settings_of(config)
    score = get_objective(config.objective.name).needs_teacher or tree.select == "disagreement"
    chunks = split_tasks(tasks, len(workers.rollout_workers))
    busy = [(worker, chunk) for worker, chunk in zip(workers.rollout_workers, chunks, strict=True) if chunk]
    results = workers.executor.gather(
        [workers.executor.submit(w, RolloutWorker.run, chunk, sampling, None) for w, chunk in busy]
    )
    _, root_stats = merge_rollouts(results)  # renumbers the groups batch-unique, in place
    frontier, scored = _scored(workers, [played for played, _ in results], score)
    played = [t for part in frontier for t in part]
    branch_stats = RolloutStats()
    for level in range(1, tree.depth + 1):
        seed = None if sampling.seed is None else sampling.seed + level * LEVEL_SEED_OFFSET
        level_sampling = dataclasses.replace(sampling, seed=seed)
        select_seed = (config.seed * 7919 + step) * 31 + level
        pending = [
            workers.executor.submit(w, RolloutWorker.play, TreeStrategy.expand, part, level_sampling, select_seed + i)
            for i, ((w, _), part) in enumerate(zip(busy, frontier, strict=True))
        ]
        answers = workers.executor.gather(pending)
        for _, stats in answers:
            branch_stats.merge(stats)
        frontier, tokens = _scored(workers, [children for children, _ in answers], score)
        scored += tokens
        played += [t for part in frontier for t in part]
    metrics = {f"root/{k.removeprefix('rollout/')}": v for k, v in root_stats.as_metrics().items()}
    metrics.update({f"tree/rollout/{k.removeprefix('rollout/')}": v for k, v in branch_stats.as_metrics().items()})
    metrics.update(tree_metrics(played, root_stats, branch_stats))
    metrics.update(trajectory_metrics(played))
    if score:
        metrics["teacher/tokens_scored"] = float(scored)
    metrics["rollout/generated_tokens"] = metrics[STUDENT_TOKENS]  # the step's student tokens, as every strategy logs
    return played, metrics


def _scored(workers: WorkerGroup, parts: list[list[Trajectory]], score: bool) -> tuple[list[list[Trajectory]], int]:
    """`parts` (one list per worker) with the teacher's log-probs on their supervised turns when `score`, and the
    tokens the teacher scored."""
    flat = [t for part in parts for t in part]
    if not score or not flat:
        return parts, 0
    scored, tokens = workers.score(flat)
    out, start = [], 0
    for part in parts:
        out.append(scored[start : start + len(part)])
        start += len(part)
    return out, tokens


def budget(tree: TreeConfig, group_size: int) -> int:
    """Episodes per task a step plays at most: G roots, each growing `tree.branches_per_episode()`."""
    return group_size * (1 + tree.branches_per_episode())
