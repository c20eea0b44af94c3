"""The training driver: one plain loop over a `WorkerGroup` (in-process or Ray).

for step:  tasks -> the strategy's step (plain: rollout, G per task -> [teacher scores]) -> SyncGroups batch
           -> learner -> weights to rollout workers -> [held-out eval every `eval.every` steps,
           episodes/step_N.html] -> metrics (JSONL, TensorBoard, progress bar) -> checkpoint

With `divopd.enabled` the run is asynchronous instead (`trainer.async_driver`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tqdm import tqdm

from trainer.batching import SyncGroups
from trainer.config import TrainerConfig
from trainer.episodes_html import write_sample_episodes
from trainer.export import ROLLOUTS, append_rollouts
from trainer.held_out import held_out_tasks, play_held_out
from trainer.metrics import PLOTTED, MetricsLogger
from trainer.models.loading import load_tokenizer
from trainer.objectives import diagnostics as names
from trainer.objectives.registry import get_objective
from trainer.rollout import SamplingSettings, Trajectory
from trainer.rollout.strategies import get_strategy
from trainer.run_summary import write_summary
from trainer.runs import TaskSampler, TrainResult, env_targets, training_tasks, trajectory_metrics
from trainer.workers import WorkerGroup, latest_checkpoint


def periodic_eval(
    config: TrainerConfig, workers: WorkerGroup, tasks: Mapping[str, Sequence[str]], html: Path | None = None
) -> dict[str, float]:
    """The held-out protocol (`play_held_out`) with the current weights (their moving average with
    `optim.ema_decay`, as checkpoints hold): `eval/success_rate`, `eval/mean_turns`,
    `eval/invalid_turn_ratio` (the mean over the splits; with several, also `eval/<split>/*`). With `html`,
    sample episodes are written there (teacher gap shaded when the run has a teacher)."""
    with workers.evaluating():
        metrics, played = play_held_out(config, workers.play_held_out, tasks)
    if html is not None:
        score = workers.score if workers.teacher is not None else None
        tokenizer = load_tokenizer(config.models.student)
        write_sample_episodes(played, tokenizer, html, f"held-out episodes at step {html.stem}", score)
    return metrics


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


def plain_step(
    config: TrainerConfig,
    workers: WorkerGroup,
    tasks: Sequence[tuple[str, int]],
    sampling: SamplingSettings,
    step: int,
) -> tuple[list[Trajectory], dict[str, float]]:
    """The rollouts of a strategy without its own driver step: G per task, then teacher scores when the
    objective needs them."""
    del step
    trajectories, stats = workers.rollout(tasks, sampling)
    metrics = {**stats.as_metrics(), **trajectory_metrics(trajectories)}
    if get_objective(config.objective.name).needs_teacher:
        start = time.perf_counter()
        trajectories, scored = workers.score(trajectories)
        metrics["teacher/tokens_scored"] = float(scored)
        metrics["teacher/wall_s"] = time.perf_counter() - start
    return trajectories, metrics


def train_step(
    config: TrainerConfig, workers: WorkerGroup, composer: SyncGroups, tasks: list[tuple[str, int]], step: int
) -> dict[str, float]:
    """One step: the rollout strategy's step (`plain_step` unless it brings its own), learner update
    (colocated engines asleep), weights to the rollout workers (engines woken); the step's metrics."""
    sampling = SamplingSettings(
        max_new_tokens=config.rollout.max_new_tokens,
        temperature=config.rollout.temperature,
        top_p=config.rollout.top_p,
        top_logprobs=config.rollout.top_logprobs,
        seed=config.seed * 1_000_003 + step * 1009,
    )
    strategy_step = get_strategy(config.rollout.strategy).step or plain_step
    trajectories, metrics = strategy_step(config, workers, tasks, sampling, step)
    if config.logging.rollouts:
        append_rollouts(Path(config.output_dir) / ROLLOUTS, trajectories, config.env.train_split, step + 1)
    metrics.update(workers.learn(composer.compose(trajectories)))
    workers.sync_weights()
    return metrics


def _loop(
    config: TrainerConfig, workers: WorkerGroup, out: Path, resume_from: str | None, progress: bool
) -> TrainResult:
    start = workers.global_step()
    draws = start * config.rollout.tasks_per_step
    sampler = TaskSampler(training_tasks(config.env, workers), config.seed, start_draw=draws)
    composer = SyncGroups(config.prompt.context)
    eval_tasks = held_out_tasks(config, workers) if config.eval.every else {}
    logger = MetricsLogger.for_run(config, out, resumed=resume_from is not None)
    checkpoint = resume_from
    metrics: dict[str, float] = {}
    bar = tqdm(range(start, config.steps), initial=start, total=config.steps, disable=not progress, desc="train")
    try:
        if eval_tasks and config.eval.at_start and start == 0:
            logger.log(0, periodic_eval(config, workers, eval_tasks, out / "episodes" / "step_000000.html"))
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
                checkpoint = workers.checkpoint(out, step + 1, config.checkpoint_keep)
        final = workers.global_step()
        if final > start and (checkpoint is None or not checkpoint.endswith(f"step_{final:06d}")):
            checkpoint = workers.checkpoint(out, final, config.checkpoint_keep)
    finally:
        bar.close()
        logger.close()
    logger.plot((*PLOTTED, *get_strategy(config.rollout.strategy).plotted))
    write_summary(out, config.eval.target_success)
    return TrainResult(out, workers.global_step(), checkpoint, metrics)
