"""The quickstart's shipped tiny models still fit the tiny plan and the quickstart config (fast: no server, no
model loaded). A change to the plan's model fields or to the prompt/environment settings the SFT examples were
rendered with makes this fail: remake them with `trainer make-models --quickstart --out trainer/quickstart/shipped/tiny`
(docs/quickstart.md)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from trainer.cli import _parser
from trainer.config import load_config
from trainer.models.ladder import RECORD as LADDER_RECORD
from trainer.quickstart.models import MODELS_RECORD, SHIPPED, copy_models, record_key, shipped_models
from trainer.quickstart.plans import LADDER, PLANS, default_models_dir, plan_for
from trainer.quickstart.run import env_overrides, ladder_models, plan_env_overrides, quickstart_models, ready_models

REMAKE = "remake them: trainer make-models --quickstart --out trainer/quickstart/shipped/tiny"


def test_the_shipped_models_fit_the_tiny_plan_and_the_quickstart_config() -> None:
    plan = PLANS["tiny"]
    config = load_config(plan.config, env_overrides("alfworld"))
    record = json.loads((SHIPPED / plan.name / MODELS_RECORD).read_text())
    assert record["key"] == record_key(plan, config), f"the shipped models were made with other settings; {REMAKE}"
    models = shipped_models(plan, config)
    assert models is not None, f"a shipped file differs from its recorded sha256; {REMAKE}"
    assert models.origin == "shipped" and (models.student / "model.safetensors").is_file()
    assert {path.split("/")[0] for path in record["files"]} == {models.student.name, models.teacher.name}


@pytest.mark.parametrize("change", ["prompt.history_length=2", "env.max_turns=10", "seed=1"])
def test_other_prompt_or_environment_settings_do_not_fit_the_shipped_models(change: str) -> None:
    plan = PLANS["tiny"]
    assert shipped_models(plan, load_config(plan.config, [*env_overrides("alfworld"), change])) is None


def test_another_plan_does_not_fit_the_shipped_models() -> None:
    config = load_config("quickstart.yaml", env_overrides("alfworld"))
    assert shipped_models(PLANS["tiny"].sized(teacher_steps=1499), config) is None


def test_the_ladder_picks_its_plan_by_environment_and_keeps_its_models_apart() -> None:
    plan = plan_for("ladder", "alfworld")
    assert (
        plan is LADDER["alfworld"]
        and plan_for("ladder", None) is PLANS["ladder"]
        and plan_for("tiny", "x") is PLANS["tiny"]
    )
    assert plan.folder == "ladder-alfworld" and default_models_dir(plan.folder) == Path("runs/models-ladder-alfworld")
    config = load_config(plan.config)
    assert Path(config.models.teacher).parent == default_models_dir(plan.folder)
    with pytest.raises(ValueError, match="--model ladder has plans for alfworld"):
        plan_for("ladder", "minecraft")
    with pytest.raises(ValueError, match="written for alfworld, not webshop"):
        plan_env_overrides(plan, "webshop")
    assert plan_env_overrides(plan, "alfworld") == [] and plan_env_overrides(PLANS["tiny"], "webshop")


def test_without_a_model_the_quickstart_runs_the_ladder_where_the_environment_has_one() -> None:
    """`make quickstart` (`trainer quickstart`, no `--model`): ALFWorld's ladder, `tiny` on the other environments."""
    assert plan_for(None, "alfworld") is LADDER["alfworld"]
    assert plan_for(None, "webshop") is PLANS["tiny"] and plan_for(None, "scienceworld") is PLANS["tiny"]
    assert _parser().parse_args(["quickstart"]).model is None


def test_the_ladder_plan_runs_on_the_shipped_ladder_models(tmp_path: Path) -> None:
    """`--model ladder` copies the models `trainer make-models --ladder alfworld` shipped while their record was
    made from the ladder's spec as it is now; a record of another spec, or a missing model, does not fit."""
    plan = PLANS["ladder"]
    shipped = ladder_models(plan, SHIPPED / plan.folder, origin="shipped")
    assert shipped is not None, "the shipped ladder models were made from another spec: trainer make-models --ladder"
    assert shipped.student == SHIPPED / plan.folder / "student" and shipped.teacher.name == "teacher"
    config = load_config(plan.config)
    assert ready_models(plan, config, tmp_path / "empty") == shipped
    copied = copy_models(shipped, tmp_path / "models", LADDER_RECORD)
    assert ladder_models(plan, tmp_path / "models") == dataclasses.replace(copied, origin="reused")
    record = json.loads((tmp_path / "models" / LADDER_RECORD).read_text())
    record["spec"]["student"]["sft_steps"] += 1
    (tmp_path / "models" / LADDER_RECORD).write_text(json.dumps(record))
    assert ladder_models(plan, tmp_path / "models") is None
    with pytest.raises(ValueError, match="make-models --ladder alfworld"):
        quickstart_models(tmp_path / "made", plan=plan)
