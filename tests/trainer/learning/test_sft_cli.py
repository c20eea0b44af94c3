"""`trainer make-models` and `trainer sft` through the CLI against a real ALFWorld server on loopback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trainer.cli import main
from trainer.models.loading import load_model, load_tokenizer
from trainer.quickstart.models import SFT_MARKER


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(argv) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return result


def test_make_models_then_sft_through_the_cli(
    alfworld_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--config", "quickstart.yaml", "--set", f"env.targets=[{alfworld_server}]", "--tasks", "4"]
    models = tmp_path / "models"
    made = _run(["make-models", *common, "--out", str(models)], capsys)
    assert made == {"student": str(models / "student"), "teacher": str(models / "teacher"), "reused": False}
    assert _run(["make-models", *common, "--out", str(models)], capsys)["reused"] is True

    out = tmp_path / "student-sft"
    sft_argv = ["sft", *common, "--model", str(models / "student"), "--out", str(out), "--steps", "30"]
    result = _run(sft_argv, capsys)
    assert result["steps"] == 30 and result["tokens"] > 0
    assert result["last_loss"] < 0.5 * result["first_loss"]
    assert 0.0 <= result["exact_match_after"] <= 1.0
    assert load_tokenizer(out).get_vocab() == load_tokenizer(models / "student").get_vocab()
    trained, source = load_model(out), load_model(models / "student")
    assert any(
        not (a == b).all() for a, b in zip(trained.state_dict().values(), source.state_dict().values(), strict=True)
    )
    assert json.loads((out / SFT_MARKER).read_text())["result"] == result
    assert _run(sft_argv, capsys) == result  # cached by the marker: same examples, steps and source

    slow = tmp_path / "student-sft-slow"
    sizes = ["--lr", "1e-7", "--schedule", "cosine", "--batch-tokens", "512"]
    crawled = _run(
        ["sft", *common, "--model", str(models / "student"), "--out", str(slow), "--steps", "30", *sizes], capsys
    )
    assert crawled["last_loss"] > 0.9 * crawled["first_loss"]  # the learning rate given, not the tiny models' 3e-3


def test_sft_without_a_model_names_the_remedy(alfworld_server: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sft", "--config", "grpo-tiny.yaml", "--set", f"env.targets=[{alfworld_server}]", "--tasks", "1"]
    assert main([*argv, "--out", "unused"]) == 2
    assert "pass --model or set models.teacher" in capsys.readouterr().err
