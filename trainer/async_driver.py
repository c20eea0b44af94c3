"""Asynchronous training (DivOPD): producers fill a versioned buffer, the learner samples it at its own pace.

    producer i (a thread, or a Ray actor driven by one):       learner (this thread):
      loop: newer weights? -> load them (version v)              for update q:
            tasks -> rollout -> teacher scores                     wait for rows; batch = buffer.take(q)
            buffer.push(trajectories, v)                           learn; every sync_every: publish weights

Every row carries the policy version that generated it; the buffer's reader (`divopd.reader`) drops
rows older than `q - divopd.max_staleness` and composes the batch. Nothing here is deterministic in
time (producers and learner race, which is the point); the sampler itself is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from trainer.batching import SyncGroups
from trainer.batching.buffer import ExperienceBuffer, RayBuffer, TakenBatch
from trainer.batching.divopd import SamplerSettings
from trainer.batching.divopd_stats import PLOTTED as DIVOPD_PLOTTED
from trainer.config import TrainerConfig
from trainer.driver import TaskSampler, TrainResult, env_targets, training_tasks, trajectory_metrics
from trainer.metrics import PLOTTED, MetricsLogger
from trainer.rollout import RolloutStats, SamplingSettings, Trajectory
from trainer.workers import LearnerWorker, RolloutWorker, TeacherWorker, init_ray, latest_checkpoint

WAIT_POLL_S = 0.05
"""How often the learner re-checks the buffer while waiting for rows."""


def sampler_settings(config: TrainerConfig) -> SamplerSettings:
    """The buffer reader's settings from `config.divopd`."""
    d = config.divopd
    return SamplerSettings(
        reader=d.reader,
        batch_rows=d.batch_rows,
        pool_multiplier=d.pool_multiplier,
        initial_cap=d.initial_cap,
        max_staleness=d.max_staleness,
        max_pending_age=d.max_pending_age,
    )


class _Actors:
    """The producers, teacher and learner, in-process or as Ray actors, called through one `call`."""

    def __init__(self, config: TrainerConfig, targets: list[str], resume_from: str | None) -> None:
        self.ray: Any = None
        producer_cls: Any = RolloutWorker
        teacher_cls: Any = TeacherWorker
        learner_cls: Any = LearnerWorker
        if config.ray.enabled:
            import ray

            init_ray(config)
            self.ray = ray
            producer_cls, teacher_cls, learner_cls = (
                ray.remote(num_cpus=0)(cls) for cls in (RolloutWorker, TeacherWorker, LearnerWorker)
            )
        make = (lambda cls, *a: cls.remote(*a)) if self.ray else (lambda cls, *a: cls(*a))
        self.producers = [
            make(producer_cls, config, targets[i % len(targets)], resume_from) for i in range(config.divopd.producers)
        ]
        self.teacher = make(teacher_cls, config)
        self.learner = make(learner_cls, config, resume_from)
        self.buffer: Any = (
            RayBuffer(sampler_settings(config)) if self.ray else ExperienceBuffer(sampler_settings(config))
        )
        self._teacher_lock = threading.Lock()

    def call(self, actor: Any, method: str, *args: Any) -> Any:
        """Run `actor.method(*args)` here, or on its Ray actor and wait."""
        if self.ray:
            return self.ray.get(getattr(actor, method).remote(*args))
        return getattr(actor, method)(*args)

    def score(self, trajectories: list[Trajectory]) -> int:
        """Teacher log-probs onto `trajectories` (in place); one scoring call at a time in-process."""
        with self._teacher_lock:
            scored, tokens = self.call(self.teacher, "score", trajectories)
        trajectories[:] = scored
        return int(tokens)

    def task_ids(self, split: str, families: Sequence[str] = ()) -> list[str]:
        """Task ids of a split, asked of the first producer's server."""
        ids: list[str] = self.call(self.producers[0], "task_ids", split, families)
        return ids

    def weights(self) -> Any:
        """The learner's weights (a Ray object reference in Ray mode: fetched once per producer)."""
        return self.learner.weights.remote() if self.ray else self.learner.weights()

    def close(self) -> None:
        for producer in self.producers:
            self.call(producer, "close")
        if self.ray:
            for actor in [*self.producers, self.teacher, self.learner]:
                self.ray.kill(actor)
            self.buffer.close()


@dataclass
class _Published:
    """The newest weights the learner published, and their policy version."""

    version: int
    weights: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def set(self, version: int, weights: Any) -> None:
        with self.lock:
            self.version, self.weights = version, weights

    def get(self) -> tuple[int, Any]:
        with self.lock:
            return self.version, self.weights


@dataclass
class _ProducerLog:
    """Rollout results since the learner last read them (shared by every producer)."""

    trajectories: list[Trajectory] = field(default_factory=list)
    stats: list[RolloutStats] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, trajectories: list[Trajectory], stats: RolloutStats) -> None:
        with self.lock:
            self.trajectories += trajectories
            self.stats.append(stats)

    def drain(self) -> dict[str, float]:
        with self.lock:
            trajectories, stats, self.trajectories, self.stats = self.trajectories, self.stats, [], []
        out = trajectory_metrics(trajectories) if trajectories else {}
        out["rollout/turns"] = float(sum(s.turns for s in stats))
        out["rollout/calls"] = float(len(stats))
        return out


