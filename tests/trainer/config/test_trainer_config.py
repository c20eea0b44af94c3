"""Trainer config: defaults from the papers, shipped configs load, misconfiguration names the remedy."""

from __future__ import annotations

import json
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
    assert spec.params_schema() == {
        "epsilon": {"type": "float", "default": 1e-6},
        "advantage": {"type": "str", "default": "outcome"},
        "gamma": {"type": "float", "default": 0.95},
        "omega": {"type": "float", "default": 1.0},
        "rl_over": {"type": "RlOver", "default": "tokens"},
    }


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


def test_gpu_smoke_runs_atod_under_ray_and_grpo_in_one_process() -> None:
    config = load_config("gpu-smoke.yaml")
    assert (config.steps, config.objective.name, config.backend.kind) == (2, "atod", "vllm")
    assert config.models.student == "runs/models/student" and config.env.targets == ["local"]
    # as written: Ray, one colocated GPU, vLLM's weight-transfer API over CUDA IPC, engines asleep in the update
    assert (config.weight_sync(), config.ray.enabled, config.placement.learner_gpus) == ("ipc", True, 1)
    assert config.placement.sleep_level == 2
    # the Makefile's first run: one process, whose only vLLM engine is the student's
    makefile = (Path(__file__).parents[3] / "Makefile").read_text()
    line = next(x for x in makefile.splitlines() if x.startswith("GPU_SMOKE_INPROC"))
    inproc = load_config("gpu-smoke.yaml", line.split("--set ")[1:])
    assert (inproc.weight_sync(), inproc.ray.enabled, inproc.objective.name) == ("inproc", False, "grpo")
    assert inproc.output_dir != config.output_dir


VLLM = {"kind": "vllm", "device": "cuda"}
RAY = {"enabled": True}


@pytest.mark.parametrize(
    ("data", "fields", "remedy"),
    [
        # issue 22 item 3: Ray without a placement group gives no actor a GPU
        ({"backend": VLLM, "ray": RAY}, "placement.learner_gpus", "set placement.learner_gpus"),
        # ... and three engines at 0.4 on one GPU fail vLLM's free-memory check at the third engine
        (
            {"backend": VLLM, "ray": {**RAY, "num_rollout_workers": 2}, "placement": {"learner_gpus": 1}},
            "GPU 0 would hold 3 vLLM engine(s) x backend.gpu_memory_utilization 0.4",
            "lower backend.gpu_memory_utilization to 0.33 or less",
        ),
        # item 4: one vLLM engine per process (student and teacher), Ray off
        ({"backend": VLLM}, "ray.enabled false, 2 vLLM engines (1 rollout, 1 teacher)", "set ray.enabled true"),
        (
            {"backend": VLLM, "objective": {"name": "grpo"}, "ray": {"num_rollout_workers": 2}},
            "2 vLLM engines (2 rollout, 0 teacher)",
            "set ray.enabled true",
        ),
        # item 6: tensor parallel engines through the multiprocess client, Ray off
        (
            {"backend": {**VLLM, "tensor_parallel_size": 2}, "placement": {"mode": "split"}},
            "backend.tensor_parallel_size > 1 with ray.enabled false",
            "set ray.enabled true",
        ),
    ],
)
def test_gpu_misconfiguration_is_refused_at_load_naming_field_and_remedy(
    data: dict[str, object], fields: str, remedy: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_dict(data)
    assert fields in caught.value.message and remedy in caught.value.message


def test_gpu_memory_check_counts_the_learner_states_of_the_student(tmp_path: Path) -> None:
    """A 1.7B student's learner states (16 B per parameter, 25.6 GiB) take 0.18 of an H200; with two engines
    at 0.45 each the GPU is over-committed, with 0.4 it fits, and two learner ranks halve the states."""
    from trainer.sizing import QWEN3

    student = tmp_path / "student"
    student.mkdir()
    (student / "config.json").write_text(json.dumps(QWEN3["Qwen3-1.7B"].hf_config()))
    one_gpu = {
        "models": {"student": str(student)},
        "backend": {**VLLM, "gpu_memory_utilization": 0.45},
        "ray": RAY,
        "placement": {"learner_gpus": 1},
    }
    with pytest.raises(ConfigError, match=r"learner rank\(s\)' states \(25\.6 GiB of placement\.gpu_memory_gib 139\)"):
        config_from_dict(one_gpu)
    config_from_dict({**one_gpu, "backend": {**VLLM, "gpu_memory_utilization": 0.4}})
    with pytest.raises(ConfigError, match=r"lower backend\.gpu_memory_utilization to 0\.33 or less"):
        config_from_dict({**one_gpu, "placement": {"learner_gpus": 1, "gpu_memory_gib": 80}})
    # split: every engine has its own GPU, the learner ranks theirs
    config_from_dict({**one_gpu, "placement": {"learner_gpus": 1, "mode": "split"}})


def test_shipped_gpu_configs_place_every_engine_within_its_gpu() -> None:
    config = load_config("gpu-vllm.yaml")
    assert (config.ray.enabled, config.placement.mode, config.placement.learner_gpus) == (True, "colocated", 2)
    assert config.rollout_workers() == 2 and config.optim.gradient_checkpointing


def test_rollouts_are_recorded_by_the_synchronous_driver_only() -> None:
    assert load_config("grpo-tiny.yaml", ["logging.rollouts=true"]).logging.rollouts
    with pytest.raises(ConfigError, match=r"logging\.rollouts is recorded by the synchronous driver only"):
        load_config("divopd-tiny.yaml", ["logging.rollouts=true"])
