"""Comparison suites (`suite: [names]` in a comparison config): one comparison per environment, then one summary
table across them (the layout of ATOD's Table 1: arms x environments)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from trainer.experiments.compare.spec import find_config, load_spec


def suite_members(name: str | Path) -> tuple[str, ...]:
    """The comparisons a suite config runs, in order; () when `name` is a single comparison."""
    data = yaml.safe_load(find_config(name).read_text()) or {}
    return tuple(data.get("suite", ()))


def _cell(runs: list[dict[str, Any]]) -> str:
    finals = [r["success"][-1] for r in runs]
    sd = statistics.pstdev(finals) if len(finals) > 1 else 0.0
    return f"{statistics.fmean(finals):.2f} ± {sd:.2f}" if finals else "not run"


def write_summary(name: str, members: Sequence[str], out: Path) -> Path:
    """`out/report.md`: final held-out success (mean ± sd over seeds) per arm and environment from each member's
    `runs.json`, the starting teacher and student, the paper's number beside ours, and links to the reports."""
    specs = [load_spec(member) for member in members]
    records = [json.loads((out / member / "runs.json").read_text()) for member in members]
    arms = list(dict.fromkeys(a.name for spec in specs for a in spec.arms))
    head = " | ".join(f"{spec.env} (ours) | {spec.env} (paper %)" for spec in specs)
    lines = [f"| arm | {head} |", "|---" * (1 + 2 * len(specs)) + "|"]
    for start in ("teacher", "student"):
        starts = " | ".join(f"{rec['baselines'][start]['success_rate']:.2f} (start) | " for rec in records)
        lines.append(f"| {start} (SFT) | {starts} |")
    for arm in arms:
        cells = []
        for spec, record in zip(specs, records, strict=True):
            paper = spec.paper.get("success", {}).get(arm)
            cells += [_cell([r for r in record["runs"] if r["arm"] == arm]), "" if paper is None else f"{paper:.2f}"]
        lines.append(f"| {arm} | {' | '.join(cells)} |")
    minutes = sum(record["machine"]["wall_s"] for record in records) / 60
    links = ", ".join(f"[{spec.env}]({member}/report.md)" for spec, member in zip(specs, members, strict=True))
    text = f"""# Comparison suite `{name}`

Each environment's comparison ran on its own models, server and held-out tasks (reports: {links}); here the
final held-out success of every arm, mean ± sd over seeds, beside ATOD's Table 1 (Qwen3-0.6B student) for
orientation only: tiny CPU models after a few steps measure orderings at best, and each report says which
paper claims hold at this scale.

{chr(10).join(lines)}

Wall time: {minutes:.1f} min for the {len(members)} comparisons.
"""
    path = out / "report.md"
    path.write_text(text)
    return path
