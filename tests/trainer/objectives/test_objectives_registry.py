"""The registry: every objective on one canonical batch, config round trips, clear errors."""

from __future__ import annotations

import dataclasses
import inspect
import sys
from pathlib import Path

import pytest
import torch

from trainer.errors import TrainerError
from trainer.objectives import (
    ObjectiveSpec,
    TokenBatch,
    build_config,
    get_advantage,
    get_objective,
    grpo_advantage,
    objective_names,
    ppo_actor_loss,
    reduction_unit_ids,
    register_objective,
    registry,
)
from trainer.objectives.grpo import GrpoConfig


def test_registered_names() -> None:
    assert objective_names() == ("atod", "branchopd", "grpo", "opd")


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(TrainerError) as info:
        get_advantage("ppo")
    assert isinstance(info.value, ValueError)
    assert info.value.reason == "UNKNOWN_OBJECTIVE"
    assert "atod, branchopd, grpo, opd" in info.value.message


def test_a_name_registers_once() -> None:
    with pytest.raises(TrainerError) as info:
        register_objective(ObjectiveSpec("grpo", grpo_advantage, GrpoConfig, "token-mean", needs_teacher=False))
    assert info.value.reason == "OBJECTIVE_ALREADY_REGISTERED"


@pytest.mark.parametrize("name", objective_names())
def test_config_fields_are_the_advantage_keywords(name: str) -> None:
    spec = get_objective(name)
    params = inspect.signature(spec.advantage).parameters
    keywords = {p for p, v in params.items() if v.kind is inspect.Parameter.KEYWORD_ONLY} - {"step"}
    assert keywords == {f.name for f in dataclasses.fields(spec.config_cls)}
    for field in dataclasses.fields(spec.config_cls):
        assert params[field.name].default == field.default, f"{name}.{field.name}: default differs from the config"


@pytest.mark.parametrize("name", objective_names())
def test_every_objective_on_the_canonical_batch(name: str, canonical_batch: TokenBatch) -> None:
    spec = get_objective(name)
    advantages, metrics = spec.compute(canonical_batch, build_config(name), step=10)
    assert advantages.shape == canonical_batch.loss_mask.shape
    assert bool(torch.isfinite(advantages).all())
    assert advantages[~canonical_batch.loss_mask].eq(0).all()
    assert advantages[canonical_batch.loss_mask].ne(0).any()
    assert metrics and all(isinstance(v, float) for v in metrics.values())
    theta = torch.zeros_like(canonical_batch.logp_old, requires_grad=True)
    loss, loss_metrics = ppo_actor_loss(
        canonical_batch.logp_old + theta,
        canonical_batch.logp_old,
        advantages,
        canonical_batch.loss_mask,
        reduction=spec.default_reduction,
        unit_ids=reduction_unit_ids(spec.default_reduction, canonical_batch.traj_ids, canonical_batch.turn_ids),
    )
    loss.backward()
    assert theta.grad is not None
    assert bool(torch.isfinite(loss)) and bool(torch.isfinite(theta.grad).all())
    assert theta.grad[~canonical_batch.loss_mask].eq(0).all()
    assert theta.grad[canonical_batch.loss_mask].ne(0).any()
    assert set(loss_metrics) == {"actor/pg_loss", "actor/clipfrac", "actor/approx_kl", "actor/ratio_mean"}


def test_teacher_objectives_say_so(canonical_batch: TokenBatch) -> None:
    no_teacher = dataclasses.replace(canonical_batch, logp_teacher=None)
    for name in objective_names():
        spec = get_objective(name)
        if spec.needs_teacher:
            with pytest.raises(TrainerError, match="logp_teacher is None"):
                spec.compute(no_teacher, build_config(name), step=0)
        else:
            spec.compute(no_teacher, build_config(name), step=0)


def test_build_config_from_a_mapping() -> None:
    config = build_config("atod", {"tdur": "token", "anneal": False, "coef_anneal_steps": 50})
    assert (config.tdur, config.anneal, config.coef_anneal_steps, config.kappa_init) == ("token", False, 50, 1.0)
    with pytest.raises(TrainerError) as info:
        build_config("atod", {"kappa": 1.0})
    assert info.value.reason == "UNKNOWN_CONFIG_FIELD"
    assert "kappa_init" in info.value.message


def test_compute_refuses_another_objectives_config(canonical_batch: TokenBatch) -> None:
    with pytest.raises(TrainerError) as info:
        get_objective("atod").compute(canonical_batch, build_config("grpo"), step=0)
    assert info.value.reason == "INVALID_OBJECTIVE_CONFIG"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", objective_names())
def test_cuda_matches_cpu(name: str, canonical_batch: TokenBatch) -> None:
    spec = get_objective(name)
    config = build_config(name)
    cpu_adv, cpu_metrics = spec.compute(canonical_batch, config, step=10)
    gpu_batch = canonical_batch.to("cuda")
    gpu_adv, gpu_metrics = spec.compute(gpu_batch, config, step=10)
    torch.testing.assert_close(gpu_adv.cpu(), cpu_adv)
    assert gpu_metrics == pytest.approx(cpu_metrics, nan_ok=True)
    cpu_loss, _ = ppo_actor_loss(canonical_batch.logp_old, canonical_batch.logp_old, cpu_adv, canonical_batch.loss_mask)
    gpu_loss, _ = ppo_actor_loss(gpu_batch.logp_old, gpu_batch.logp_old, gpu_adv, gpu_batch.loss_mask)
    torch.testing.assert_close(gpu_loss.cpu(), cpu_loss)


def test_a_listed_module_registers_its_objective_at_the_first_lookup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "probe_objective.py").write_text(
        "from trainer.objectives import ObjectiveSpec, grpo_advantage, register_objective\n"
        "from trainer.objectives.grpo import GrpoConfig\n"
        "register_objective(ObjectiveSpec('probe', grpo_advantage, GrpoConfig, 'token-mean', needs_teacher=False))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "OBJECTIVE_MODULES", ["probe_objective"])
    monkeypatch.delitem(sys.modules, "probe_objective", raising=False)
    try:
        assert "probe" in objective_names()
        assert get_objective("probe").advantage is grpo_advantage
    finally:
        registry._REGISTRY.pop("probe", None)
        sys.modules.pop("probe_objective", None)
