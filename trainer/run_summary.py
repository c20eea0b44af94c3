"""A run's held-out summary as the DivOPD paper reports it (Table 1 / Table 7 / Table 15), from its metrics.jsonl.

* Peak, Final-5 (mean ± sd of the last five evaluations) and nAUC over the run (`trainer.curves`);
* with `divopd.audit_every`, the gradient audit's means over the audited updates (Tables 10 and 13);
* with a target success tau: the cost at the first evaluation reaching tau in learner updates, trained tokens
  (`learner/supervised_tokens`, cumulative) and learner seconds (`learner/step_s`, cumulative; the paper's
  trainer GPU time on CPU), and against a baseline run the speedups C_baseline(tau) / C_run(tau) (the paper's
  Tok. and GPU columns; None where either run never reached tau, the paper's dash).

`train()` writes `summary.json` next to metrics.jsonl (target `eval.target_success`);
`trainer summary RUN... [--target T] [--baseline RUN]` prints the table for finished runs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainer import curves
from trainer.batching.divopd_stats import AUDITED
from trainer.metrics import JSONL, read_metrics

SUMMARY = "summary.json"
COSTS: dict[str, str] = {"updates": "", "trained_tokens": "learner/supervised_tokens", "learner_s": "learner/step_s"}
"""Cost name -> the per-step metric whose running sum it is (updates: the step itself)."""


def held_out_curve(records: Sequence[dict[str, Any]]) -> dict[str, list[float]]:
    """Evaluated steps, their held-out success and each cost's running total at them, in step order."""
    totals = dict.fromkeys(COSTS, 0.0)
    curve: dict[str, list[float]] = {"steps": [], "success": [], **{name: [] for name in COSTS}}
    for record in sorted(records, key=lambda r: r["step"]):
        for name, key in COSTS.items():
            if key and record.get(key) is not None:
                totals[name] += float(record[key])
        totals["updates"] = float(record["step"])
        if record.get("eval/success_rate") is None:
            continue
        curve["steps"].append(float(record["step"]))
        curve["success"].append(float(record["eval/success_rate"]))
        for name in COSTS:
            curve[name].append(totals[name])
    return curve


def summarize(records: Sequence[dict[str, Any]], target: float | None = None) -> dict[str, Any]:
    """Peak, Final-5, nAUC and (with `target`) the costs to reach it; None values where there is nothing yet."""
    curve = held_out_curve(records)
    steps, success = [int(s) for s in curve["steps"]], curve["success"]
    final = curves.final_n(steps, success)
    summary: dict[str, Any] = {
        "evaluations": len(steps),
        "last_step": steps[-1] if steps else None,
        "peak": curves.peak(steps, success),
        "final5_mean": final[0] if final else None,
        "final5_sd": final[1] if final else None,
        "nauc": curves.nauc(steps, success),
        "target": target,
    }
    # Tables 10 and 13: each gradient-audit measure's mean over the audited updates (`divopd.audit_every`)
    audited = {key: [float(r[key]) for r in records if r.get(key) is not None] for key in AUDITED}
    summary["audit"] = {key: sum(v) / len(v) for key, v in audited.items() if v}
    if target is not None:
        for name in COSTS:
            summary[f"{name}_to_target"] = curves.cost_to_target(steps, success, curve[name], target)
    return summary


def speedups(run: dict[str, Any], baseline: dict[str, Any]) -> dict[str, float | None]:
    """C_baseline(tau) / C_run(tau) per cost (both summaries made with the same target)."""
    if run.get("target") is None or run.get("target") != baseline.get("target"):
        raise ValueError("speedups need two summaries made with the same target success")
    return {
        f"{name}_speedup": curves.speedup(baseline.get(f"{name}_to_target"), run.get(f"{name}_to_target"))
        for name in COSTS
    }


def write_summary(out_dir: str | Path, target: float | None = None) -> Path:
    """`summary.json` of the run in `out_dir` (from its metrics.jsonl)."""
    out = Path(out_dir)
    path = out / SUMMARY
    path.write_text(json.dumps(summarize(read_metrics(out / JSONL), target), indent=2) + "\n")
    return path


def _cell(value: Any, form: str) -> str:
    return "-" if value is None else format(value, form)


def summary_table(runs: Sequence[str | Path], target: float | None, baseline: str | Path | None = None) -> str:
    """Markdown: one row per run folder (Peak, Final-5, nAUC, costs to target, speedups against `baseline`)."""
    base = summarize(read_metrics(Path(baseline) / JSONL), target) if baseline and target is not None else None
    head = "| run | evals | Peak | Final-5 | nAUC |"
    rule = "|---|---|---|---|---|"
    if target is not None:
        head += f" updates to {target:g} | trained tokens to {target:g} | learner s to {target:g} |"
        rule += "---|---|---|"
        if base is not None:
            head += " Tok. speedup | learner-time speedup |"
            rule += "---|---|"
    lines = [head, rule]
    for run in runs:
        s = summarize(read_metrics(Path(run) / JSONL), target)
        final = "-" if s["final5_mean"] is None else f"{s['final5_mean']:.3f} ± {s['final5_sd']:.3f}"
        row = f"| {run} | {s['evaluations']} | {_cell(s['peak'], '.3f')} | {final} | {_cell(s['nauc'], '.3f')} |"
        if target is not None:
            row += " " + " | ".join(_cell(s[f"{n}_to_target"], ",.0f") for n in COSTS) + " |"
            if base is not None:
                up = speedups(s, base)
                row += f" {_cell(up['trained_tokens_speedup'], '.2f')} | {_cell(up['learner_s_speedup'], '.2f')} |"
        lines.append(row)
    return "\n".join(lines)
