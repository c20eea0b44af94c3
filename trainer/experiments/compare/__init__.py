"""`trainer compare`: several objectives and ablations under one budget, one report."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from trainer.config import ConfigError
from trainer.experiments.compare.report import write_report
from trainer.experiments.compare.run import run_compare
from trainer.experiments.compare.spec import SIZE_FIELDS, CompareSpec, load_spec
from trainer.experiments.compare.suite import suite_members, write_summary

__all__ = ["CompareSpec", "compare", "load_spec"]


def compare(
    name: str,
    out_dir: str | Path,
    models_dir: str | Path | None = None,
    *,
    quick: bool = False,
    sizes: Mapping[str, int] | None = None,
    arms: Sequence[str] = (),
    report_only: bool = False,
    earlier: str | Path | None = None,
) -> Path:
    """Run the comparison `name` (`--quick` size when asked; `sizes` and `arms` narrow it; models from `models_dir`,
    default the config's `models`) and write its report (`earlier`, with `report_only`: an earlier report's
    runs.json whose runs join those finished in `out_dir`, `run.earlier_runs`). A suite runs each of its comparisons
    into `out_dir/<name>` (each on its own models) and writes the summary across them."""
    if earlier is not None and not report_only:
        raise ConfigError("--earlier joins an earlier report's runs to a report: it needs --report-only")
    members = suite_members(name)
    if members:
        if earlier is not None:
            raise ConfigError("--earlier names one comparison's runs.json: report a suite's members one by one")
        if models_dir is not None:
            raise ConfigError("a suite uses each comparison's own models (`models:` in its config); drop --models")
        for member in members:
            compare(member, Path(out_dir) / member, quick=quick, sizes=sizes, arms=arms, report_only=report_only)
        summary = write_summary(Path(name).stem, members, Path(out_dir))
        print(f"compare suite report: {summary}")
        return summary
    shipped = load_spec(name)
    spec = shipped.sized(quick, sizes, arms)
    label = "`--quick` size" if quick else "default size"
    standard = shipped.sized(quick)
    changed = [f"{f}={getattr(spec, f)}" for f in SIZE_FIELDS if getattr(spec, f) != getattr(standard, f)]
    if len(spec.arms) != len(shipped.arms):
        changed.append(f"{len(spec.arms)} of {len(shipped.arms)} arms")
    if changed:
        label += f", NARROWED: {', '.join(changed)}"
    record = None if earlier is None else Path(earlier)
    measured = run_compare(spec, out_dir, models_dir or spec.models, report_only, record)
    if len(measured.runs) < spec.seeds * len(spec.arms):
        total = spec.seeds * len(spec.arms)
        label += f"; {len(measured.runs)} of {total} arm x seed runs had finished, the rest did not run"
    if measured.earlier:
        label += f"; {len(measured.earlier)} runs as {record} records them (their folders are not here)"
    report = write_report(spec, measured, Path(out_dir), label)
    print(f"compare report: {report}")
    return report
