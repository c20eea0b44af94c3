"""Trainer config: defaults from the papers, shipped configs load, misconfiguration names the remedy."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.cli import main
from trainer.config import ConfigError, config_from_dict, load_config, reference_markdown

SHIPPED = sorted(p.name for p in (Path(__file__).parents[3] / "trainer" / "configs").glob("*.yaml"))


def test_defaults_follow_the_papers() -> None:
    config = load_config(None)
    assert config.rollout.group_size == 8 and config.objective.clip_eps == 0.2
    assert config.optim.lr == 1e-6 and config.optim.grad_clip == 1.0
    assert config.rollout.temperature == 1.0 and config.eval.temperature == 0.4
    assert config.env.max_turns == 50 and config.prompt.history_length == 2
    assert config.prompt.context == "history" and config.backend.kind == "hf" and config.objective.name == "atod"


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_configs_load_by_name(name: str) -> None:
    assert load_config(name).steps > 0


def test_overrides_use_yaml_values() -> None:
    config = load_config("atod.yaml", ["optim.lr=1e-3", "objective.params.tdur=none", "objective.params.anneal=false"])
    assert config.optim.lr == 1e-3 and config.objective.params == {**config.objective.params, "tdur": "none"}
    assert config.objective.params["anneal"] is False


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"objective": {"name": "opd"}, "models": {"teacher": None}}, "set models.teacher"),
        ({"objective": {"name": "grpo"}, "rollout": {"group_size": 1}}, "group_size >= 2"),
        ({"objective": {"name": "atod", "params": {"kappa": 1}}}, "unknown atod setting"),
        ({"objective": {"name": "dpo"}}, "unknown objective 'dpo'; registered objectives: atod, branchopd, grpo, opd"),
        ({"objective": {"name": "grpo", "reduction": "seq-mean"}}, "unknown loss reduction 'seq-mean'"),
        ({"rollout": {"strategy": "beam"}}, "unknown rollout strategy 'beam'; registered: branch, group"),
        ({"rollout": {"group_sise": 8}}, "rollout.group_sise"),
    ],
)
def test_misconfiguration_fails_with_the_remedy(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config_from_dict(data)


def test_a_registered_objective_is_selectable_with_its_own_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    from trainer.objectives import registry
    from trainer.objectives.grpo import GrpoConfig, grpo_advantage

    spec = registry.ObjectiveSpec(
        "triple", grpo_advantage, GrpoConfig, "turn-mean-token-mean", needs_teacher=True, min_group_size=3
    )
    monkeypatch.setitem(registry._REGISTRY, "triple", spec)
    config = config_from_dict({"objective": {"name": "triple", "params": {"epsilon": 0.1}}})
    assert config.objective.name == "triple"
    with pytest.raises(ConfigError, match="group_size >= 3"):
        config_from_dict({"objective": {"name": "triple"}, "rollout": {"group_size": 2}})
    with pytest.raises(ConfigError, match="needs a teacher"):
        config_from_dict({"objective": {"name": "triple"}, "models": {"teacher": None}})
    assert spec.params_schema() == {"epsilon": {"type": "float", "default": 1e-6}}


def test_config_errors_are_the_trainers_own() -> None:
    from trainer.errors import TrainerError

    assert issubclass(ConfigError, TrainerError) and issubclass(ConfigError, ValueError)


def test_bad_override_and_missing_file() -> None:
    with pytest.raises(ConfigError, match=r"section\.field=value"):
        load_config(None, ["optim.lr"])
    with pytest.raises(ConfigError, match="not found"):
        load_config("no-such-config.yaml")


def test_cli_reports_config_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--config", "atod.yaml", "--set", "rollout.group_size=0"]) == 2
    assert "rollout.group_size" in capsys.readouterr().err


def test_reference_lists_every_section() -> None:
    text = reference_markdown()
    for section in ("models", "backend", "env", "prompt", "rollout", "objective", "optim", "ray", "eval"):
        assert f"### `{section}`" in text


def test_gpu_smoke_config_is_two_atod_steps_on_vllm_with_the_made_models() -> None:
    config = load_config("gpu-smoke.yaml")
    assert (config.steps, config.objective.name, config.backend.kind) == (2, "atod", "vllm")
    assert config.models.student == "runs/models/student" and config.env.targets == ["local"]
    assert (config.weight_sync(), config.placement.mode, config.placement.sleep_level) == ("inproc", "colocated", 0)
    # the Makefile's second run: Ray, one colocated GPU, vLLM's weight-transfer API over CUDA IPC
    makefile = (Path(__file__).parents[3] / "Makefile").read_text()
    line = next(x for x in makefile.splitlines() if x.startswith("GPU_SMOKE_RAY"))
    ray_run = load_config("gpu-smoke.yaml", line.split("--set ")[1:])
    assert (ray_run.weight_sync(), ray_run.ray.enabled, ray_run.placement.learner_gpus) == ("ipc", True, 1)
    assert ray_run.placement.sleep_level == 2
