"""Every shipped CPU config trains from what `trainer quickstart` leaves in runs/models (the shipped tiny models,
copied), or stops before starting anything, naming the one command that makes what it lacks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from trainer.cli import main
from trainer.config import load_config
from trainer.metrics import read_metrics
from trainer.models.missing import ModelsNotFound, check_models
from trainer.quickstart.models import SHIPPED

CONFIGS = Path(load_config.__code__.co_filename).parent / "configs"
FROM_QUICKSTART = ("quickstart.yaml", "grpo-tiny.yaml", "divopd-tiny.yaml", "branchopd-tiny.yaml", "tree-tiny.yaml")
"""The CPU configs that start from the quickstart's student-warm and teacher-sft."""
ONE_STEP = (
    "steps=1",
    "checkpoint_every=0",
    "eval.every=0",
    "env.max_turns=3",
    "env.max_tasks=2",
    "rollout.tasks_per_step=2",
    "rollout.max_new_tokens=8",
    "divopd.batch_rows=2",
    "divopd.schedule=lockstep",
    "divopd.producers=1",
    "branch.min_turn_gap=0",
)
"""The shipped configs at test size: one short step, no evaluation."""


@pytest.fixture
def fresh_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory whose runs/models holds what the quickstart leaves there (the shipped tiny models)."""
    for folder in ("student-warm", "teacher-sft"):
        shutil.copytree(SHIPPED / "tiny" / folder, tmp_path / "runs" / "models" / folder)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_every_shipped_config_has_its_models_or_names_the_command_that_makes_them(fresh_checkout: Path) -> None:
    ready = []
    for path in sorted(CONFIGS.glob("*.yaml")):
        config = load_config(path.name)
        if config.backend.device == "cuda" or config.models.student.startswith("/"):
            continue  # GPU configs (gpu.md) and absolute model paths of a cluster
        try:
            check_models(config.models, path.name)
            ready.append(path.name)
        except ModelsNotFound as exc:
            assert "does not exist; make it with: trainer " in str(exc), path.name
            assert "trainer quickstart\n" not in f"{exc}\n", f"{path.name}: the quickstart's models are there"
    assert sorted(ready) == sorted(FROM_QUICKSTART)
    smollm2 = load_config("quickstart-smollm2.yaml")
    with pytest.raises(ModelsNotFound, match="make it with: trainer quickstart --model smollm2\n"):
        check_models(smollm2.models, "quickstart-smollm2.yaml")
    with pytest.raises(ModelsNotFound, match="make it with: trainer quickstart --model ladder --env alfworld\n"):
        check_models(load_config("quickstart-ladder.yaml").models, "quickstart-ladder.yaml")


def test_a_missing_model_names_its_command(fresh_checkout: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.rmtree(fresh_checkout / "runs" / "models")
    assert main(["train", "--config", "grpo-tiny.yaml"]) == 2
    assert "runs/models/student-warm does not exist; make it with: trainer quickstart\n" in capsys.readouterr().err
    assert main(["train", "--config", "searchqa-tiny.yaml"]) == 2
    command = "trainer make-models --config searchqa-tiny.yaml --out runs/models-searchqa --sft-steps 300"
    assert f"runs/models-searchqa/student-sft does not exist; make it with: {command}" in capsys.readouterr().err
    assert main(["train", "--config", "atod.yaml", "--set", "models.student=elsewhere/student"]) == 2
    err = capsys.readouterr().err
    assert (
        "models.student: elsewhere/student does not exist; make it with: trainer make-models --config atod.yaml "
        "--out elsewhere\n"
        in err
        and "models.teacher: runs/models/teacher" in err
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", FROM_QUICKSTART)
def test_a_shipped_cpu_config_trains_one_step_from_the_quickstart_models(
    name: str, fresh_checkout: Path, alfworld_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    overrides = [f"env.targets=[{alfworld_server}]", f"output_dir={fresh_checkout / 'run'}", *ONE_STEP]
    argv = ["train", "--config", name, "--no-progress", *(arg for o in overrides for arg in ("--set", o))]
    assert main(argv) == 0, capsys.readouterr().err
    records = read_metrics(fresh_checkout / "run" / "metrics.jsonl")
    assert records and {r["step"] for r in records} == {1}, "one learner step, logged"
