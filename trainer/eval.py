"""`trainer eval`: success rate and mean turns on held-out tasks (one episode each, temperature 0.4), over every
held-out split (`env.eval_splits`: each reported, and their mean)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trainer.config import TrainerConfig
from trainer.episodes_html import write_sample_episodes
from trainer.held_out import combine_splits, held_out_tasks, outcome_metrics
from trainer.models.loading import check_same_tokenizer, load_tokenizer
from trainer.rollout import SamplingSettings
from trainer.rollout.group import TurnCallback
from trainer.runs import env_targets
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
    matched_turn_ratio: float = 0.0
    """Turns whose action `rollout.action_match: nearest` replaced by the nearest admissible one."""
    task_success: tuple[float, ...] = ()
    """Success of each task (mean over its `samples` episodes), in task order: what a bootstrap over tasks resamples."""
    per_split: dict[str, dict[str, float]] = field(default_factory=dict)
    samples: int = 1
    """Episodes played on each task."""
    """With several held-out splits, each split's success_rate, mean_turns, invalid_turn_ratio and tasks; the
    fields above are then their mean (each split weighs the same) and `split` names them joined by '+'."""


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

    The tasks are `task_ids`, else the first `eval.num_tasks` tasks of each held-out split (`env.eval_splits`,
    else `env.eval_split`); the temperature is `eval.temperature` unless given. A split's success rate is the mean
    over its episodes; with several splits the result is their mean and `per_split` holds each.
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
    plain.rollout.max_turns = None  # and whole episodes (env.max_turns)
    worker = RolloutWorker(plain, targets[0], policy_path=path)
    sampling = SamplingSettings(
        max_new_tokens=config.rollout.max_new_tokens,
        temperature=config.eval.temperature if temperature is None else temperature,
        seed=seed,
    )
    played, per_split, task_success, wall_s = [], {}, [], 0.0
    teacher = config.models.teacher if html is not None else None
    try:
        if teacher:  # a missing or mismatched teacher stops the evaluation before its episodes, not after
            check_same_tokenizer(worker.tokenizer, load_tokenizer(teacher))
        tasks = {"(given tasks)": list(task_ids)} if task_ids else held_out_tasks(config, worker)
        for split, ids in tasks.items():
            trajectories, stats = worker.run([(task_id, seed) for task_id in ids], sampling, samples, on_turn)
            played += trajectories
            per_split[split] = {**outcome_metrics(trajectories, stats), "tasks": float(len(ids))}
            task_success += [
                sum(t.won for t in trajectories[i * samples : (i + 1) * samples]) / samples for i in range(len(ids))
            ]
            wall_s += stats.wall_s
    finally:
        worker.close()
    if html is not None:
        score = None
        if teacher:  # the teacher scores the evaluated policy's tokens (checked above against its tokenizer)
            scoring = config.model_copy(update={"models": config.models.model_copy(update={"student": str(path)})})
            score = TeacherWorker(scoring).score
        write_sample_episodes(played, worker.tokenizer, html, f"held-out episodes of {path}", score)
    mean = combine_splits(per_split, prefix="mean")
    return EvalResult(
        policy=str(path),
        split="+".join(per_split),
        tasks=sum(int(m["tasks"]) for m in per_split.values()),
        success_rate=mean["mean/success_rate"],
        mean_turns=mean["mean/mean_turns"],
        invalid_turn_ratio=mean["mean/invalid_turn_ratio"],
        wall_s=wall_s,
        matched_turn_ratio=mean["mean/matched_turn_ratio"],
        task_success=tuple(task_success),
        per_split=per_split if len(per_split) > 1 else {},
        samples=samples,
    )


def write_eval(result: EvalResult, out: str | Path) -> Path:
    """Write the result as JSON."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(result), indent=2) + "\n")
    return path
