"""Workers (rollout, teacher, learner) and two worker groups with one interface: in-process and Ray.

The driver only sees `WorkerGroup`; `LocalWorkers` runs every worker in this process (tests),
`RayWorkers` runs the same classes as Ray actors (`ray.init()` locally, or `ray.address`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from trainer.config import TrainerConfig
from trainer.learner import Learner
from trainer.objectives.batch import TokenBatch
from trainer.prompts import PromptRenderer
from trainer.rollout import ClientEnvPort, GroupRollout, RolloutSettings, RolloutStats, SamplingSettings, Trajectory
from trainer.rollout.envport import EnvPort

STOP_STRINGS = ("</action>", "</search>", "</answer>")
"""A response ends once its action is closed (saves tokens; the parser needs nothing after it)."""


def resolve_device(device: str) -> str:
    """`auto` -> cuda when available, else cpu."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def make_generation_backend(config: TrainerConfig, path: str) -> Any:
    """The student's generation backend named by `backend.kind`."""
    from trainer.backends import make_backend

    if config.backend.kind == "vllm":
        return make_backend(
            "vllm", path, gpu_memory_utilization=config.backend.gpu_memory_utilization, stop=STOP_STRINGS
        )
    return make_backend("hf", path, device=resolve_device(config.backend.device), stop=STOP_STRINGS)


def make_env_port(config: TrainerConfig, target: str) -> EnvPort:
    """An `EnvPort` over an envhub client connected to `target` ("host:port")."""
    from envhub.client import EnvhubClient

    return ClientEnvPort(EnvhubClient(target), config.env.name)


def rollout_settings(config: TrainerConfig) -> RolloutSettings:
    """Episode settings of `config`."""
    return RolloutSettings(
        group_size=config.rollout.group_size,
        max_turns=config.env.max_turns,
        admissible=config.prompt.show_admissible,
        snapshots=config.rollout.snapshots,
        step_timeout_s=config.env.step_timeout_s,
        step_retries=config.env.step_retries,
        concurrency=config.rollout.concurrency,
        max_prompt_tokens=config.prompt.max_prompt_tokens,
    )


class RolloutWorker:
    """Holds an envhub client and a generation backend; plays task groups."""

    def __init__(self, config: TrainerConfig, target: str, policy_path: str | None = None) -> None:
        from trainer.models.loading import load_tokenizer

        path = policy_path or config.models.student
        self.port = make_env_port(config, target)
        self.tokenizer = load_tokenizer(path)
        self.backend = make_generation_backend(config, path)
        renderer = PromptRenderer(
            config.env.name,
            style=config.prompt.style,
            context=config.prompt.context,
            history_length=config.prompt.history_length,
            show_admissible=config.prompt.show_admissible,
        )
        self.rollout = GroupRollout(self.port, self.backend, self.tokenizer, renderer, rollout_settings(config))

    def run(
        self, tasks: Sequence[tuple[str, int]], sampling: SamplingSettings, group_size: int | None = None
    ) -> tuple[list[Trajectory], RolloutStats]:
        return self.rollout.run(tasks, sampling, group_size)

    def update_weights(self, weights: dict[str, torch.Tensor]) -> None:
        self.backend.update_weights(weights)

    def task_ids(self, split: str, families: Sequence[str] = ()) -> list[str]:
        return self.port.task_ids(split, families)

    def close(self) -> None:
        self.rollout.close()


class TeacherWorker:
    """The frozen teacher: scores the student's sampled tokens."""

    def __init__(self, config: TrainerConfig) -> None:
        from trainer.backends.hf import HFBackend
        from trainer.models.loading import check_same_tokenizer, load_tokenizer

        if not config.models.teacher:
            raise ValueError("this objective needs a teacher: set models.teacher")
        check_same_tokenizer(load_tokenizer(config.models.student), load_tokenizer(config.models.teacher))
        self.backend = HFBackend.from_pretrained(config.models.teacher, device=resolve_device(config.backend.device))

    def score(self, trajectories: list[Trajectory]) -> tuple[list[Trajectory], int]:
        from trainer.batching import attach_teacher_logprobs

        scored = attach_teacher_logprobs(trajectories, self.backend)
        return trajectories, scored


