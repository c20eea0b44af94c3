"""`train()` with rollout.strategy branch: real ALFWorld server, tiny student and teacher, in-process workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.branching.diagnostics import BRANCH_DIAGNOSTICS, INDEPENDENT_TOKENS, STUDENT_TOKENS, TOKEN_SAVING
from trainer.branching.plugin import fork_config
from trainer.config import config_from_dict, load_config
from trainer.driver import train
from trainer.metrics import read_metrics
from trainer.models.tiny import TinyModels


def test_shipped_configs_select_branching() -> None:
    for name in ("branchopd.yaml", "branchopd-tiny.yaml"):
        config = load_config(name)
        assert config.rollout.strategy == "branch" and config.objective.name == "branchopd"
        fork = fork_config(config)
        assert (fork.num_forks, fork.continuations, fork.alpha, fork.eta, fork.window) == (3, 2, 0.5, 0.2, 128)
        assert config.pbr.rules == ["stray_close_think"] and config.pbr.weight == 0.01 and config.pbr.cap == 0.02


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rollout.snapshots": False}, "rollout.snapshots: true"),
        ({"rollout.top_logprobs": 5}, "rollout.top_logprobs: 20"),
        ({"rollout.group_size": 4}, "rollout.group_size: 1"),
        ({"branch.bogus": 1}, "unknown branch setting"),
        ({"branch.alpha": 2.0}, "alpha"),
        ({"pbr.rules": ["nope"]}, "unknown PBR rule"),
    ],
)
def test_misconfigured_branching_names_the_remedy(change: dict[str, object], message: str) -> None:
    overrides = [f"{k}={v}" for k, v in change.items()]
    with pytest.raises(ValueError, match=message):
        load_config("branchopd-tiny.yaml", overrides)


@pytest.mark.slow
def test_branchopd_run_logs_branch_diagnostics(tmp_path: Path, tiny_models: TinyModels, alfworld_server: str) -> None:
    data = load_config("branchopd-tiny.yaml").model_dump()
    data.update(
        steps=2,
        output_dir=str(tmp_path / "run"),
        models={"student": str(tiny_models.student), "teacher": str(tiny_models.teacher)},
        backend={"device": "cpu"},
    )
    data["env"].update(targets=[alfworld_server], max_turns=3)
    data["rollout"].update(tasks_per_step=2, max_new_tokens=8)
    data["branch"].update(min_turn_gap=0)
    result = train(config_from_dict(data), progress=False)
    assert result.final_step == 2
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    for record in records:
        for key in (*BRANCH_DIAGNOSTICS, "pbr/constraints", "pbr/loss", "branch/forks", "learner/supervised_tokens"):
            assert key in record, key
        assert record[STUDENT_TOKENS] < record[INDEPENDENT_TOKENS]
        assert record[TOKEN_SAVING] == pytest.approx(1 - record[STUDENT_TOKENS] / record[INDEPENDENT_TOKENS])
        # every generated student token is supervised exactly once
        assert record["learner/supervised_tokens"] == record[STUDENT_TOKENS]
    assert (tmp_path / "run" / "training.png").stat().st_size > 1000
