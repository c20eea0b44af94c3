"""Every shipped teacher of the model ladder (`LADDER`, docs/design/023-learning-ladder.md) still reaches its stated
held-out success: its plan's evaluation (the config's held-out tasks x `eval_samples` episodes, seeded) on a real
local server. Fails when a change to the models, the prompt, the environment or generation lowers it."""

from __future__ import annotations

import importlib.util

import pytest

from trainer.config import load_config
from trainer.eval import evaluate
from trainer.quickstart.models import SHIPPED, shipped_models
from trainer.quickstart.plans import LADDER, ModelPlan

ENV_PACKAGES = {"alfworld": "alfworld"}
"""The package an environment's server needs (skipped where it is not installed)."""


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("plan", list(LADDER.values()), ids=list(LADDER))
def test_the_shipped_ladder_teacher_reaches_its_stated_success(plan: ModelPlan) -> None:
    if importlib.util.find_spec(ENV_PACKAGES.get(plan.env, plan.env)) is None:
        pytest.skip(f"{plan.env} is not installed")
    import torch

    torch.set_num_threads(plan.threads or torch.get_num_threads())
    if not (SHIPPED / plan.folder).is_dir():
        pytest.skip(f"no models shipped for {plan.folder} (`trainer quickstart --model ladder` makes them)")
    config = load_config(plan.config)
    models = shipped_models(plan, config)
    assert models is not None, (
        f"no shipped models fit the plan: trainer make-models --quickstart ladder --env {plan.env}"
    )
    assert plan.teacher_success > 0, "the plan states no teacher success"
    result = evaluate(config, str(models.teacher), samples=plan.eval_samples)
    assert result.success_rate >= plan.teacher_success, (
        f"{plan.folder}'s shipped teacher: held-out success {result.success_rate:.2f} < its stated "
        f"{plan.teacher_success:.2f} ({result.tasks} tasks x {plan.eval_samples})"
    )