class LearnerWorker:
    """The learner process: model, optimizer, checkpoints."""

    def __init__(self, config: TrainerConfig, resume_from: str | None = None) -> None:
        from trainer.models.loading import load_model, load_tokenizer

        torch.manual_seed(config.seed)
        device = resolve_device(config.backend.device)
        self.tokenizer = load_tokenizer(config.models.student)
        model = load_model(resume_from or config.models.student, device=device)
        self.learner = Learner(model, config.objective, config.optim, device=device)
        if resume_from:
            self.learner.load(resume_from)

    def step(self, batch: TokenBatch) -> dict[str, float]:
        return self.learner.step(batch)

    def weights(self) -> dict[str, torch.Tensor]:
        return self.learner.weights()

    def global_step(self) -> int:
        return self.learner.global_step

    def save(self, folder: str) -> str:
        return str(self.learner.save(folder, self.tokenizer))


class WorkerGroup(Protocol):
    """What the driver needs from its workers, wherever they run."""

    def rollout(
        self, tasks: Sequence[tuple[str, int]], sampling: SamplingSettings, group_size: int | None = None
    ) -> tuple[list[Trajectory], RolloutStats]: ...
    def score(self, trajectories: list[Trajectory]) -> tuple[list[Trajectory], int]: ...
    def learn(self, batch: TokenBatch) -> dict[str, float]: ...
    def sync_weights(self) -> None: ...
    def global_step(self) -> int: ...
    def save(self, folder: str) -> str: ...
    def task_ids(self, split: str, families: Sequence[str] = ()) -> list[str]: ...
    def close(self) -> None: ...


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


class LocalWorkers:
    """Every worker in this process: one rollout worker per target, the teacher, the learner."""

    def __init__(self, config: TrainerConfig, targets: Sequence[str], resume_from: str | None = None) -> None:
        self.rollout_workers = [RolloutWorker(config, target) for target in targets]
        self.teacher = TeacherWorker(config) if _needs_teacher(config) else None
        self.learner = LearnerWorker(config, resume_from)
        if resume_from:
            self.sync_weights()

    def rollout(
        self, tasks: Sequence[tuple[str, int]], sampling: SamplingSettings, group_size: int | None = None
    ) -> tuple[list[Trajectory], RolloutStats]:
        chunks = split_tasks(tasks, len(self.rollout_workers))
        return merge_rollouts(
            [w.run(chunk, sampling, group_size) for w, chunk in zip(self.rollout_workers, chunks, strict=True) if chunk]
        )

    def score(self, trajectories: list[Trajectory]) -> tuple[list[Trajectory], int]:
        if self.teacher is None:
            raise ValueError("no teacher configured (models.teacher) but the objective asked for teacher scores")
        return self.teacher.score(trajectories)

    def learn(self, batch: TokenBatch) -> dict[str, float]:
        return self.learner.step(batch)

    def sync_weights(self) -> None:
        weights = self.learner.weights()
        for worker in self.rollout_workers:
            worker.update_weights(weights)

    def global_step(self) -> int:
        return self.learner.global_step()

    def save(self, folder: str) -> str:
        return self.learner.save(folder)

    def task_ids(self, split: str, families: Sequence[str] = ()) -> list[str]:
        return self.rollout_workers[0].task_ids(split, families)

    def close(self) -> None:
        for worker in self.rollout_workers:
            worker.close()


