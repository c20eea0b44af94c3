"""report.md and the curves of a comparison: held-out success vs learner steps and vs student tokens."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy

from trainer import curves
from trainer.config import load_config
from trainer.experiments.compare.lr_search import search_table
from trainer.experiments.compare.run import ArmRun, Measured
from trainer.experiments.compare.spec import CompareSpec
from trainer.metrics import JSONL, read_metrics
from trainer.run_summary import COSTS, speedups, summarize

HEADER = (
    "| arm | seeds | held-out success (mean ± sd over seeds) | mean turns | student tokens generated "
    "| teacher tokens scored | wall s per run | paper (orientation only) |\n|---|---|---|---|---|---|---|---|"
)


def _teacher_tokens(runs: Sequence[ArmRun]) -> str:
    scored = [r.teacher_tokens for r in runs if r.teacher_tokens is not None]
    return f"{statistics.fmean(scored):,.0f}" if scored else "not logged (async driver)"


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.pstdev(values) if len(values) > 1 else 0.0


X_LABELS = {
    "steps": "learner steps",
    "student_tokens": "student tokens generated (training rollouts)",
    "teacher_token_curve": "teacher tokens scored",
}
"""`plot_curves`' x axes: an `ArmRun` field -> its label."""


def plot_curves(runs: Sequence[ArmRun], arms: Sequence[str], x: str, path: Path) -> Path:
    """Mean held-out success per arm (band: min-max over seeds) against `steps`, `student_tokens` or
    `teacher_token_curve` (arms without one left out)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in arms:
        mine = [r for r in runs if r.arm == name and getattr(r, x)]
        if not mine:
            continue
        points = list(zip(*(getattr(r, x) for r in mine), strict=True))
        ys = list(zip(*(r.success for r in mine), strict=True))
        xs = [statistics.fmean(p) for p in points]
        ax.plot(xs, [statistics.fmean(y) for y in ys], marker="o", label=name)
        ax.fill_between(xs, [min(y) for y in ys], [max(y) for y in ys], alpha=0.15)
    ax.set_xlabel(X_LABELS[x])
    ax.set_ylabel("held-out success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def mean_curve(runs: Sequence[ArmRun]) -> tuple[list[int], list[float]]:
    """The steps and the seed-mean held-out success of one arm's runs (they share their evaluated steps)."""
    return runs[0].steps, [statistics.fmean(values) for values in zip(*(r.success for r in runs), strict=True)]


def flat_from(spec: CompareSpec, runs: Sequence[ArmRun]) -> int | None:
    """Where an arm's seed-mean curve flattens (`curves.saturation_step`, tolerance one held-out task)."""
    return curves.saturation_step(*mean_curve(runs), 1 / spec.eval_tasks) if runs else None


def _after(step: int | None) -> Any:
    """A run's mean held-out success over its evaluations from `step` on (its last one when None)."""

    def measure(run: ArmRun) -> float:
        start = run.steps[-1] if step is None else step
        return statistics.fmean(v for s, v in zip(run.steps, run.success, strict=True) if s >= start)

    return measure


def _claims(spec: CompareSpec, runs: Sequence[ArmRun]) -> str:
    """Each paper claim `a > b` of the config checked on the final held-out success, on the mean over the curve
    (early and late) and on the mean over the evaluations after b's curve flattened, with the seed spread: the
    verdict says whether the gap exceeds the spread."""
    rows = []
    arms = {a.name for a in spec.arms}
    for claim in spec.claims:
        a, b = claim["better"], claim["worse"]
        seeds = min(sum(r.arm == name for r in runs) for name in (a, b))
        if a not in arms or b not in arms or not seeds:
            continue
        cells = []
        flat = flat_from(spec, [r for r in runs if r.arm == b])
        for measure in (lambda r: r.success[-1], lambda r: statistics.fmean(r.success[1:]), _after(flat)):
            (ma, sa), (mb, sb) = (_mean_sd([measure(r) for r in runs if r.arm == name]) for name in (a, b))
            spread = (sa**2 + sb**2) ** 0.5
            if seeds < 2:
                verdict = "a > b on one seed (no spread)" if ma > mb else "does NOT hold (one seed)"
            else:
                resolved = ma - mb > max(spread, 1 / spec.eval_tasks)  # and more than one held-out task
                verdict = "holds" if resolved else "same sign, within spread" if ma > mb else "does NOT hold"
            cells.append(f"{ma:.2f} vs {mb:.2f} ({ma - mb:+.2f}, spread {spread:.2f}): {verdict}")
        rows.append(f"| {claim['text']} | {cells[0]} | {cells[1]} | from step {flat}: {cells[2]} |")
    if not rows:
        return ""
    return (
        "| paper's claim (a > b) | final held-out success, a vs b | mean over the evaluated steps, a vs b "
        "| mean over the evaluations after b's curve flattened, a vs b |\n|---|---|---|---|\n" + "\n".join(rows)
    )


