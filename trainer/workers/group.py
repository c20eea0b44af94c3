"""`WorkerGroup`: the single controller the driver talks to (verl's model), over any `Executor`.

It owns the worker handles (rollout workers, the teacher when the objective needs one, the learner)
and turns each driver request into method calls on them: split the tasks over the rollout workers,
score with the teacher, update on the learner, push the learner's weights to the rollout workers.
Where the workers run (this process, Ray actors) is the executor's business only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainer.config import TrainerConfig
from trainer.objectives.batch import TokenBatch
from trainer.objectives.registry import get_objective
from trainer.rollout import RolloutStats, SamplingSettings, Trajectory
from trainer.workers.executor import Executor, make_executor
from trainer.workers.learner import LearnerWorker
from trainer.workers.rollout import RolloutWorker
from trainer.workers.teacher import TeacherWorker


class WorkerGroup:
    """Rollout workers (`ray.num_rollout_workers` per target, at least one), teacher, learner."""

    def __init__(
        self,
        config: TrainerConfig,
        targets: Sequence[str],
        executor: Executor | None = None,
        resume_from: str | None = None,
    ) -> None:
        self.config = config
        self.executor = executor or make_executor(config)
        per_target = max(1, config.ray.num_rollout_workers // max(len(targets), 1))
        spawn = self.executor.spawn
        self.rollout_workers: list[Any] = [spawn(RolloutWorker, config, t) for t in targets for _ in range(per_target)]
        needs_teacher = get_objective(config.objective.name).needs_teacher
        self.teacher: Any = spawn(TeacherWorker, config) if needs_teacher else None
        self.learner: Any = spawn(LearnerWorker, config, resume_from)
        if resume_from:
            self.sync_weights()

    def rollout(
        self, tasks: Sequence[tuple[str, int]], sampling: SamplingSettings, group_size: int | None = None
    ) -> tuple[list[Trajectory], RolloutStats]:
        """Play `tasks` split over the rollout workers (in parallel under Ray); groups renumbered batch-unique."""
        chunks = split_tasks(tasks, len(self.rollout_workers))
        pending = [
            self.executor.submit(worker, "run", chunk, sampling, group_size)
            for worker, chunk in zip(self.rollout_workers, chunks, strict=True)
            if chunk
        ]
        return merge_rollouts(self.executor.gather(pending))

    def score(self, trajectories: list[Trajectory]) -> tuple[list[Trajectory], int]:
        """Teacher log-probs on every student turn, and the tokens scored."""
        if self.teacher is None:
            raise ValueError("no teacher configured (models.teacher) but the objective asked for teacher scores")
        result: tuple[list[Trajectory], int] = self.executor.call(self.teacher, "score", trajectories)
        return result

    def learn(self, batch: TokenBatch) -> dict[str, float]:
        """One learner update; its metrics."""
        metrics: dict[str, float] = self.executor.call(self.learner, "step", batch)
        return metrics

    def sync_weights(self) -> None:
        """Push the learner's weights to every rollout worker (once through the object store under Ray)."""
        weights = self.executor.submit(self.learner, "weights")
        self.executor.gather([self.executor.submit(w, "update_weights", weights) for w in self.rollout_workers])

    def global_step(self) -> int:
        """The learner's update count."""
        return int(self.executor.call(self.learner, "global_step"))

    def save(self, folder: str) -> str:
        """Checkpoint the learner into `folder`."""
        return str(self.executor.call(self.learner, "save", folder))

    def task_ids(self, split: str, families: Sequence[str] = ()) -> list[str]:
        """Task ids of a split, asked of the first rollout worker's server."""
        ids: list[str] = self.executor.call(self.rollout_workers[0], "task_ids", split, families)
        return ids

    def close(self) -> None:
        """Close the rollout workers, then release every worker."""
        self.executor.gather([self.executor.submit(w, "close") for w in self.rollout_workers])
        self.executor.kill([*self.rollout_workers, self.learner, *([self.teacher] if self.teacher else [])])


def split_tasks(tasks: Sequence[tuple[str, int]], parts: int) -> list[list[tuple[str, int]]]:
    """Contiguous, near-equal chunks (some may be empty)."""
    size, extra = divmod(len(tasks), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (i < extra)
        out.append(list(tasks[start:end]))
        start = end
    return out


def merge_rollouts(results: Sequence[tuple[list[Trajectory], RolloutStats]]) -> tuple[list[Trajectory], RolloutStats]:
    """Concatenate per-worker results, renumbering groups so they stay batch-unique."""
    merged: list[Trajectory] = []
    stats = RolloutStats()
    offset = 0
    for trajectories, part in results:
        for trajectory in trajectories:
            trajectory.group += offset
        offset = max((t.group for t in trajectories), default=offset - 1) + 1
        merged += trajectories
        stats.turns += part.turns
        stats.invalid_turns += part.invalid_turns
        stats.generated_tokens += part.generated_tokens
        stats.retries += part.retries
        stats.dropped.update(part.dropped)
        stats.generate_s += part.generate_s
        stats.step_s += part.step_s
        stats.wall_s = max(stats.wall_s, part.wall_s)
    return merged, stats
