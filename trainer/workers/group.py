"""`WorkerGroup`: the single controller the driver talks to (verl's model), over any `Executor`.

It owns the worker handles (rollout workers, the teacher when the objective needs one, the learner)
and turns each driver request into method calls on them: split the tasks over the rollout workers,
score with the teacher, update on the learner, push the learner's weights to the rollout workers.
Where the workers run (this process, Ray actors) is the executor's business only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import torch

from trainer.config import TrainerConfig
from trainer.objectives.batch import TokenBatch
from trainer.objectives.registry import get_objective
from trainer.rollout import RolloutStats, SamplingSettings, Trajectory
from trainer.workers.executor import Executor, Handle, Pending, make_executor
from trainer.workers.factory import bucket_bytes, sleeps
from trainer.workers.learner import (
    LearnerWorker,
    Rendezvous,
    checkpoint_folder,
    prune_checkpoints,
    rendezvous_address,
)
from trainer.workers.placement import Slot, plan_placement
from trainer.workers.rollout import Played, RolloutWorker
from trainer.workers.teacher import TeacherWorker
from trainer.workers.weight_sync import WeightSync

T = TypeVar("T")
W = TypeVar("W")
R = TypeVar("R")
P = ParamSpec("P")


class _HoldsEngine(Protocol):
    def ready(self) -> bool: ...


E = TypeVar("E", bound=_HoldsEngine)


class WorkerGroup:
    """Rollout workers (`per_target` per target; default `ray.num_rollout_workers` spread over the
    targets, at least one each), teacher, learner; each in its placement slot (`placement.*`)."""

    def __init__(
        self,
        config: TrainerConfig,
        targets: Sequence[str],
        executor: Executor | None = None,
        resume_from: str | None = None,
        per_target: int | None = None,
    ) -> None:
        self.config = config
        self.executor = executor or make_executor(config)
        if per_target is None:
            per_target = config.rollout_workers_per_target(len(targets))
        rollout_targets = [t for t in targets for _ in range(per_target)]
        needs_teacher = get_objective(config.objective.name).needs_teacher
        plan = plan_placement(config.placement, len(rollout_targets), needs_teacher)
        self.executor.reserve(plan.bundles)
        spawn = self._spawn_engine
        self.rollout_workers: list[Handle[RolloutWorker]] = [
            spawn(slot, RolloutWorker, config, t) for t, slot in zip(rollout_targets, plan.rollout, strict=True)
        ]
        self.teacher: Handle[TeacherWorker] | None = (
            spawn(plan.teacher, TeacherWorker, config) if needs_teacher else None
        )
        self.learners: list[Handle[LearnerWorker]] = self._spawn_learners(plan.learner, resume_from)
        self.learner = self.learners[0]
        self.sleep_level = config.placement.sleep_level if sleeps(config) else 0
        """Colocated engines sleep at this level during each learner update (0: never)."""
        self.weight_sync = WeightSync(
            config.weight_sync(),
            self.executor,
            self.learners,
            self.rollout_workers,
            bucket_bytes=bucket_bytes(config.backend),
            engine_world_size=config.backend.tensor_parallel_size,
        )
        self.weight_sync.connect()
        if resume_from:
            self.sync_weights()

    def _spawn_engine(self, slot: Slot | None, cls: type[E], *args: Any) -> Handle[E]:
        """A worker holding a generation engine. vLLM engines start one at a time, before the learners:
        each measures the GPU's free memory while it starts and fails if another process allocates or
        frees meanwhile (GPU-FACTS section 7)."""
        worker = self.executor.spawn(slot, cls, *args)
        if self.config.backend.kind == "vllm":
            self.executor.call(worker, cls.ready)
        return worker

    def _spawn_learners(self, slots: Sequence[Slot | None], resume_from: str | None) -> list[Handle[LearnerWorker]]:
        """One learner per slot; more than one form a process group (FSDP2) met at rank 0's node."""
        if len(slots) == 1:
            return [self.executor.spawn(slots[0], LearnerWorker, self.config, resume_from)]
        probe = self.executor.spawn(slots[0], _AddressProbe)
        address, port = self.executor.call(probe, _AddressProbe.address)
        self.executor.kill([probe])
        return [
            self.executor.spawn(
                slot, LearnerWorker, self.config, resume_from, Rendezvous(rank, len(slots), address, port)
            )
            for rank, slot in enumerate(slots)
        ]

    def _on_learners(self, method: Callable[Concatenate[LearnerWorker, P], R], *args: P.args, **kwargs: P.kwargs) -> R:
        """`method` on every learner rank (they run collectives together); rank 0's result."""
        return self.executor.gather([self.executor.submit(r, method, *args, **kwargs) for r in self.learners])[0]

    def rollout(
        self, tasks: Sequence[tuple[str, int]], sampling: SamplingSettings, group_size: int | None = None
    ) -> tuple[list[Trajectory], RolloutStats]:
        """Play `tasks` split over the rollout workers (in parallel under Ray); groups renumbered batch-unique."""
        return self._split_over_workers(tasks, RolloutWorker.run, sampling, group_size)

    def play_held_out(
        self, tasks: Sequence[tuple[str, int]], sampling: SamplingSettings, samples: int = 1
    ) -> tuple[list[Trajectory], RolloutStats]:
        """`samples` episodes of each task by the policy alone (`RolloutWorker.run_held_out`), split as `rollout`."""
        return self._split_over_workers(tasks, RolloutWorker.run_held_out, sampling, samples)

    def _split_over_workers(
        self, tasks: Sequence[tuple[str, int]], method: Callable[..., Played], *args: Any
    ) -> tuple[list[Trajectory], RolloutStats]:
        chunks = split_tasks(tasks, len(self.rollout_workers))
        pending = [
            self.executor.submit(worker, method, chunk, *args)
            for worker, chunk in zip(self.rollout_workers, chunks, strict=True)
            if chunk
        ]
        return merge_rollouts(self.executor.gather(pending))

    def score(self, trajectories: list[Trajectory]) -> tuple[list[Trajectory], int]:
        """Teacher log-probs on every student turn, and the tokens scored."""
        if self.teacher is None:
            raise ValueError("no teacher configured (models.teacher) but the objective asked for teacher scores")
        return self.executor.call(self.teacher, TeacherWorker.score, trajectories)

    def learn(self, batch: TokenBatch, *, sleep: bool = True) -> dict[str, float]:
        """One learner update; its metrics. Colocated engines sleep through it (`sync_weights` wakes them)
        unless `sleep` is False (asynchronous producers keep generating during updates)."""
        if sleep and self.sleep_level:
            self._on_engines(RolloutWorker.sleep, self.sleep_level)
            if self.teacher is not None:
                self.executor.call(self.teacher, TeacherWorker.sleep)
        return self._on_learners(LearnerWorker.step, batch)

    def audit(self, pool: TokenBatch, selected: list[bool], counted: list[bool]) -> dict[str, float]:
        """The learner's gradient audit of a DivOPD candidate pool (Tables 10 and 13), before the update."""
        return self._on_learners(LearnerWorker.audit, pool, selected, counted)

    def sync_weights(self) -> None:
        """Push the learner's weights to every rollout worker (`backend.weight_sync`, weight_sync.py).
        Sleeping engines wake in verl's order: weights, the push, then the KV cache (and the teacher); before
        the KV cache, the learners hand their freed export copies and cached activations back to the GPU."""
        if self.sleep_level:
            self._on_engines(RolloutWorker.wake_up, ["weights"])
        self.weight_sync.push()
        if self.sleep_level:
            self._on_learners(LearnerWorker.release_memory)
            self._on_engines(RolloutWorker.wake_up, ["kv_cache"])
            if self.teacher is not None:
                self.executor.call(self.teacher, TeacherWorker.wake_up)

    @contextmanager
    def evaluating(self) -> Iterator[None]:
        """Inside the block the rollout workers play the weights held-out evaluations read: with `optim.ema_decay`
        the learner's moving average (pushed as a state dict; the trained weights pushed back after, so training
        stays on-policy), else the current ones as they are."""
        if not self.config.optim.ema_decay:
            yield
            return
        self._on_engines(RolloutWorker.update_weights, self.evaluated_weights().as_argument())
        try:
            yield
        finally:
            self.sync_weights()

    def evaluated_weights(self) -> Pending[dict[str, torch.Tensor]]:
        """The weights held-out evaluations play, as a pending CPU copy (`LearnerWorker.evaluated_weights`)."""
        return self.executor.submit(self.learners[0], LearnerWorker.evaluated_weights)

    def publish_weights(self) -> Pending[dict[str, torch.Tensor]]:
        """The learner's full weights as a pending result, for rollout workers to load when they are
        ready (asynchronous producers); `backend.weight_sync` is for `sync_weights` only."""
        return self.weight_sync.full_state()

    def _on_engines(
        self, method: Callable[Concatenate[RolloutWorker, P], None], *args: P.args, **kwargs: P.kwargs
    ) -> None:
        self.executor.gather([self.executor.submit(w, method, *args, **kwargs) for w in self.rollout_workers])

    def global_step(self) -> int:
        """The learner's update count."""
        return self.executor.call(self.learner, LearnerWorker.global_step)

    def save(self, folder: str) -> str:
        """Checkpoint the learner into `folder`."""
        return self._on_learners(LearnerWorker.save, folder)

    def checkpoint(self, output_dir: Path, step: int, keep: int = 0) -> str:
        """Checkpoint the learner into `output_dir`'s folder for `step`, then delete all but the newest `keep`
        checkpoints there (0: keep all); the checkpoint's path."""
        path = self.save(str(checkpoint_folder(output_dir, step)))
        prune_checkpoints(output_dir, keep)
        return path

    def task_ids(self, split: str, families: Sequence[str] = ()) -> list[str]:
        """Task ids of a split, asked of the first rollout worker's server."""
        return self.executor.call(self.rollout_workers[0], RolloutWorker.task_ids, split, families)

    def close(self) -> None:
        """Close the rollout workers, then release every worker."""
        self.executor.gather([self.executor.submit(w, RolloutWorker.close) for w in self.rollout_workers])
        self.executor.kill([*self.rollout_workers, *self.learners, *([self.teacher] if self.teacher else [])])


class _AddressProbe:
    """Runs in learner rank 0's bundle: the node address and a free port for the process group."""

    def address(self) -> tuple[str, int]:
        return rendezvous_address()


def split_tasks(tasks: Sequence[T], parts: int) -> list[list[T]]:
    """Contiguous, near-equal chunks (some may be empty)."""
    size, extra = divmod(len(tasks), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (i < extra)
        out.append(list(tasks[start:end]))
        start = end
    return out


def merge_rollouts(
    results: Sequence[tuple[list[Trajectory], RolloutStats]], *, renumber: bool = True
) -> tuple[list[Trajectory], RolloutStats]:
    """Concatenate per-worker results, renumbering groups so they stay batch-unique (`renumber`; branches
    keep their mains' groups)."""
    merged: list[Trajectory] = []
    stats = RolloutStats()
    offset = 0
    for trajectories, part in results:
        if renumber:
            for trajectory in trajectories:
                trajectory.group += offset
            offset = max((t.group for t in trajectories), default=offset - 1) + 1
        merged += trajectories
        stats.merge(part)
    return merged, stats
