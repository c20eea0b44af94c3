"""`trainer make-models / sft / train / eval` on WebShop end to end: tiny models, a local server, CPU."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envhub.envs.webshop.kind import WebShopKind
from trainer.cli import _parser, main
from trainer.config import load_config
from trainer.quickstart.run import ENV_OVERRIDES
from trainer.rollout.local_server import LocalServer


@pytest.fixture(scope="module")
def webshop_server(webshop_cache: str) -> Iterator[str]:
    with LocalServer("webshop") as server:
        yield server.address


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(argv) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return result


@pytest.mark.slow
def test_webshop_make_models_sft_train_eval(
    webshop_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = [
        "env.name=webshop",
        f"env.targets=[{webshop_server}]",
        "env.families=[]",
        "env.eval_split=test",
        "env.max_tasks=4",
        "env.max_turns=6",
        "rollout.group_size=2",
        "rollout.tasks_per_step=2",
        "eval.num_tasks=2",
        f"output_dir={tmp_path / 'train'}",
    ]
    common = ["--config", "grpo-tiny.yaml", *(arg for s in settings for arg in ("--set", s))]
    models = tmp_path / "models"
    made = _run(["make-models", *common, "--out", str(models), "--tasks", "6"], capsys)
    assert made["reused"] is False
    student = tmp_path / "student-sft"
    sft = _run(
        ["sft", *common, "--model", made["student"], "--out", str(student), "--steps", "20", "--tasks", "6"], capsys
    )
    assert sft["steps"] == 20 and sft["last_loss"] < sft["first_loss"]
    trained = _run(
        ["train", *common, "--set", f"models.student={student}", "--set", "steps=1", "--no-progress"], capsys
    )
    assert trained["step"] == 1
    evaluation = _run(["eval", *common, "--policy", str(student)], capsys)
    assert evaluation["tasks"] == 2 and 0.0 <= evaluation["success_rate"] <= 1.0 and evaluation["mean_turns"] >= 1


def test_quickstart_takes_webshop() -> None:
    args = _parser().parse_args(["quickstart", "--env", "webshop"])
    assert args.env == "webshop"
    config = load_config("quickstart.yaml", ["env.name=webshop", *ENV_OVERRIDES["webshop"]])
    assert config.env.targets == ["local"] and config.env.families == []
    assert config.env.eval_split in WebShopKind().splits() and config.env.train_split in WebShopKind().splits()