def _pm(values: Sequence[float]) -> str:
    mean, sd = _mean_sd(values)
    return f"{mean:.2f} ± {sd:.2f}"


def curve_table(spec: CompareSpec, runs: Sequence[ArmRun]) -> str:
    """Per arm, mean ± sd over seeds of the DivOPD paper's curve summaries (`trainer.curves`: Peak, Final-5,
    nAUC over the run) and where the seed-mean curve flattens."""
    lines = [
        f"| arm | seeds | Peak | Final-5 (mean of the last 5 evaluations) | nAUC@{spec.steps} | flattens at step |",
        "|---|---|---|---|---|---|",
    ]
    for arm in (a.name for a in spec.arms):
        mine = [r for r in runs if r.arm == arm]
        if not mine:
            continue
        peaks = [curves.peak(r.steps, r.success) or 0.0 for r in mine]
        finals = [(curves.final_n(r.steps, r.success) or (0.0, 0.0))[0] for r in mine]
        areas = [curves.nauc(r.steps, r.success, spec.steps) or 0.0 for r in mine]
        lines.append(f"| {arm} | {len(mine)} | {_pm(peaks)} | {_pm(finals)} | {_pm(areas)} | {flat_from(spec, mine)} |")
    return "\n".join(lines)


def cost_table(spec: CompareSpec, runs: Sequence[ArmRun], out: Path) -> str:
    """DivOPD Table 1's costs to `spec.target` from each run's metrics (`trainer.run_summary`): per arm the seeds
    that reached it and, over those, the mean updates, trained tokens and learner seconds to it; against
    `spec.baseline_arm` the geometric mean over the seeds both reached it of C_baseline / C_arm ("" without a
    target)."""
    if spec.target is None:
        return ""
    metrics = {(r.arm, r.seed): out / "runs" / r.arm / f"seed{r.seed}" / JSONL for r in runs}
    costs = {key: summarize(read_metrics(path), spec.target) for key, path in metrics.items() if path.is_file()}
    missing = [f"{arm} seed {seed}" for (arm, seed), path in metrics.items() if not path.is_file()]
    tau = f"{spec.target:g}"
    head = f"| arm | seeds reaching {tau} | updates to {tau} | trained tokens to {tau} | learner s to {tau} |"
    if spec.baseline_arm:
        head += f" trained-token speed-up vs {spec.baseline_arm} | learner-time speed-up |"
    lines = [head, "|---" * head.count(" |") + "|"]
    for arm in (a.name for a in spec.arms):
        seeds = sorted(seed for name, seed in costs if name == arm)
        if not seeds:
            continue
        reached = [costs[arm, seed] for seed in seeds if costs[arm, seed]["trained_tokens_to_target"] is not None]
        cells = [
            "-" if not reached else f"{statistics.fmean(c[f'{name}_to_target'] for c in reached):,.0f}"
            for name in COSTS
        ]
        row = f"| {arm} | {len(reached)} of {len(seeds)} | " + " | ".join(cells) + " |"
        if spec.baseline_arm:
            ups = [
                speedups(costs[arm, s], costs[spec.baseline_arm, s]) for s in seeds if (spec.baseline_arm, s) in costs
            ]
            for name in ("trained_tokens", "learner_s"):
                ratios = [ratio for u in ups if (ratio := u[f"{name}_speedup"]) is not None]
                row += " - |" if not ratios else f" {statistics.geometric_mean(ratios):.2f}x ({len(ratios)} seeds) |"
        lines.append(row)
    absent = f"\n\nNot in it (their metrics are not here): {', '.join(missing)}." if missing else ""
    return (
        f"Cost to a held-out success of {tau} (DivOPD Table 1; costs at the first evaluation reaching it, mean over "
        "the seeds that did; speed-ups C_baseline / C_arm per seed, their geometric mean):\n\n"
        + "\n".join(lines)
        + absent
    )


def teacher_scored(runs: Sequence[ArmRun], arms: Sequence[str]) -> dict[str, tuple[list[float], list[float]]]:
    """Per arm whose every run scored teacher tokens: the seed-mean cumulative teacher tokens and held-out success at
    its evaluated steps."""
    found = {}
    for name in arms:
        mine = [r for r in runs if r.arm == name]
        if mine and all(r.teacher_token_curve and r.teacher_token_curve[-1] > 0 for r in mine):
            tokens = [statistics.fmean(p) for p in zip(*(r.teacher_token_curve for r in mine), strict=True)]
            found[name] = (tokens, mean_curve(mine)[1])
    return found