class _Producer(threading.Thread):
    """Plays task batches with one rollout worker and pushes the scored trajectories to the buffer."""

    def __init__(
        self,
        index: int,
        actors: _Actors,
        config: TrainerConfig,
        tasks: Callable[[], list[tuple[str, int]]],
        published: _Published,
        log: _ProducerLog,
        stop: threading.Event,
    ) -> None:
        super().__init__(name=f"producer-{index}", daemon=True)
        self.index, self.actors, self.config = index, actors, config
        self.tasks, self.published, self.log, self.stop = tasks, published, log, stop
        self.version = published.get()[0]
        self.error: BaseException | None = None

    def run(self) -> None:
        worker = self.actors.producers[self.index]
        calls = 0
        try:
            while not self.stop.is_set():
                version, weights = self.published.get()
                if version > self.version and weights is not None:
                    self.actors.call(worker, "update_weights", weights)
                    self.version = version
                seed = self.config.seed * 1_000_003 + calls * 1009 + self.index * 7919
                trajectories, stats = self.actors.call(worker, "run", self.tasks(), self._sampling(seed))
                calls += 1
                self.actors.score(trajectories)
                self.actors.buffer.push(trajectories, self.version)
                self.log.add(trajectories, stats)
        except BaseException as exc:  # handed to the learner thread, which re-raises it
            self.error = exc

    def _sampling(self, seed: int) -> SamplingSettings:
        r = self.config.rollout
        return SamplingSettings(
            max_new_tokens=r.max_new_tokens,
            temperature=r.temperature,
            top_p=r.top_p,
            top_logprobs=r.top_logprobs,
            seed=seed,
        )


def train_async(config: TrainerConfig, *, progress: bool = True) -> TrainResult:
    """Run `config.steps` learner updates asynchronously (continuing from the newest checkpoint)."""
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(config.model_dump_json(indent=2))
    resume_from = latest_checkpoint(out) if config.resume else None
    with env_targets(config) as targets:
        actors = _Actors(config, targets, resume_from)
        try:
            return _learn(config, actors, out, resume_from, progress)
        finally:
            actors.close()


def _learn(config: TrainerConfig, actors: _Actors, out: Path, resume_from: str | None, progress: bool) -> TrainResult:
    start = int(actors.call(actors.learner, "global_step"))
    sampler = TaskSampler(training_tasks(config, actors), config.seed, start_draw=start * config.rollout.tasks_per_step)
    sampler_lock = threading.Lock()

    def next_tasks() -> list[tuple[str, int]]:
        with sampler_lock:
            return sampler.sample(config.rollout.tasks_per_step)

    published = _Published(start)
    log = _ProducerLog()
    stop = threading.Event()
    producers = [_Producer(i, actors, config, next_tasks, published, log, stop) for i in range(len(actors.producers))]
    composer = SyncGroups("history")
    logger = MetricsLogger(out)
    need = config.divopd.min_rows or config.divopd.batch_rows
    checkpoint = resume_from
    metrics: dict[str, float] = {}
    bar = tqdm(range(start, config.steps), initial=start, total=config.steps, disable=not progress, desc="train-async")
    for producer in producers:
        producer.start()
    try:
        for q in bar:
            waited, taken = _next_batch(actors, producers, q, need)
            metrics = {**log.drain(), **taken.metrics, "async/wait_s": waited}
            metrics.update(actors.call(actors.learner, "step", composer.compose(taken.trajectories)))
            if (q + 1 - start) % config.divopd.sync_every == 0:
                published.set(q + 1, actors.weights())
            metrics["async/published_version"] = float(published.get()[0])
            metrics["async/producer_versions"] = sum(p.version for p in producers) / len(producers)
            logger.log(q + 1, metrics)
            if config.checkpoint_every and (q + 1) % config.checkpoint_every == 0:
                checkpoint = actors.call(actors.learner, "save", str(out / "checkpoints" / f"step_{q + 1:06d}"))
        final = int(actors.call(actors.learner, "global_step"))
        if final > start and (checkpoint is None or not checkpoint.endswith(f"step_{final:06d}")):
            checkpoint = actors.call(actors.learner, "save", str(out / "checkpoints" / f"step_{final:06d}"))
    finally:
        stop.set()
        for producer in producers:
            producer.join()
        bar.close()
        logger.close()
    logger.plot((*PLOTTED, *DIVOPD_PLOTTED))
    return TrainResult(out, final, checkpoint, metrics)


def _next_batch(actors: _Actors, producers: list[_Producer], q: int, need: int) -> tuple[float, TakenBatch]:
    """Wait until `need` rows are buffered, then take update q's batch (again while it has no valid row)."""
    start = time.perf_counter()
    while True:
        for producer in producers:
            if producer.error is not None:
                raise RuntimeError(f"{producer.name} failed: {producer.error!r}") from producer.error
        if not any(p.is_alive() for p in producers):
            raise RuntimeError("every producer stopped before the learner finished")
        if actors.buffer.available() >= need:
            taken: TakenBatch = actors.buffer.take(q)
            if taken.trajectories:
                return time.perf_counter() - start, taken
        time.sleep(WAIT_POLL_S)
