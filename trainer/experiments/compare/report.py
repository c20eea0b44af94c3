"""report.md and the curves of a comparison: held-out success vs learner steps and vs student tokens."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainer.experiments.compare.run import ArmRun, Baselines
from trainer.experiments.compare.spec import CompareSpec

HEADER = (
    "| arm | seeds | held-out success (mean ± sd over seeds) | mean turns | student tokens generated "
    "| teacher tokens scored | wall s per run | paper (orientation only) |\n|---|---|---|---|---|---|---|---|"
)


def _teacher_tokens(runs: Sequence[ArmRun]) -> str:
    scored = [r.teacher_tokens for r in runs if r.teacher_tokens is not None]
    return f"{statistics.fmean(scored):,.0f}" if scored else "not logged (async driver)"


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.pstdev(values) if len(values) > 1 else 0.0


def plot_curves(runs: Sequence[ArmRun], arms: Sequence[str], x: str, path: Path) -> Path:
    """Mean held-out success per arm (band: min-max over seeds) against `steps` or `student_tokens`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in arms:
        mine = [r for r in runs if r.arm == name]
        if not mine:
            continue
        points = list(zip(*(getattr(r, x) for r in mine), strict=True))
        ys = list(zip(*(r.success for r in mine), strict=True))
        xs = [statistics.fmean(p) for p in points]
        ax.plot(xs, [statistics.fmean(y) for y in ys], marker="o", label=name)
        ax.fill_between(xs, [min(y) for y in ys], [max(y) for y in ys], alpha=0.15)
    ax.set_xlabel("learner steps" if x == "steps" else "student tokens generated (training rollouts)")
    ax.set_ylabel("held-out success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _claims(spec: CompareSpec, runs: Sequence[ArmRun]) -> str:
    """Each paper claim `a > b` of the config checked on the final held-out success and on the mean over the
    curve (early and late), with the seed spread: the verdict says whether the gap exceeds the spread."""
    rows = []
    arms = {a.name for a in spec.arms}
    for claim in spec.claims:
        a, b = claim["better"], claim["worse"]
        seeds = min(sum(r.arm == name for r in runs) for name in (a, b))
        if a not in arms or b not in arms or not seeds:
            continue
        cells = []
        for measure in (lambda r: r.success[-1], lambda r: statistics.fmean(r.success[1:])):
            (ma, sa), (mb, sb) = (_mean_sd([measure(r) for r in runs if r.arm == name]) for name in (a, b))
            spread = (sa**2 + sb**2) ** 0.5
            if seeds < 2:
                verdict = "a > b on one seed (no spread)" if ma > mb else "does NOT hold (one seed)"
            else:
                resolved = ma - mb > max(spread, 1 / spec.eval_tasks)  # and more than one held-out task
                verdict = "holds" if resolved else "same sign, within spread" if ma > mb else "does NOT hold"
            cells.append(f"{ma:.2f} vs {mb:.2f} ({ma - mb:+.2f}, spread {spread:.2f}): {verdict}")
        rows.append(f"| {claim['text']} | {cells[0]} | {cells[1]} |")
    if not rows:
        return ""
    return (
        "| paper's claim (a > b) | final held-out success, a vs b | mean over the evaluated steps, a vs b |\n"
        "|---|---|---|\n" + "\n".join(rows)
    )


def _sft_line(name: str, info: dict[str, Any]) -> str:
    key, result = info["key"], info["result"]
    return (
        f"{name}: {key['steps']} SFT steps on {key['examples']} expert turns, held-out per-turn exact match "
        f"{result['exact_match_after']:.2f}"
    )


def write_report(
    spec: CompareSpec, baselines: Baselines, runs: Sequence[ArmRun], machine: dict[str, Any], out: Path, size: str
) -> Path:
    """`out/report.md` with the table, the paper claims checked, the two plots and the paper's numbers."""
    arms = [a.name for a in spec.arms]
    plot_curves(runs, arms, "steps", out / "success-vs-steps.png")
    plot_curves(runs, arms, "student_tokens", out / "success-vs-tokens.png")
    rows = []
    for name in arms:
        mine = [r for r in runs if r.arm == name]
        if not mine:
            rows.append(f"| {name} | 0 | not run | | | | | |")
            continue
        sr, sr_sd = _mean_sd([r.success[-1] for r in mine])
        turns, turns_sd = _mean_sd([r.mean_turns[-1] for r in mine])
        paper = spec.paper.get("success", {}).get(name)
        rows.append(
            f"| {name} | {len(mine)} | {sr:.2f} ± {sr_sd:.2f} | {turns:.1f} ± {turns_sd:.1f} "
            f"| {statistics.fmean(r.student_tokens[-1] for r in mine):,.0f} "
            f"| {_teacher_tokens(mine)} "
            f"| {statistics.fmean(r.wall_s for r in mine):.0f} | {'' if paper is None else f'{paper:.2f} %'} |"
        )
    s, t = baselines.student, baselines.teacher
    gap = "clearly above" if t.success_rate >= s.success_rate + 0.1 else "NOT clearly above (comparison is weak)"
    links = ", ".join(f"[{name}](runs/{name}/seed0/episodes/step_{spec.steps:06d}.html)" for name in arms)
    models = baselines.models
    made = "reused from the models folder" if models["reused"] else "made by this run"
    load = ", ".join(f"{x:.1f}" for x in machine["load_start"])
    minutes = machine["wall_s"] / 60
    load_end = ", ".join(f"{x:.1f}" for x in machine["load_end"])
    text = f"""# Comparison `{spec.name}` ({size})

Every arm: the same warm-started student and SFT teacher (tiny models, `{spec.base}`), environment
**{spec.env}** on one local server, the same training tasks, {spec.seeds} seeds (0..{spec.seeds - 1}: task order and
sampling), {spec.steps} learner steps and one learning rate
(optim.lr = {spec.lr}; learning-rate search budget per arm: {spec.lr_search_budget} value, no arm tuned more).
Rollout budget: {spec.budget}
Held-out: one episode on each of the first {spec.eval_tasks} tasks of the eval split every {spec.eval_every} steps,
temperature 0.4, fixed seeds.

Models ({made}): {_sft_line("teacher", models["teacher-sft"])}; {_sft_line("student", models["student-warm"])}.
Starting points (seed 0): **teacher {t.success_rate:.2f}** held-out success ({t.mean_turns:.1f} turns),
**student {s.success_rate:.2f}** ({s.mean_turns:.1f} turns): the teacher is {gap} the student.

Wall time of {machine.get("wall_of", "the whole comparison")}: {minutes:.1f} min on {machine["cpus"]} CPUs
(load average 1/5/15 min at the start {load}; at the end {load_end}; the machine may have been shared).

{HEADER}
{chr(10).join(rows)}

Paper claims at this scale (mean ± sd over seeds; "holds" only where the gap exceeds both the combined seed sd
("spread") and one held-out task (1/{spec.eval_tasks})):

{_claims(spec, runs)}

Paper column: {spec.paper.get("source", "none")}. Those are billion-parameter students after
hundreds of steps on GPUs; ours are ~100k-parameter models after {spec.steps} CPU steps, so only the
ordering could be compared, and at this size the spread over seeds is of the order of the differences:
read the table as what these runs measured, not as a verdict on the paper.

![held-out success vs learner steps](success-vs-steps.png)

![held-out success vs student tokens](success-vs-tokens.png)

Sample episodes (HTML; task, prompt tails, responses, actions, observations, rewards, teacher-student
gap shaded per token): [student at the start](episodes-student.html), [teacher](episodes-teacher.html),
and after training (seed 0): {links}.

Per-run curves: `runs.json`; each run's metrics: `runs/<arm>/seed<k>/metrics.jsonl`.
"""
    path = out / "report.md"
    path.write_text(text)
    return path
