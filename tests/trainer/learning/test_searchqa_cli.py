"""`trainer make-models --sft-steps`, `train` and `eval` on Search-QA through the CLI, against a real local server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trainer.cli import main
from trainer.rollout.local_server import LocalServer


@pytest.fixture(scope="module")
def searchqa_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Search-QA server over a small generated data set (ENVHUB_SEARCHQA_DATA, inherited by the server)."""
    pytest.importorskip("bm25s")
    from envhub.envs.searchqa.build import BuildConfig, build_dataset

    folder = tmp_path_factory.mktemp("searchqa") / "data"
    build_dataset(folder, BuildConfig(max_cities=1000, train_per_dataset=4, test_per_dataset=2))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ENVHUB_SEARCHQA_DATA", str(folder))
        patch.delenv("ENVHUB_SEARCHQA_RETRIEVER", raising=False)
        patch.delenv("ENVHUB_SEARCHQA_INDEX", raising=False)
        with LocalServer("searchqa") as server:
            yield server.address


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(argv) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return result


@pytest.mark.slow
def test_searchqa_make_models_sft_train_eval(
    searchqa_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = ["--config", "searchqa-tiny.yaml", "--set", f"env.targets=[{searchqa_server}]"]
    models = tmp_path / "models"
    made = _run(["make-models", *config, "--tasks", "8", "--out", str(models), "--sft-steps", "30"], capsys)
    tuned, sft = made["sft"], made["student-sft"]  # the one command searchqa-tiny.yaml's missing student names
    assert tuned["last_loss"] < 0.5 * tuned["first_loss"] and sft == str(models / "student-sft")
    run = tmp_path / "run"
    overrides = ["--set", f"models.student={sft}", "--set", f"output_dir={run}", "--set", "steps=1"]
    assert _run(["train", *config, "--no-progress", *overrides], capsys)["step"] == 1
    [record] = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert record["rollout/trajectories"] == 8 and 1.0 <= record["rollout/mean_turns"] <= 4.0
    evaluation = _run(
        ["eval", *config, "--set", "eval.num_tasks=4", "--set", f"output_dir={run}", "--policy", sft], capsys
    )
    assert evaluation["split"] == "test" and evaluation["tasks"] == 4 and 0.0 <= evaluation["success_rate"] <= 1.0
