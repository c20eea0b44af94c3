"""The asynchronous DivOPD driver end to end: real ALFWorld server, tiny models, producers racing the learner."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from trainer.batching.divopd_stats import PLOTTED as DIVOPD_KEYS
from trainer.config import TrainerConfig, config_from_dict
from trainer.driver import train
from trainer.gradient_audit import COSINE, DROPPED_GRAD_NORM_SHARE, POOL_ROWS, PROJECTION
from trainer.metrics import read_metrics


def _config(alfworld_config: Callable[..., TrainerConfig], server: str, out: Path, **sections: object) -> TrainerConfig:
    """A 2-step DivOPD run (OPD, 2 producers) into `out`, without checkpoints."""
    defaults = {
        "steps": 2,
        "output_dir": str(out),
        "checkpoint_every": 0,
        "rollout": {"group_size": 1},
        "objective": {"name": "opd", "reduction": "turn-mean-token-mean"},
        "divopd": {"enabled": True, "batch_rows": 4, "initial_cap": 1, "producers": 2},
    }
    return alfworld_config(server, **{**defaults, **sections})


@pytest.mark.parametrize(("reader", "schedule"), [("divopd", "async"), ("vanilla", "lockstep")])
def test_async_run_logs_divopd_diagnostics(
    tmp_path: Path, alfworld_config: Callable[..., TrainerConfig], alfworld_server: str, reader: str, schedule: str
) -> None:
    config = _config(alfworld_config, alfworld_server, tmp_path / reader)
    config.divopd.reader = reader  # type: ignore[assignment]
    config.divopd.schedule = schedule  # type: ignore[assignment]
    config.divopd.producers = 2 if schedule == "async" else 1
    config.divopd.audit_every = 2
    result = train(config, progress=False)
    assert result.final_step == 2 and result.checkpoint and result.checkpoint.endswith("step_000002")
    records = read_metrics(tmp_path / reader / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        for key in DIVOPD_KEYS:
            assert key in record, key
        assert 1 <= record["learner/rows"] <= 4
        assert record["divopd/selected_rows"] <= 4
        assert record["learner/supervised_tokens"] > 0
    assert records[-1]["divopd/arrived_rows"] >= records[-1]["divopd/drained_rows"] > 0
    assert (tmp_path / reader / "training.png").stat().st_size > 1000
    assert PROJECTION not in records[0] and -1 <= records[1][COSINE] <= 1  # the gradient audit of update 2 only
    assert records[1][POOL_ROWS] >= records[1]["learner/rows"] and 0 <= records[1][DROPPED_GRAD_NORM_SHARE] < 1


@pytest.mark.slow
def test_async_run_with_ray_actors_in_their_gpu_slots(
    tmp_path: Path, alfworld_config: Callable[..., TrainerConfig], alfworld_server: str
) -> None:
    """Producers, teacher and learner are placed like the synchronous path (`placement.*`), here on a
    local Ray with 3 logical GPUs (the models stay on the CPU): split mode needs one GPU per role."""
    pytest.importorskip("ray")
    import ray

    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.init(num_gpus=3, num_cpus=2, object_store_memory=100 * 1024 * 1024, include_dashboard=False)
    try:
        too_many = _config(
            alfworld_config,
            alfworld_server,
            tmp_path / "too-many",
            ray={"enabled": True},
            placement={"mode": "split", "learner_gpus": 2, "ready_timeout_s": 2},
        )
        with pytest.raises(RuntimeError, match="could not reserve"):  # 2 learner + 2 producer + 1 teacher GPUs
            train(too_many, progress=False)
        config = _config(
            alfworld_config,
            alfworld_server,
            tmp_path / "ray",
            ray={"enabled": True},
            placement={"mode": "split", "learner_gpus": 1},
        )
        config.divopd.producers = 1
        result = train(config, progress=False)
    finally:
        ray.shutdown()
    assert result.final_step == 2
    records = read_metrics(tmp_path / "ray" / "metrics.jsonl")
    assert records[-1]["divopd/arrived_rows"] > 0 and records[-1]["learner/step"] == 2


def test_divopd_config_names_the_remedy() -> None:
    from trainer.config import ConfigError

    with pytest.raises(ConfigError, match=r"prompt\.context to history"):
        config_from_dict({"divopd": {"enabled": True}, "prompt": {"context": "full"}})
    with pytest.raises(ConfigError, match=r"divopd\.reader"):
        config_from_dict({"divopd": {"reader": "random"}})


def test_async_run_evaluates_held_out_from_the_learners_weights(
    tmp_path: Path, alfworld_config: Callable[..., TrainerConfig], alfworld_server: str
) -> None:
    """`eval.every` on the async path: the sync driver's held-out protocol (both splits and their mean) with the
    learner's weights after each evaluated update (and with `at_start` before the first), logged as records of that
    step; `trainer eval` on that step's checkpoint (step 0: the student) gives the same numbers (same weights,
    seeds)."""
    from trainer.eval import evaluate

    eval_section = {"every": 1, "num_tasks": 2, "at_start": True}
    env = {"eval_splits": ["valid_seen", "valid_unseen"]}
    config = _config(alfworld_config, alfworld_server, tmp_path / "run", eval=eval_section, env=env, checkpoint_every=1)
    config.divopd.schedule = "lockstep"  # type: ignore[assignment]
    config.divopd.producers = 1
    train(config, progress=False)
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    held_out = {r["step"]: r for r in records if "eval/success_rate" in r}
    assert sorted(held_out) == [0, 1, 2]  # eval.at_start: step 0 is the starting student
    for step, record in held_out.items():
        assert "divopd/selected_rows" not in record  # a record of its own, not the update's
        seen, unseen = record["eval/valid_seen/success_rate"], record["eval/valid_unseen/success_rate"]
        assert record["eval/success_rate"] == pytest.approx((seen + unseen) / 2)
        checkpoint = tmp_path / "run" / "checkpoints" / f"step_{step:06d}" if step else config.models.student
        again = evaluate(config, str(checkpoint), targets=[alfworld_server], seed=config.seed)
        assert again.success_rate == pytest.approx(record["eval/success_rate"])
        assert again.mean_turns == pytest.approx(record["eval/mean_turns"])
        assert (tmp_path / "run" / "episodes" / f"step_{step:06d}.html").is_file()
