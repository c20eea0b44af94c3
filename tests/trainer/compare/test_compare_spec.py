"""Comparison configs: one budget for every arm, every arm a registered objective, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.compare import load_spec
from trainer.compare.run import arm_config
from trainer.config import ConfigError
from trainer.objectives.registry import get_objective


def test_atod_ablation_arms_share_one_budget() -> None:
    spec = load_spec("atod-ablation")
    assert [a.name for a in spec.arms] == [
        "grpo",
        "opd",
        "opd-multi",
        "atod",
        "atod-tdur-none",
        "atod-tdur-token",
        "atod-anneal-off",
    ]
    configs = {a.name: arm_config(spec, a, 1, Path("out"), Path("models"), "127.0.0.1:1") for a in spec.arms}
    for name, config in configs.items():
        get_objective(config.objective.name)  # registered
        assert config.optim.lr == spec.lr and config.steps == spec.steps and config.seed == 1
        assert config.rollout.group_size * config.rollout.tasks_per_step == 32, name
        assert config.models.student == "models/student-warm" and config.env.targets == ["127.0.0.1:1"]
    assert configs["opd"].rollout.group_size == 1 and configs["opd-multi"].rollout.group_size == 8
    assert configs["atod-tdur-token"].objective.params["tdur"] == "token"
    assert configs["atod-anneal-off"].objective.params["anneal"] is False
    quick = spec.sized(True, seeds=3)
    assert quick.steps < spec.steps and quick.seeds == 3 and quick.lr == spec.lr


def test_unknown_comparison_names_the_shipped_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="shipped: atod-ablation"):
        load_spec("no-such-comparison")
    bad = tmp_path / "bad.yaml"
    bad.write_text("base: quickstart.yaml\narms: []\n")
    with pytest.raises(ConfigError, match="bad comparison config"):
        load_spec(bad)
