"""`trainer compare`: several objectives and ablations under one budget, one report."""

from __future__ import annotations

from pathlib import Path

from trainer.compare.report import write_report
from trainer.compare.run import run_compare
from trainer.compare.spec import CompareSpec, load_spec

__all__ = ["CompareSpec", "compare", "load_spec"]


def compare(
    name: str, out_dir: str | Path, models_dir: str | Path, *, quick: bool = False, seeds: int | None = None
) -> Path:
    """Run the comparison `name` (`--quick` size when asked) and write its report; returns report.md."""
    spec = load_spec(name).sized(quick, seeds)
    baselines, runs = run_compare(spec, out_dir, models_dir)
    report = write_report(spec, baselines, runs, Path(out_dir), quick)
    print(f"compare report: {report}")
    return report
