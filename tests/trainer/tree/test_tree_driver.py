"""`train()` with rollout.strategy tree: the shipped config, its checks, and a real run (ALFWorld server, tiny
models, in-process workers) that logs the tree diagnostics."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.config import config_from_dict, load_config
from trainer.driver import train
from trainer.metrics import read_metrics
from trainer.models.tiny import TinyModels
from trainer.tree.diagnostics import BRANCH_TURNS, BRANCHES, DISTINCT_TURNS, FORK_S, FORKS, STUDENT_TOKENS
from trainer.tree.plugin import tree_config


def test_shipped_config_selects_tree_rollouts() -> None:
    config = load_config("tree-tiny.yaml")
    assert config.rollout.strategy == "tree" and config.objective.params == {"advantage": "tree_mc"}
    tree = tree_config(config)
    assert (tree.forks, tree.continuations, tree.depth, tree.select) == (2, 2, 1, "entropy")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rollout.snapshots": False}, "rollout.snapshots: true"),
        ({"rollout.top_logprobs": 5}, "rollout.top_logprobs: 20"),
        ({"tree.select": "disagreement"}, "a teacher"),
        ({"tree.bogus": 1}, "unknown tree setting"),
        ({"tree.forks": 0}, "tree.forks"),
        ({"objective.params": "{advantage: vine}"}, "unknown advantage"),
    ],
)
def test_misconfigured_tree_names_the_remedy(change: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_config("tree-tiny.yaml", [f"{k}={v}" for k, v in change.items()])


@pytest.mark.slow
def test_tree_run_logs_tree_diagnostics(tmp_path: Path, tiny_models: TinyModels, alfworld_server: str) -> None:
    data = load_config("tree-tiny.yaml").model_dump()
    data.update(
        steps=2,
        output_dir=str(tmp_path / "run"),
        models={"student": str(tiny_models.student), "teacher": str(tiny_models.teacher)},
        objective={"name": "atod", "params": {"advantage": "tree_sibling"}},
        backend={"device": "cpu"},
    )
    data["env"].update(targets=[alfworld_server], max_turns=4)
    data["rollout"].update(tasks_per_step=2, max_new_tokens=8)
    data["eval"].update(every=0)
    result = train(config_from_dict(data), progress=False)
    assert result.final_step == 2
    for record in read_metrics(tmp_path / "run" / "metrics.jsonl"):
        assert record[BRANCHES] == record[FORKS] > 0 and record[FORK_S] > 0
        assert record["learner/supervised_tokens"] == record[STUDENT_TOKENS] == record["rollout/generated_tokens"]
        assert record[DISTINCT_TURNS] < record[BRANCH_TURNS]
        assert 0 <= record["credit/nonzero_turn_share"] <= 1 and "credit/grpo_nonzero_turn_share" in record
        assert record["teacher/tokens_scored"] == record[STUDENT_TOKENS], "the teacher scores each turn once"
    assert (tmp_path / "run" / "training.png").stat().st_size > 1000
