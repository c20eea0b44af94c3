"""The training driver: one plain loop over a `WorkerGroup` (in-process or Ray).

for step:  tasks -> rollout (G per task) -> [teacher scores] -> SyncGroups batch -> learner
           -> weights to rollout workers -> [held-out eval every `eval.every` steps, episodes/step_N.html]
           -> metrics (JSONL, TensorBoard, progress bar) -> checkpoint
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tqdm import tqdm

from trainer.batching import SyncGroups
from trainer.branching.step import branch_rollout
from trainer.config import TrainerConfig
from trainer.episodes_html import write_sample_episodes
from trainer.metrics import MetricsLogger
from trainer.models.loading import load_tokenizer
from trainer.objectives import diagnostics as names
from trainer.objectives.registry import get_objective
from trainer.rollout import SamplingSettings, Trajectory
from trainer.rollout.local_server import LocalServer
from trainer.workers import WorkerGroup, latest_checkpoint


@dataclass(frozen=True)
class TrainResult:
    """What a run produced."""

    output_dir: Path
    final_step: int
    checkpoint: str | None
    last_metrics: dict[str, float]


def trajectory_metrics(trajectories: Sequence[Trajectory], prefix: str = "rollout") -> dict[str, float]:
    """Success rate, mean turns and dropped share of a set of trajectories."""
    complete = [t for t in trajectories if not t.dropped]
    n = max(len(complete), 1)
    return {
        f"{prefix}/success_rate": sum(t.won for t in complete) / n,
        f"{prefix}/mean_turns": sum(t.num_turns for t in complete) / n,
        f"{prefix}/trajectories": float(len(trajectories)),
        f"{prefix}/dropped_ratio": (len(trajectories) - len(complete)) / max(len(trajectories), 1),
    }


class TaskSampler:
    """Cycles through the training tasks in a seeded shuffled order; each draw gets its own env seed."""

    def __init__(self, task_ids: Sequence[str], seed: int, start_draw: int = 0) -> None:
        if not task_ids:
            raise ValueError("no training tasks: check env.train_split / env.task_ids against the server's task list")
        self.task_ids = list(task_ids)
        self.rng = random.Random(seed)
        self.draw = 0
        self._order: list[str] = []
        for _ in range(start_draw):
            self._next()

    def _next(self) -> tuple[str, int]:
        if not self._order:
            self._order = self.task_ids[:]
            self.rng.shuffle(self._order)
        self.draw += 1
        return self._order.pop(), self.draw

    def sample(self, count: int) -> list[tuple[str, int]]:
        """`count` (task_id, seed) pairs."""
        return [self._next() for _ in range(count)]


class TaskSource(Protocol):
    """Anything that lists a split's task ids (a worker group, the async driver's actors)."""

    def task_ids(self, split: str, families: Sequence[str] = ()) -> list[str]: ...


def training_tasks(config: TrainerConfig, workers: TaskSource) -> list[str]:
    """Task ids to train on: the explicit list, else the train split (first `max_tasks`)."""
    ids = list(config.env.task_ids) or workers.task_ids(config.env.train_split, config.env.families)
    return ids[: config.env.max_tasks] if config.env.max_tasks else ids


def evaluation_tasks(config: TrainerConfig, workers: TaskSource) -> list[str]:
    """The held-out tasks of `eval.every`: the first `eval.num_tasks` of `env.eval_split`."""
    ids = workers.task_ids(config.env.eval_split, config.env.families)[: config.eval.num_tasks]
    if not ids:
        raise ValueError(f"eval.every is set but split {config.env.eval_split!r} has no tasks; set env.eval_split")
    return ids


def periodic_eval(
    config: TrainerConfig, workers: WorkerGroup, task_ids: Sequence[str], html: Path | None = None
) -> dict[str, float]:
    """One episode per held-out task with the current weights at `eval.temperature` (fixed seeds, so
    successive evaluations compare): `eval/success_rate`, `eval/mean_turns`, `eval/invalid_turn_ratio`.
    With `html`, sample episodes are written there (teacher gap shaded when the run has a teacher)."""
    sampling = SamplingSettings(
        max_new_tokens=config.rollout.max_new_tokens, temperature=config.eval.temperature, seed=config.seed
    )
    trajectories, stats = workers.rollout([(task_id, config.seed) for task_id in task_ids], sampling, group_size=1)
    if html is not None:
        score = workers.score if workers.teacher is not None else None
        tokenizer = load_tokenizer(config.models.student)
        write_sample_episodes(trajectories, tokenizer, html, f"held-out episodes at step {html.stem}", score)
    metrics = trajectory_metrics(trajectories, "eval")
    metrics["eval/invalid_turn_ratio"] = stats.invalid_turns / max(stats.turns, 1)
    return metrics


@contextlib.contextmanager
def env_targets(config: TrainerConfig) -> Iterator[list[str]]:
    """Server addresses; starts (and stops) a local server for each "local" entry, reachable from every
    node that may run a rollout actor (`env.local_host`); other targets pass through unchanged."""
    with contextlib.ExitStack() as stack:
        bind, advertise = local_server_host(config)
        targets = [
            stack.enter_context(LocalServer(config.env.name, host=bind, advertise=advertise)).address
            if target == "local"
            else target
            for target in config.env.targets
        ]
        yield targets


def local_server_host(config: TrainerConfig) -> tuple[str, str]:
    """(address "local" servers bind, host they are advertised at): loopback for a single machine; every
    interface and this node's routable address on a Ray cluster (`ray.address`), or `env.local_host`."""
    if config.env.local_host != "auto":
        return "0.0.0.0", config.env.local_host
    if config.ray.enabled and config.ray.address:
        from ray.util import get_node_ip_address

        return "0.0.0.0", get_node_ip_address()
    return "localhost", "localhost"


