"""`trainer eval`: success rate and mean turns on held-out tasks (one episode each, temperature 0.4)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from trainer.config import TrainerConfig
from trainer.driver import env_targets, trajectory_metrics
from trainer.rollout import SamplingSettings
from trainer.workers import RolloutWorker


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


def evaluate(
    config: TrainerConfig, policy: str | None = None, *, targets: list[str] | None = None, seed: int = 0
) -> EvalResult:
    """Play the first `eval.num_tasks` tasks of `env.eval_split` once each with `policy` (default: the student)."""
    path = policy or config.models.student
    if targets is None:
        with env_targets(config) as started:
            return evaluate(config, policy, targets=started, seed=seed)
    worker = RolloutWorker(config, targets[0], policy_path=path)
    try:
        task_ids = worker.task_ids(config.env.eval_split, config.env.families)[: config.eval.num_tasks]
        if not task_ids:
            raise ValueError(f"split {config.env.eval_split!r} has no tasks on {targets[0]}; set env.eval_split")
        sampling = SamplingSettings(
            max_new_tokens=config.rollout.max_new_tokens, temperature=config.eval.temperature, seed=seed
        )
        trajectories, stats = worker.run([(task_id, seed) for task_id in task_ids], sampling, group_size=1)
    finally:
        worker.close()
    metrics = trajectory_metrics(trajectories, "eval")
    return EvalResult(
        policy=str(path),
        split=config.env.eval_split,
        tasks=len(task_ids),
        success_rate=metrics["eval/success_rate"],
        mean_turns=metrics["eval/mean_turns"],
        invalid_turn_ratio=stats.invalid_turns / max(stats.turns, 1),
        wall_s=stats.wall_s,
    )


def write_eval(result: EvalResult, out: str | Path) -> Path:
    """Write the result as JSON."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(result), indent=2) + "\n")
    return path
