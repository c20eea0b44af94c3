"""`trainer eval`: success rate and mean turns on held-out tasks (one episode each, temperature 0.4)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from trainer.config import TrainerConfig
from trainer.episodes_html import write_sample_episodes
from trainer.rollout import SamplingSettings
from trainer.rollout.group import TurnCallback
from trainer.runs import env_targets, trajectory_metrics
from trainer.workers import RolloutWorker, TeacherWorker


@dataclass(frozen=True)
class EvalResult:
    """Held-out evaluation of one policy."""

    policy: str
    split: str
    tasks: int
    success_rate: float
    mean_turns: float
    invalid_turn_ratio: float
    wall_s: float
    task_success: tuple[float, ...] = ()
    """Success of each task (mean over its `samples` episodes), in task order: what a bootstrap over tasks resamples."""


def evaluate(
    config: TrainerConfig,
    policy: str | None = None,
    *,
    targets: list[str] | None = None,
    seed: int = 0,
    task_ids: Sequence[str] | None = None,
    samples: int = 1,
    temperature: float | None = None,
    html: str | Path | None = None,
    on_turn: TurnCallback | None = None,
) -> EvalResult:
    """Success of `policy` (default: the student) over `samples` episodes per task.

    The tasks are `task_ids`, else the first `eval.num_tasks` tasks of `env.eval_split`; the
    temperature is `eval.temperature` unless given. The success rate is the mean over all episodes.
    With `html`, the first `HTML_EPISODES` (trainer.episodes_html) episodes are written there as a page (gap shaded
    when `models.teacher` is set). `on_turn` hears after every lock-step turn how far the episodes got.
    """
    path = policy or config.models.student
    if targets is None:
        with env_targets(config) as started:
            return evaluate(
                config,
                policy,
                targets=started,
                seed=seed,
                task_ids=task_ids,
                samples=samples,
                temperature=temperature,
                html=html,
                on_turn=on_turn,
            )
    plain = config.model_copy(deep=True)
    plain.rollout.strategy = "group"  # evaluation plays the policy alone: no takeover, no branching
    worker = RolloutWorker(plain, targets[0], policy_path=path)
    try:
        ids = list(task_ids or worker.task_ids(config.env.eval_split, config.env.families)[: config.eval.num_tasks])
        if not ids:
            raise ValueError(f"split {config.env.eval_split!r} has no tasks on {targets[0]}; set env.eval_split")
        sampling = SamplingSettings(
            max_new_tokens=config.rollout.max_new_tokens,
            temperature=config.eval.temperature if temperature is None else temperature,
            seed=seed,
        )
        trajectories, stats = worker.run([(task_id, seed) for task_id in ids], sampling, samples, on_turn)
    finally:
        worker.close()
    if html is not None:
        score = TeacherWorker(config).score if config.models.teacher else None
        write_sample_episodes(trajectories, worker.tokenizer, html, f"held-out episodes of {path}", score)
    metrics = trajectory_metrics(trajectories, "eval")
    return EvalResult(
        policy=str(path),
        split="(given tasks)" if task_ids else config.env.eval_split,
        tasks=len(ids),
        success_rate=metrics["eval/success_rate"],
        mean_turns=metrics["eval/mean_turns"],
        invalid_turn_ratio=stats.invalid_turns / max(stats.turns, 1),
        wall_s=stats.wall_s,
        task_success=tuple(
            sum(t.won for t in trajectories[i * samples : (i + 1) * samples]) / samples for i in range(len(ids))
        ),
    )


def write_eval(result: EvalResult, out: str | Path) -> Path:
    """Write the result as JSON."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(result), indent=2) + "\n")
    return path