def equal_teacher_tokens(runs: Sequence[ArmRun], arms: Sequence[str]) -> str:
    """Each teacher-scored arm's seed-mean held-out success at the teacher-token budget every such arm reached (the
    smallest seed-mean total), linear between evaluations (BranchOPD: success at equal teacher tokens); "" with
    fewer than two such arms."""
    found = teacher_scored(runs, arms)
    if len(found) < 2:
        return ""
    budget = min(tokens[-1] for tokens, _ in found.values())
    rows = [
        f"| {name} | {tokens[-1]:,.0f} | {float(numpy.interp(budget, tokens, success)):.2f} |"
        for name, (tokens, success) in found.items()
    ]
    return (
        f"Held-out success at equal teacher tokens ({budget:,.0f}: the smallest arm's total; seed means, linear "
        "between evaluations), and the success-vs-teacher-tokens plot:\n\n| arm | teacher tokens over the run | "
        f"held-out success at {budget:,.0f} teacher tokens |\n|---|---|---|\n"
        + "\n".join(rows)
        + "\n\n![held-out success vs teacher tokens](success-vs-teacher-tokens.png)"
    )


def _lr_sentence(spec: CompareSpec, measured: Measured) -> str:
    if not spec.lr_values:
        return (
            f"one learning rate\n(optim.lr = {spec.lr}; learning-rate search budget per arm: "
            f"{spec.lr_search_budget} value, no arm tuned more)"
        )
    chosen = ", ".join(f"{r.arm} {r.chosen:g}" for r in measured.search)
    values = ", ".join(f"{lr:g}" for lr in spec.lr_values)
    return (
        f"each arm's learning rate chosen by the same search (budget {spec.lr_search_budget} values per arm: "
        f"{values}; see below): {chosen}"
    )


def _search_section(spec: CompareSpec, measured: Measured) -> str:
    if not spec.lr_values:
        return ""
    split = spec.search_split or "the eval split"
    seeds = f"{spec.search_seeds} seed{'s' if spec.search_seeds > 1 else ''}"
    tasks = spec.search_tasks or spec.eval_tasks
    start = measured.search_baselines
    starts = (
        f" Teacher / student on these tasks: {start.teacher.success_rate:.2f} / {start.student.success_rate:.2f}."
        if start
        else ""
    )
    return f"""
## Learning-rate search (every arm the same: {spec.lr_search_budget} values, {spec.search_steps} steps, {seeds})

Each arm trained {spec.search_steps} learner steps at each learning rate (its long-run config otherwise, with the
same schedules, e.g. ATOD's annealing, as its long runs) and was evaluated every {spec.search_eval_every} steps on
the first {tasks} tasks of {split} (not the reported held-out tasks unless that is the eval split).{starts} Score: mean
held-out success over the search run's evaluations (its start excluded), mean over seeds; the best score's learning
rate (ties: the smaller) is the arm's learning rate in the runs above.

{search_table(measured.search)}
"""


def _sft_line(name: str, info: dict[str, Any]) -> str:
    key, result = info["key"], info["result"]
    return (
        f"{name}: {key['steps']} SFT steps on {key['examples']} expert turns, held-out per-turn exact match "
        f"{result['exact_match_after']:.2f}"
    )


def _episodes(samples: int) -> str:
    return "one episode" if samples == 1 else f"{samples} episodes"


def _rung(role: str, rung: dict[str, Any]) -> str:
    """A ladder rung's model: its tiny shape, or its pretrained base (a record from before `base` is tiny)."""
    if rung.get("base", "tiny") == "tiny":
        return f"{role} {rung['hidden']} x {rung['layers']}"
    return f"{role} {rung['base']} SFT'd {rung['sft_steps']} steps"


def _models_line(models: dict[str, Any]) -> str:
    """Where the starting models came from: the SFT runs that made them, or their model ladder."""
    if "ladder" in models:
        spec = models["record"]["spec"]
        return (
            f"Models: the {models['ladder']} model ladder's (`trainer make-models --ladder {models['ladder']}`, "
            f"from {models['folder']}): {'; '.join(_rung(role, spec[role]) for role in ('teacher', 'student'))}"
            f"{' (hidden x layers)' if spec['teacher'].get('base', 'tiny') == 'tiny' else ''}."
        )
    made = "reused from the models folder" if models["reused"] else "made by this run"
    teacher, student = _sft_line("teacher", models["teacher-sft"]), _sft_line("student", models["student-warm"])
    return f"Models ({made}): {teacher}; {student}."


MODEL_SIZES = {"tiny": "~100k-parameter models", "smollm2": "SmolLM2-135M models (135M parameters)"}
"""The compared models' size by their ladder's base, for the report's caveat."""


