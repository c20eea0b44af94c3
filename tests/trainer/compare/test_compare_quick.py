"""`trainer compare --config atod-ablation --quick` end to end: every arm trains, the report and plots exist."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.cli import main


@pytest.mark.slow
def test_quick_atod_ablation_writes_report(tmp_path: Path) -> None:
    pytest.importorskip("alfworld")
    out = tmp_path / "compare"
    argv = ["compare", "--config", "atod-ablation", "--quick", "--out", str(out), "--models", str(tmp_path / "m")]
    assert main(argv) == 0
    report = (out / "report.md").read_text()
    runs = json.loads((out / "runs.json").read_text())["runs"]
    arms = ["grpo", "opd", "opd-multi", "atod", "atod-tdur-none", "atod-tdur-token", "atod-anneal-off"]
    assert sorted({r["arm"] for r in runs}) == sorted(arms) and len(runs) == 2 * len(arms)
    for run in runs:
        assert run["steps"] == [0, 2] and run["student_tokens"][-1] > 0
        assert (run["teacher_tokens"] > 0) == (run["arm"] != "grpo")
    for arm in arms:
        assert f"| {arm} |" in report
        assert (out / "runs" / arm / "seed0" / "episodes" / "step_000002.html").is_file()
    assert "teacher" in report and "student" in report and "82.81" in report
    for png in ("success-vs-steps.png", "success-vs-tokens.png", "episodes-teacher.html", "episodes-student.html"):
        assert (out / png).stat().st_size > 1000