def train(config: TrainerConfig, *, progress: bool = True) -> TrainResult:
    """Run `config.steps` learner steps (continuing from the newest checkpoint when `resume`).

    With `divopd.enabled` the run is asynchronous (`trainer.async_driver.train_async`).
    """
    if config.divopd.enabled:
        from trainer.async_driver import train_async

        return train_async(config, progress=progress)
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(config.model_dump_json(indent=2))
    resume_from = latest_checkpoint(out) if config.resume else None
    with env_targets(config) as targets:
        workers = WorkerGroup(config, targets, resume_from=resume_from)
        try:
            return _loop(config, workers, out, resume_from, progress)
        finally:
            workers.close()


def train_step(
    config: TrainerConfig, workers: WorkerGroup, composer: SyncGroups, tasks: list[tuple[str, int]], step: int
) -> dict[str, float]:
    """One step: rollout (or branch rollout), teacher scores, learner update (colocated engines asleep),
    weights to the rollout workers (engines woken); the step's metrics."""
    sampling = SamplingSettings(
        max_new_tokens=config.rollout.max_new_tokens,
        temperature=config.rollout.temperature,
        top_p=config.rollout.top_p,
        top_logprobs=config.rollout.top_logprobs,
        seed=config.seed * 1_000_003 + step * 1009,
    )
    if config.rollout.strategy == "branch":
        mains, branches, metrics = branch_rollout(workers, tasks, sampling, config.seed * 7919 + step)
        metrics.update(trajectory_metrics(mains))
        trajectories = mains + branches
    else:
        trajectories, stats = workers.rollout(tasks, sampling)
        metrics = {**stats.as_metrics(), **trajectory_metrics(trajectories)}
        if get_objective(config.objective.name).needs_teacher:
            trajectories, scored = workers.score(trajectories)
            metrics["teacher/tokens_scored"] = float(scored)
    metrics.update(workers.learn(composer.compose(trajectories)))
    workers.sync_weights()
    return metrics


def _loop(
    config: TrainerConfig, workers: WorkerGroup, out: Path, resume_from: str | None, progress: bool
) -> TrainResult:
    start = workers.global_step()
    draws = start * config.rollout.tasks_per_step
    sampler = TaskSampler(training_tasks(config, workers), config.seed, start_draw=draws)
    composer = SyncGroups(config.prompt.context)
    eval_tasks = evaluation_tasks(config, workers) if config.eval.every else []
    logger = MetricsLogger.for_run(config, out)
    checkpoint = resume_from
    metrics: dict[str, float] = {}
    bar = tqdm(range(start, config.steps), initial=start, total=config.steps, disable=not progress, desc="train")
    try:
        for step in bar:
            metrics = train_step(config, workers, composer, sampler.sample(config.rollout.tasks_per_step), step)
            if eval_tasks and (step + 1) % config.eval.every == 0:
                html = out / "episodes" / f"step_{step + 1:06d}.html"
                metrics.update(periodic_eval(config, workers, eval_tasks, html))
            logger.log(step + 1, metrics)
            bar.set_postfix(
                success=f"{metrics[names.SUCCESS_RATE]:.2f}", turns=f"{metrics[names.MEAN_TURNS]:.1f}", refresh=False
            )
            if config.checkpoint_every and (step + 1) % config.checkpoint_every == 0:
                checkpoint = workers.save(str(out / "checkpoints" / f"step_{step + 1:06d}"))
        final = workers.global_step()
        if final > start and (checkpoint is None or not checkpoint.endswith(f"step_{final:06d}")):
            checkpoint = workers.save(str(out / "checkpoints" / f"step_{final:06d}"))
    finally:
        bar.close()
        logger.close()
    logger.plot()
    return TrainResult(out, workers.global_step(), checkpoint, metrics)