def _model_size(models: dict[str, Any]) -> str:
    """What the compared models are: a model ladder's base (`MODEL_SIZES`), else the tiny SFT models."""
    base = models["record"]["spec"]["student"].get("base", "tiny") if "ladder" in models else "tiny"
    return MODEL_SIZES[base]


def _held_out_tasks(spec: CompareSpec) -> str:
    """Which held-out tasks the arms evaluate: the eval split's first `eval_tasks`, or with `eval.families_in_turn`
    that many taken in turn from the named families."""
    families = load_config(spec.base, spec.arm_overrides(spec.arms[0], 0)).eval.families_in_turn
    if not families:
        return f"each of the first {spec.eval_tasks} tasks of the eval split"
    return (
        f"each of {spec.eval_tasks} tasks of the eval split taken in turn from its families "
        f"{', '.join(families)} (the first of each, then the second, ...)"
    )


def write_report(spec: CompareSpec, measured: Measured, out: Path, size: str) -> Path:
    """`out/report.md` with the table, the curve summaries, the paper claims checked, the learning-rate search,
    the two plots and the paper's numbers."""
    baselines, runs, machine = measured.baselines, measured.runs, measured.machine
    arms = [a.name for a in spec.arms]
    plot_curves(runs, arms, "steps", out / "success-vs-steps.png")
    plot_curves(runs, arms, "student_tokens", out / "success-vs-tokens.png")
    if len(teacher_scored(runs, arms)) >= 2:
        plot_curves(runs, arms, "teacher_token_curve", out / "success-vs-teacher-tokens.png")
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
    ran = {name: [r.seed for r in runs if r.arm == name] for name in arms}
    first_seed = {name: min(seeds) for name, seeds in ran.items() if seeds}  # an arm that did not run has no episodes
    links = ", ".join(
        f"[{name}{'' if seed == 0 else f', seed {seed}'}](runs/{name}/seed{seed}/episodes/step_{spec.steps:06d}.html)"
        for name, seed in first_seed.items()
    )
    load = ", ".join(f"{x:.1f}" for x in machine["load_start"])
    minutes = machine["wall_s"] / 60
    load_end = ", ".join(f"{x:.1f}" for x in machine["load_end"])
    seeds = f"{spec.seed_range.start}..{spec.seed_range.stop - 1}"
    text = f"""# Comparison `{spec.name}` ({size})

Every arm: the same starting student and teacher (`{spec.base}`; the models below), environment
**{spec.env}** on one local server, the same training tasks, {spec.seeds} seeds ({seeds}: task order and
sampling), {spec.steps} learner steps and {_lr_sentence(spec, measured)}.
Rollout budget: {spec.budget}
Held-out: {_episodes(s.samples)} on {_held_out_tasks(spec)}
every {spec.eval_every} steps, temperature 0.4, fixed seeds.

{_models_line(baselines.models)}
Starting points (seed 0): **teacher {t.success_rate:.2f}** held-out success ({t.mean_turns:.1f} turns),
**student {s.success_rate:.2f}** ({s.mean_turns:.1f} turns): the teacher is {gap} the student.

Wall time of {machine.get("wall_of", "the whole comparison")}: {minutes:.1f} min on {machine["cpus"]} CPUs
(load average 1/5/15 min at the start {load}; at the end {load_end}; the machine may have been shared).

{HEADER}
{chr(10).join(rows)}

Curve summaries (DivOPD Table 1/2/7's measures, mean ± sd over seeds; "flattens at": the first evaluated step whose
mean over it and the two evaluations before reaches the seed-mean curve's Final-5 minus one held-out task):

{curve_table(spec, runs)}

{cost_table(spec, runs, out)}

{equal_teacher_tokens(runs, arms)}

Paper claims at this scale (mean ± sd over seeds; "holds" only where the gap exceeds both the combined seed sd
("spread") and one held-out task (1/{spec.eval_tasks})):

{_claims(spec, runs)}

Paper column: {spec.paper.get("source", "none")}. Those are billion-parameter students after
hundreds of steps on GPUs; ours are {_model_size(baselines.models)} after {spec.steps} CPU steps, so only the
ordering could be compared, and at this size the spread over seeds is of the order of the differences:
read the table as what these runs measured, not as a verdict on the paper.

![held-out success vs learner steps](success-vs-steps.png)

![held-out success vs student tokens](success-vs-tokens.png)

Sample episodes (HTML; task, prompt tails, responses, actions, observations, rewards, teacher-student
gap shaded per token): [student at the start](episodes-student.html), [teacher](episodes-teacher.html),
and after training (seed 0, or an arm's lowest seed that ran where named): {links}.

Per-run curves: `runs.json`; each run's metrics: `runs/<arm>/seed<k>/metrics.jsonl`.
{_search_section(spec, measured)}"""
    path = out / "report.md"
    path.write_text(text)
    return path
