"""`trainer export` against a real ALFWorld server: the expert's demonstrations and a one-step run's rollouts as a
Hugging Face data set folder, loaded by `datasets` and trained on for 2 steps by TRL's `SFTTrainer`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.cli import main
from trainer.export import ROLLOUTS, ROW_FIELDS
from trainer.quickstart.models import SHIPPED

STUDENT = SHIPPED / "tiny" / "student-warm"


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(argv) == 0, capsys.readouterr().err
    result: dict[str, object] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return result


@pytest.mark.slow
def test_export_loads_in_datasets_and_trains_two_sft_steps_in_trl(
    alfworld_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    datasets = pytest.importorskip("datasets")
    trl = pytest.importorskip("trl")
    settings = [f"env.targets=[{alfworld_server}]", f"models.student={STUDENT}", f"models.teacher={STUDENT}"]
    settings += ["steps=1", "checkpoint_every=0", "env.max_turns=3", "rollout.tasks_per_step=2", "rollout.group_size=2"]
    settings += [
        "rollout.max_new_tokens=8",
        "logging.rollouts=true",
        "logging.backends=[]",
        f"output_dir={tmp_path}/run",
    ]
    config = ["--config", "quickstart.yaml", *(arg for s in settings for arg in ("--set", s))]
    _cli(["train", *config, "--no-progress"], capsys)
    out = tmp_path / "data"
    argv = ["export", *config, "--out", str(out), "--expert-tasks", "3", "--run", str(tmp_path / "run")]
    assert _cli(argv, capsys) == {"dataset": str(out)}

    expert = datasets.load_dataset(str(out), "expert")["train"]
    rollouts = datasets.load_dataset(str(out), "rollouts")["train"]
    assert expert.column_names == list(ROW_FIELDS) == rollouts.column_names
    assert len(set(expert["task_id"])) == 3 and set(expert["split"]) == {"train"}
    first = expert[0]
    assert [m["role"] for m in first["messages"]] == ["user", "assistant"] and first["source"] == "expert"
    assert first["reply"] == f"<action>{first['action']}</action>" == first["messages"][1]["content"]
    assert first["messages"][0]["content"].startswith("Task: ") and "\nActions: " in first["messages"][0]["content"]
    assert sum(expert["reward"]) == sum(
        won for won, turn in zip(expert["won"], expert["turn"], strict=True) if turn == 0
    )
    recorded = [json.loads(line) for line in (tmp_path / "run" / ROLLOUTS).read_text().splitlines()]
    assert len(rollouts) == len(recorded) >= 4 and set(rollouts["step"]) == {1} and set(rollouts["split"]) == {"train"}
    assert all(row["messages"][1]["content"] == row["reply"] and row["messages"][0]["content"] for row in recorded)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(STUDENT)
    model = AutoModelForCausalLM.from_pretrained(STUDENT)
    args = trl.SFTConfig(
        output_dir=str(tmp_path / "sft"),
        max_steps=2,
        per_device_train_batch_size=2,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        logging_steps=1,
    )
    trainer = trl.SFTTrainer(
        model=model, args=args, train_dataset=expert.select_columns(["messages"]), processing_class=tokenizer
    )
    result = trainer.train()
    assert result.global_step == 2 and result.training_loss > 0
