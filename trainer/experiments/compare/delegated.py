"""`trainer compare --config divopd-stress | branchopd-savings`: comparisons that have their own runner module
(`python -m trainer.experiments.divopd_stress`, `python -m trainer.experiments.branchopd_savings`); compare only
maps its options."""

from __future__ import annotations

import importlib
from pathlib import Path

DELEGATED: dict[str, str] = {
    "divopd-stress": "trainer.experiments.divopd_stress",
    "branchopd-savings": "trainer.experiments.branchopd_savings",
}
"""Comparison name -> runner module (its `main(argv)` writes `<out>/<name>.{json,md}`)."""
QUICK_ARGS: dict[str, tuple[str, ...]] = {
    "divopd-stress": ("--steps", "4", "--loads", "low", "high"),
    "branchopd-savings": ("--steps", "1"),
}
"""`--quick`: fewer steps (and for the stress run only the low and high loads)."""


def delegated_argv(name: str, out_dir: str | Path, models_dir: str | Path | None, quick: bool) -> list[str]:
    """The runner's argv: results and runs under `out_dir`, models from `models_dir` when given."""
    argv = ["--out", str(out_dir)]
    if name == "divopd-stress":
        argv += ["--runs", str(Path(out_dir) / "runs")]
    if models_dir is not None:
        argv += ["--set", f"models.student={Path(models_dir) / 'student-warm'}"]
        argv += ["--set", f"models.teacher={Path(models_dir) / 'teacher-sft'}"]
    return argv + list(QUICK_ARGS[name] if quick else ())


def run_delegated(name: str, out_dir: str | Path, models_dir: str | Path | None, quick: bool) -> int:
    """Run the comparison `name` through its runner module; returns its exit status."""
    main = importlib.import_module(DELEGATED[name]).main
    status: int = main(delegated_argv(name, out_dir, models_dir, quick))
    return status


def is_delegated(name: str | Path) -> bool:
    """Whether `name` is one of the delegated comparisons."""
    return Path(name).stem in DELEGATED and not Path(name).is_file()
