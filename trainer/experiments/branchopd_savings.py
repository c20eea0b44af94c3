"""Measure BranchOPD's student-token saving against independent rollouts (rollouts only, no learning).

    python -m trainer.experiments.branchopd_savings --config branchopd-tiny.yaml --steps 4 --out docs/results

For the same tasks (same env seeds) it plays (a) BranchOPD: one main trajectory per task plus k
continuations from each of its forks, and (b) independent rollouts: G = 1 + B*k trajectories per
task. It reports the student tokens of (a), the paper's estimate of (b) (each task's main
trajectory tokens times its trajectory count, as the paper computes 19.1% / 31.2%) and the tokens (b)
actually generated, with their savings; results go to `<out>/branchopd-savings-<env>[-<label>].{json,md}`
(`--label warm` for a second student's report beside the first).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainer.branching import diagnostics as names
from trainer.branching.plugin import fork_config
from trainer.branching.step import branch_rollout
from trainer.config import TrainerConfig, load_config
from trainer.rollout import SamplingSettings
from trainer.runs import TaskSampler, env_targets, training_tasks
from trainer.workers import WorkerGroup

PAPER_SAVING = {"alfworld": 0.191, "webshop": 0.312}
"""Paper 002 Table 11: saving against seven independent rollouts."""


def _sampling(config: TrainerConfig, step: int) -> SamplingSettings:
    return SamplingSettings(
        max_new_tokens=config.rollout.max_new_tokens,
        temperature=config.rollout.temperature,
        top_p=config.rollout.top_p,
        top_logprobs=config.rollout.top_logprobs,
        seed=config.seed * 1_000_003 + step * 1009,
    )


def measure(config: TrainerConfig, steps: int) -> dict[str, Any]:
    """Token counts of `steps` rollout steps under both schemes on the same tasks."""
    fork = fork_config(config)
    group_size = 1 + fork.num_forks * fork.continuations
    independent_config = config.model_copy(
        update={"rollout": config.rollout.model_copy(update={"strategy": "group", "group_size": group_size})}
    )
    records: list[dict[str, float]] = []
    with env_targets(config) as targets:
        branching = WorkerGroup(config, targets)
        try:
            tasks = TaskSampler(training_tasks(config.env, branching), config.seed)
            plan = [tasks.sample(config.rollout.tasks_per_step) for _ in range(steps)]
            for step, step_tasks in enumerate(plan):
                mains, _, metrics = branch_rollout(branching, step_tasks, _sampling(config, step), step)
                metrics["main/success_rate"] = sum(m.won for m in mains) / max(len(mains), 1)
                records.append(metrics)
        finally:
            branching.close()
        independent = WorkerGroup(independent_config, targets)
        try:
            for step, step_tasks in enumerate(plan):
                _, stats = independent.rollout(step_tasks, _sampling(config, step), group_size)
                records[step]["independent/measured_tokens"] = float(stats.generated_tokens)
        finally:
            independent.close()
    return summarise(config, records, steps, group_size)


def summarise(
    config: TrainerConfig, records: Sequence[dict[str, float]], steps: int, group_size: int
) -> dict[str, Any]:
    """Totals over the steps (savings are ratios of sums, not means of ratios)."""
    student = sum(r[names.STUDENT_TOKENS] for r in records)
    estimate = sum(r[names.INDEPENDENT_TOKENS] for r in records)
    measured = sum(r["independent/measured_tokens"] for r in records)
    tasks = steps * config.rollout.tasks_per_step
    main_tokens = sum(r["main/generated_tokens"] for r in records)

    def mean(key: str) -> float | None:
        values = [v for r in records if (v := r.get(key)) is not None and v == v]  # logged and not NaN
        return sum(values) / len(values) if values else None

    return {
        "environment": config.env.name,
        "student": config.models.student,
        "tasks": tasks,
        "independent_group_size": group_size,
        "forks_per_main": mean(names.FORKS),
        "main_tokens_per_task": main_tokens / tasks,
        "branch_student_tokens": student,
        "independent_tokens_estimate": estimate,
        "independent_tokens_measured": measured,
        "saving_vs_estimate": 1 - student / estimate if estimate else None,
        "saving_vs_measured": 1 - student / measured if measured else None,
        "paper_saving": PAPER_SAVING.get(config.env.name),
        "alt_mass": mean(names.ALT_MASS),
        "ebr": mean(names.EBR),
        "nsr": mean(names.NSR),
        "rescue_rate": mean(names.RESCUE_RATE),
        "harm_rate": mean(names.HARM_RATE),
        "main_success_rate": mean("main/success_rate"),
        "per_step": list(records),
    }


def write(result: dict[str, Any], out: str | Path, label: str = "") -> Path:
    """`branchopd-savings-<env>[-<label>].json` and `.md` under `out`; the markdown path."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / "-".join(["branchopd-savings", result["environment"], *([label] if label else [])])
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")

    def pct(value: float | None) -> str:
        return "n/a" if value is None else f"{100 * value:.1f}%"

    def num(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    lines = [
        f"# BranchOPD token saving on {result['environment']}",
        "",
        f"Student `{result['student']}`, {result['tasks']} tasks, B_eff = {num(result['forks_per_main'])} forks per "
        f"main trajectory, independent baseline G = {result['independent_group_size']} per task "
        "(`python -m trainer.experiments.branchopd_savings`).",
        "",
        *([f"    {result['command']}", ""] if result.get("command") else []),
        "| quantity | value |",
        "|---|---|",
        f"| student tokens per task, main trajectory | {result['main_tokens_per_task']:.1f} |",
        f"| student tokens, BranchOPD (mains + branches from the fork on) | {result['branch_student_tokens']:.0f} |",
        f"| independent rollouts, paper's estimate (main tokens x trajectories) | "
        f"{result['independent_tokens_estimate']:.0f} |",
        f"| independent rollouts, measured (G = {result['independent_group_size']}) | "
        f"{result['independent_tokens_measured']:.0f} |",
        f"| **saving vs estimate** | **{pct(result['saving_vs_estimate'])}** |",
        f"| saving vs measured | {pct(result['saving_vs_measured'])} |",
        f"| paper (Table 11) | {pct(result['paper_saving'])} |",
        f"| alt mass / EBR / NSR | {num(result['alt_mass'])} / {num(result['ebr'])} / {num(result['nsr'])} |",
        f"| rescue / harm rate | {num(result['rescue_rate'])} / {num(result['harm_rate'])} |",
        f"| main success rate | {num(result['main_success_rate'])} |",
        "",
    ]
    path = stem.with_suffix(".md")
    path.write_text("\n".join(lines))
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--config", default="branchopd-tiny.yaml")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--out", default="docs/results")
    parser.add_argument("--label", default="", help="suffix of the report's file name (e.g. warm)")
    args = parser.parse_args(argv)
    result = measure(load_config(args.config, args.set), args.steps)
    result["command"] = shlex.join(["python", "-m", "trainer.experiments.branchopd_savings", *(argv or sys.argv[1:])])
    print(write(result, args.out, args.label).read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
