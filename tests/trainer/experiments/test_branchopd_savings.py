"""The token-saving report (`python -m trainer.experiments.branchopd_savings`): arithmetic and files, on
hand-built records."""

from __future__ import annotations

import json
import math
from pathlib import Path

from trainer.branching import diagnostics as names
from trainer.config import load_config
from trainer.experiments.branchopd_savings import summarise, write


def _step(student: float, main: float, measured: float, ebr: float) -> dict[str, float]:
    return {
        names.STUDENT_TOKENS: student,
        names.INDEPENDENT_TOKENS: 7 * main,
        "main/generated_tokens": main,
        "independent/measured_tokens": measured,
        names.FORKS: 3.0,
        names.EBR: ebr,
        names.HARM_RATE: math.nan,
    }


def test_savings_are_ratios_of_sums_and_reports_are_named_per_environment_and_label(tmp_path: Path) -> None:
    config = load_config("branchopd-tiny.yaml", ["env.name=webshop", "env.families=[]", "rollout.tasks_per_step=2"])
    records = [_step(300, 100, 800, 0.5), _step(100, 50, 300, 0.0)]
    result = summarise(config, records, steps=2, group_size=7)
    assert result["environment"] == "webshop" and result["tasks"] == 4
    assert result["main_tokens_per_task"] == 150 / 4
    assert result["saving_vs_estimate"] == 1 - 400 / 1050  # not the mean of the two steps' savings
    assert result["saving_vs_measured"] == 1 - 400 / 1100
    assert result["paper_saving"] == 0.312
    assert result["ebr"] == 0.25 and result["harm_rate"] is None  # NaN steps are left out
    result["command"] = "python -m trainer.experiments.branchopd_savings --label warm"
    plain, labelled = write(result, tmp_path), write(result, tmp_path, "warm")
    assert plain.name == "branchopd-savings-webshop.md" and labelled.name == "branchopd-savings-webshop-warm.md"
    assert json.loads(labelled.with_suffix(".json").read_text())["saving_vs_estimate"] == result["saving_vs_estimate"]
    text = labelled.read_text()
    assert "**61.9%**" in text and "31.2%" in text and "--label warm" in text
