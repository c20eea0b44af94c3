"""`trainer train` with `backend.kind: vllm` on vLLM's CPU build (.venv-vllm-cpu, `make test-vllm-cpu`): 2 ATOD
steps against a real local ALFWorld server, under Ray (the student's and the teacher's engines each a Ray actor
process, with the learner in a placement group of CPU bundles; the learner's weights reach the rollout engine
through the object store, weight sync `state_dict`)."""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from trainer.backends import HFBackend
from trainer.backends.base import SamplingSettings
from trainer.config import TrainerConfig
from trainer.driver import train
from trainer.metrics import read_metrics
from trainer.models.loading import load_tokenizer
from trainer.models.tiny import TinyModels

pytestmark = [
    pytest.mark.vllm_cpu,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM's CPU build (make venv-vllm-cpu)"),
]


def _moved(before: Path, after: Path, prompts: list[list[int]]) -> float:
    """Mean |log-prob change| one learner step made on responses sampled from `before` (what a stale engine's
    rollout log-probs would be off by)."""
    old, new = HFBackend.from_pretrained(before), HFBackend.from_pretrained(after)
    responses = [g.token_ids for g in old.generate(prompts, SamplingSettings(max_new_tokens=8, seed=0))]
    pairs = zip(old.score(prompts, responses), new.score(prompts, responses), strict=True)
    diffs = [abs(a - b) for o, n in pairs for a, b in zip(o, n, strict=True)]
    return sum(diffs) / len(diffs)


def test_atod_steps_on_vllm_cpu_engines_under_ray(
    tmp_path: Path, tiny_models: TinyModels, alfworld_config: Callable[..., TrainerConfig], alfworld_server: str
) -> None:
    import ray

    config = alfworld_config(
        alfworld_server,
        steps=2,
        output_dir=str(tmp_path / "run"),
        checkpoint_every=1,
        objective={"name": "atod", "params": {"coef_anneal_steps": 2}},
        backend={"kind": "vllm", "cpu_kv_cache_mb": 64},
        optim={"lr": 0.05},  # a step that moves the log-probs far more than bf16 rounding
        ray={"enabled": True, "object_store_mb": 100},
        placement={"mode": "colocated", "learner_gpus": 1},  # one CPU bundle: learner, student and teacher engines
    )
    assert config.weight_sync() == "state_dict" and config.vllm_on_cpu()
    try:
        result = train(config, progress=False)
    finally:
        ray.shutdown()
    assert result.final_step == 2
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    for record in records:
        print({k: round(v, 4) for k, v in record.items() if k.split("/")[0] in ("actor", "rollout", "teacher")})
        assert record["rollout/trajectories"] == 4 and record["teacher/tokens_scored"] > 0
        assert math.isfinite(record["actor/pg_loss"])
    # Step 2's rollouts came from the engine after the step-1 push: vLLM's bf16 log-probs against the learner's
    # fp32 recomputation with the step-1 weights. A stale engine would be off by what step 1 moved.
    tokenizer = load_tokenizer(tiny_models.student)
    prompts = [tokenizer.encode(text) for text in ("go to countertop 1", "You arrive at fridge 1.", "<think>")]
    moved = _moved(tiny_models.student, tmp_path / "run" / "checkpoints" / "step_000001", prompts)
    synced = records[1]["actor/rollout_logp_abs_diff"]
    print(f"step 2: engine vs learner mean |logp diff| {synced:.2e}; step 1 moved log-probs by {moved:.2e}")
    assert synced < moved / 10


def test_cpu_build_resolves_state_dict_never_sleeps_and_refuses_cuda_transfers(
    alfworld_config: Callable[..., TrainerConfig],
) -> None:
    from trainer.config import ConfigError
    from trainer.workers.factory import sleeps, vllm_engine_kwargs

    ray, placed = {"enabled": True}, {"mode": "colocated", "learner_gpus": 1, "sleep_level": 2}
    config = alfworld_config("h:1", backend={"kind": "vllm"}, ray=ray, placement=placed)
    assert config.vllm_on_cpu() and config.weight_sync() == "state_dict" and not sleeps(config)
    assert vllm_engine_kwargs(config)["enforce_eager"] is True
    grpo = {"name": "grpo"}  # Ray off: one process, one engine
    assert alfworld_config("h:1", backend={"kind": "vllm"}, objective=grpo).weight_sync() == "inproc"
    for sync, placement in (("ipc", placed), ("nccl", {**placed, "mode": "split"})):
        with pytest.raises(ConfigError, match="moves CUDA tensors"):
            alfworld_config("h:1", backend={"kind": "vllm", "weight_sync": sync}, ray=ray, placement=placement)
