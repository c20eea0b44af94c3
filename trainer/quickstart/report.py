"""`<out>/report.md`: what the quickstart ran, held-out success before/after with the learning check, the plot."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from trainer.config import TrainerConfig
from trainer.eval import EvalResult
from trainer.metrics import read_metrics
from trainer.objectives.diagnostics import LISTED_KL, REVERSE_KL
from trainer.quickstart.learning import BOOTSTRAP_RESAMPLES, LearningCheck, check_learning
from trainer.quickstart.models import QuickstartModels
from trainer.quickstart.plans import ModelPlan


@dataclass(frozen=True)
class QuickstartRun:
    """Everything the report states."""

    plan: ModelPlan
    config: TrainerConfig
    models: QuickstartModels
    before: EvalResult
    teacher: EvalResult
    after: EvalResult
    steps: int
    train_dir: Path
    seconds: dict[str, float]
    """Wall seconds per phase."""
    load_start: tuple[float, float, float]
    load_end: tuple[float, float, float]


KL_TRENDS = (
    (LISTED_KL, "Reverse KL(student || teacher) over the listed replies"),
    (REVERSE_KL, "Per-token reverse KL(student || teacher)"),
)
"""The KL a run logs, with its report label: over the listed replies (`kl_over: replies`, before each step's
updates) where logged, else the sampled tokens' estimate."""


def kl_trend(train_dir: Path) -> tuple[str, float, float] | None:
    """The run's KL (`KL_TRENDS`, its label) averaged over the first and the last quarter of the steps (None when
    the objective logs none)."""
    records = read_metrics(train_dir / "metrics.jsonl")
    for key, label in KL_TRENDS:
        values = [r[key] for r in records if r.get(key) is not None]
        if len(values) >= 2:
            quarter = max(1, len(values) // 4)
            return label, statistics.fmean(values[:quarter]), statistics.fmean(values[-quarter:])
    return None


def learning_lines(check: LearningCheck, kl: tuple[str, float, float] | None) -> str:
    """The report's verdict: gain vs spread, and the teacher-student gap before and after."""
    verdict = "**met**" if check.met else "**NOT met**"
    lines = [
        f"Learning criterion {verdict}: held-out success gain {check.gain:+.2f} vs its spread {check.spread:.2f} "
        f"({'above' if check.beyond_noise else 'not above'} noise); teacher-student success gap "
        f"{check.gap_before:.2f} -> {check.gap_after:.2f} ({'shrank' if check.gap_shrank else 'did not shrink'}"
        + (f", {check.gap_closed:.0%} of it closed)." if check.gap_before > 0 else ")."),
        f"Spread: 1.96 x the standard deviation of the gain over {BOOTSTRAP_RESAMPLES} paired bootstrap resamples "
        f"of the {check.tasks} held-out tasks (each task's success is the mean of its episodes; same tasks and "
        "environment seeds for every policy).",
    ]
    if kl is not None:
        lines.append(
            f"{kl[0]} on the training rollouts: {kl[1]:.3f} (first quarter of the steps) -> {kl[2]:.3f} (last quarter)."
        )
    return "\n".join(f"* {line}" for line in lines)


ORIGINS = {
    "made": "Models made by this run",
    "reused": "Models reused from an earlier run with the same plan",
    "shipped": "Models shipped with the project for this plan ({command} makes them), copied",
}


def _turn_limits(config: TrainerConfig) -> str:
    """The episodes' turn limit, and the training episodes' own where `rollout.max_turns` sets one."""
    limit = config.rollout.max_turns
    own = f" ({limit} in training)" if limit is not None and limit != config.env.max_turns else ""
    return f"{config.env.max_turns} turns{own}"


def _sft_lines(models: QuickstartModels, plan: ModelPlan) -> str:
    command = f"`trainer make-models --ladder {plan.ladder}`" if plan.ladder else "`trainer make-models --quickstart`"
    lines = [f"* {ORIGINS[models.origin].format(command=command)}: student {models.student}, teacher {models.teacher}."]
    for role, result in models.sft.items():
        lines.append(
            f"* {role.capitalize()} SFT on expert turns ({result['steps']:.0f} steps, {result['seconds']:.0f} s): "
            f"loss {result['first_loss']:.3f} -> {result['last_loss']:.3f}; held-out per-turn exact match "
            f"{result['exact_match_before']:.2f} -> {result['exact_match_after']:.2f}."
        )
    return "\n".join(lines)


def _averaged(config: TrainerConfig) -> str:
    """How the trained student's weights were read: the moving average of the steps' weights when there is one."""
    decay = config.optim.ema_decay
    return f" (the weights' moving average, decay {decay:g})" if decay else ""


def write_report(out: Path, run: QuickstartRun) -> Path:
    """Write `<out>/report.md` and return its path."""
    config, plan = run.config, run.plan
    check = check_learning(run.before.task_success, run.after.task_success, run.teacher.task_success)
    splits = list(run.after.per_split)
    rows = "\n".join(
        f"| {name} | {r.success_rate:.2f} | "
        + "".join(f"{r.per_split[split]['success_rate']:.2f} | " for split in splits)
        + f"{r.mean_turns:.1f} | {r.invalid_turn_ratio:.2f} |"
        for name, r in (
            ("student before training", run.before),
            (f"student after {run.steps} {config.objective.name} steps{_averaged(config)}", run.after),
            ("teacher", run.teacher),
        )
    )
    split_columns = "".join(f" {split} |" for split in splits)
    mean = " (mean of the splits)" if splits else ""
    rollout = config.rollout
    load = ", ".join(f"{v:.1f}" for v in run.load_start) + " -> " + ", ".join(f"{v:.1f}" for v in run.load_end)
    timings = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in run.seconds.items())
    text = f"""# envhub trainer quickstart (`--model {plan.name}`)

Environment **{config.env.name}** (a local server started by the command); objective **{config.objective.name}**,
{run.steps} learner steps of {rollout.tasks_per_step} tasks x G = {rollout.group_size}, lr {config.optim.lr:g},
training seed {config.seed}, max {_turn_limits(config)}, prompt style `{config.prompt.style}`;
config `{plan.config}`.

{_sft_lines(run.models, run.plan)}
* Wall time per phase: {timings} (load average 1/5/15 min {load}).

Held-out evaluation ({run.after.split.replace("+", " + ")}, {run.after.tasks} tasks x {plan.eval_samples} episodes,
temperature {config.eval.temperature}, the same environment seeds for every policy):

| policy | success rate{mean} |{split_columns} mean turns | invalid turns |
|---|---|{"---|" * len(splits)}---|---|
{rows}

{learning_lines(check, kl_trend(run.train_dir))}

Diagnostics per step: `train/metrics.jsonl` and TensorBoard (`train/tensorboard`); sample episodes of each
evaluation: `eval/*.html`.

![training](train/training.png)

```json
{json.dumps({"before": asdict(run.before), "teacher": asdict(run.teacher), "after": asdict(run.after)}, indent=2)}
```
"""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.md"
    path.write_text(text)
    (out / "learning.json").write_text(
        json.dumps(
            {**asdict(check), "met": check.met, "beyond_noise": check.beyond_noise, "gap_closed": check.gap_closed},
            indent=2,
        )
        + "\n"
    )
    return path