class RayWorkers:
    """The same workers as Ray actors. Weights travel learner -> object store -> rollout actors."""

    def __init__(self, config: TrainerConfig, targets: Sequence[str], resume_from: str | None = None) -> None:
        import ray

        self._ray = ray
        init_ray(config)
        per_target = max(1, config.ray.num_rollout_workers // max(len(targets), 1))
        rollout_cls: Any = ray.remote(num_cpus=0)(RolloutWorker)
        teacher_cls: Any = ray.remote(num_cpus=0)(TeacherWorker)
        learner_cls: Any = ray.remote(num_cpus=0)(LearnerWorker)
        self.rollout_workers: list[Any] = [rollout_cls.remote(config, t) for t in targets for _ in range(per_target)]
        self.teacher: Any = teacher_cls.remote(config) if _needs_teacher(config) else None
        self.learner: Any = learner_cls.remote(config, resume_from)
        if resume_from:
            self.sync_weights()

    def rollout(
        self, tasks: Sequence[tuple[str, int]], sampling: SamplingSettings, group_size: int | None = None
    ) -> tuple[list[Trajectory], RolloutStats]:
        chunks = split_tasks(tasks, len(self.rollout_workers))
        pairs = zip(self.rollout_workers, chunks, strict=True)
        futures = [w.run.remote(chunk, sampling, group_size) for w, chunk in pairs if chunk]
        return merge_rollouts(self._ray.get(futures))

    def score(self, trajectories: list[Trajectory]) -> tuple[list[Trajectory], int]:
        if self.teacher is None:
            raise ValueError("no teacher configured (models.teacher) but the objective asked for teacher scores")
        result: tuple[list[Trajectory], int] = self._ray.get(self.teacher.score.remote(trajectories))
        return result

    def learn(self, batch: TokenBatch) -> dict[str, float]:
        metrics: dict[str, float] = self._ray.get(self.learner.step.remote(batch))
        return metrics

    def sync_weights(self) -> None:
        weights = self.learner.weights.remote()
        self._ray.get([w.update_weights.remote(weights) for w in self.rollout_workers])

    def global_step(self) -> int:
        step: int = self._ray.get(self.learner.global_step.remote())
        return step

    def save(self, folder: str) -> str:
        path: str = self._ray.get(self.learner.save.remote(folder))
        return path

    def task_ids(self, split: str, families: Sequence[str] = ()) -> list[str]:
        ids: list[str] = self._ray.get(self.rollout_workers[0].task_ids.remote(split, families))
        return ids

    def close(self) -> None:
        self._ray.get([w.close.remote() for w in self.rollout_workers])
        for actor in [*self.rollout_workers, self.learner, *([self.teacher] if self.teacher else [])]:
            self._ray.kill(actor)


def init_ray(config: TrainerConfig) -> None:
    """Connect to `ray.address`, or start a local Ray (auth off, object store capped)."""
    import ray

    if ray.is_initialized():
        return
    if config.ray.address:
        ray.init(address=config.ray.address)
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(
        num_cpus=max(2, os.cpu_count() or 2),
        object_store_memory=config.ray.object_store_mb * 1024 * 1024,
        include_dashboard=False,
        log_to_driver=False,
    )


def _needs_teacher(config: TrainerConfig) -> bool:
    from trainer.objectives.registry import get_objective

    return get_objective(config.objective.name).needs_teacher


def make_workers(config: TrainerConfig, targets: Sequence[str], resume_from: str | None = None) -> WorkerGroup:
    """`RayWorkers` when `ray.enabled`, else `LocalWorkers`."""
    group: WorkerGroup = (RayWorkers if config.ray.enabled else LocalWorkers)(config, targets, resume_from)
    return group


def latest_checkpoint(output_dir: str | Path) -> str | None:
    """The newest `checkpoints/step_*` folder with a trainer state, or None."""
    folder = Path(output_dir) / "checkpoints"
    if not folder.is_dir():
        return None
    done = sorted(p for p in folder.glob("step_*") if (p / "trainer_state.pt").is_file())
    return str(done[-1]) if done else None
