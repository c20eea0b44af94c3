"""The ladder spec (trainer/configs/ladder/*.yaml) and the mixed held-out set (fast: no server, no model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.config import ConfigError
from trainer.models.ladder import LadderSpec, mix_families
from trainer.models.missing import remedy


def test_mix_families_takes_each_family_in_turn() -> None:
    tasks = [("nq/0", "nq"), ("nq/1", "nq"), ("nq/2", "nq"), ("pop/0", "popqa"), ("hot/0", "hotpotqa")]
    assert mix_families(tasks, (), 4) == ["nq/0", "pop/0", "hot/0", "nq/1"]
    assert mix_families(tasks, ("nq", "hotpotqa"), 10) == ["nq/0", "hot/0", "nq/1", "nq/2"]
    assert mix_families(tasks, ("musique",), 3) == []


@pytest.mark.parametrize("name", ["webshop", "searchqa"])
def test_the_shipped_specs_load_with_their_configs(name: str) -> None:
    spec = LadderSpec.load(name)
    config = spec.trainer_config()
    assert config.env.name == name and spec.teacher.hidden > spec.student.hidden
    assert 0 < spec.levels.student_max < spec.levels.teacher_min <= 1


def test_a_bad_spec_is_refused_with_its_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no ladder 'nope'.*shipped ladders: searchqa, webshop"):
        LadderSpec.load("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("config: ladder-webshop.yaml\nexpert_tasks: 8\nteacher: {hidden: 8}\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml"):
        LadderSpec.load(str(bad))


def test_a_missing_ladder_model_names_the_ladder_command() -> None:
    folder = "trainer/quickstart/shipped/ladder-webshop"
    assert remedy(f"{folder}/teacher", "ladder-webshop.yaml") == f"trainer make-models --ladder webshop --out {folder}"
