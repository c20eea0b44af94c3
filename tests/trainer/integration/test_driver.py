"""The driver end to end: real ALFWorld server, tiny student and teacher, in-process and Ray workers."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from trainer.batching import SyncGroups
from trainer.config import TrainerConfig
from trainer.driver import train, train_step
from trainer.metrics import CORE_PLOTTED, RUN_TIME, read_metrics
from trainer.rollout import SamplingSettings
from trainer.workers import WorkerGroup


def _config(alfworld_config: Callable[..., TrainerConfig], server: str, out: Path, **sections: object) -> TrainerConfig:
    """A 2-step ATOD run into `out` that checkpoints at its end."""
    defaults = {
        "steps": 2,
        "output_dir": str(out),
        "checkpoint_every": 2,
        "objective": {"name": "atod", "params": {"coef_anneal_steps": 2}},
    }
    return alfworld_config(server, **{**defaults, **sections})


def test_atod_run_logs_diagnostics_checkpoints_and_resumes(
    tmp_path: Path, alfworld_config: Callable[..., TrainerConfig], alfworld_server: str
) -> None:
    held_out = {"every": 2, "num_tasks": 2, "at_start": True}
    config = _config(alfworld_config, alfworld_server, tmp_path / "run", eval=held_out)
    result = train(config, progress=False)
    assert result.final_step == 2 and result.checkpoint and result.checkpoint.endswith("step_000002")
    start, *records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert start["step"] == 0 and start["eval/trajectories"] == 2.0  # eval.at_start: the warm student, step 0
    assert "learner/step" not in start and (tmp_path / "run" / "episodes" / "step_000000.html").is_file()
    assert [r["step"] for r in records] == [1, 2]
    # the ATOD schedule (T = 2): kappa 1.0 -> 0.55, rho 0.1 -> 0.55; T-DUR diagnostics present
    assert records[0]["hybrid/kl_coef"] == pytest.approx(1.0) and records[1]["hybrid/kl_coef"] == pytest.approx(0.55)
    assert records[0]["hybrid/rl_coef"] == pytest.approx(0.1) and records[1]["hybrid/rl_coef"] == pytest.approx(0.55)
    for key in ("tdur/active_ratio", "tdur/mean_weight", "tdur/gap_mean", "actor/entropy",
                "rollout/success_rate", "rollout/mean_turns", "teacher/tokens_scored", "teacher/wall_s"):  # fmt: skip
        assert key in records[0], key
    assert 0.0 <= records[0]["tdur/mean_weight"] <= 1.0
    # held-out evaluation every 2 steps; every plotted panel is a logged metric
    assert "eval/success_rate" not in records[0] and records[1]["eval/trajectories"] == 2.0
    assert set(CORE_PLOTTED) <= set(records[1]), set(CORE_PLOTTED) - set(records[1])
    assert (tmp_path / "run" / "training.png").stat().st_size > 1000
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))
    # resume: the step count continues from the checkpoint; checkpoint_keep=1 leaves the newest one on disk
    resumed = train(config.model_copy(update={"steps": 3, "checkpoint_keep": 1}), progress=False)
    assert resumed.final_step == 3
    assert [p.name for p in (tmp_path / "run" / "checkpoints").iterdir()] == ["step_000003"]
    after = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in after] == [0, 1, 2, 3]  # no 2nd step 0
    # the run's wall time goes on from the first attempt's: every record's later than the one before
    times = [r[RUN_TIME] for r in after]
    assert times == sorted(times) and times[0] > 0 and times[3] > times[2] == records[1][RUN_TIME]
    assert read_metrics(tmp_path / "run" / "metrics.jsonl")[3]["hybrid/kl_coef"] == pytest.approx(0.1)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["steps"] == 3


@pytest.mark.slow
def test_ray_workers_run_one_step(
    tmp_path: Path, alfworld_config: Callable[..., TrainerConfig], alfworld_server: str
) -> None:
    pytest.importorskip("ray")
    import ray

    config = _config(
        alfworld_config, alfworld_server, tmp_path / "ray", steps=1, ray={"enabled": True, "object_store_mb": 100}
    )
    try:
        result = train(config, progress=False)
    finally:
        ray.shutdown()
    assert result.final_step == 1
    record = read_metrics(tmp_path / "ray" / "metrics.jsonl")[0]
    assert record["rollout/trajectories"] == 4 and record["learner/step"] == 1


def test_reply_level_opd_trains_on_the_listed_turns(
    tmp_path: Path, alfworld_config: Callable[..., TrainerConfig], alfworld_server: str
) -> None:
    """`kl_over: replies` under `choice` (docs/design/042): every turn is drawn among its listed replies, so the
    learner takes the KL over the lists alone (no token pass: every token advantage is 0) and logs it."""
    config = _config(
        alfworld_config,
        alfworld_server,
        tmp_path / "run",
        objective={"name": "opd", "params": {"kl_over": "replies"}},
        rollout={"action_match": "choice"},
    )
    assert train(config, progress=False).final_step == 2
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    for record in records:
        assert record["opd/listed_kl"] > 0 and 0.0 <= record["opd/listed_agree"] <= 1.0
        assert record["opd/listed_weight"] == 1.0 and record["actor/pg_loss"] == 0.0
        assert "actor/entropy" not in record  # the token pass was skipped
        assert record["rollout/invalid_turn_ratio"] == 0.0


def test_reply_level_grpo_trains_on_the_listed_turns_without_a_teacher(
    tmp_path: Path, alfworld_config: Callable[..., TrainerConfig], alfworld_server: str
) -> None:
    """`rl_over: replies` under `choice` (docs/design/047): every turn is drawn among its listed replies, so GRPO's
    term is taken on each drawn reply's probability over its list alone (no token pass) and no teacher runs."""
    config = _config(
        alfworld_config,
        alfworld_server,
        tmp_path / "run",
        objective={"name": "grpo", "params": {"rl_over": "replies"}},
        rollout={"action_match": "choice", "group_size": 2, "tasks_per_step": 2},
    )
    assert train(config, progress=False).final_step == 2
    for record in read_metrics(tmp_path / "run" / "metrics.jsonl"):
        assert record["actor/choice_entropy"] > 0 and record["actor/reply_ratio_mean"] == pytest.approx(1.0)
        assert "actor/reply_pg_loss" in record and "opd/listed_kl" not in record
        assert "actor/entropy" not in record  # the token pass was skipped


def test_each_evaluation_plays_eval_samples_episodes_per_task(
    tmp_path: Path, alfworld_config: Callable[..., TrainerConfig], alfworld_server: str
) -> None:
    config = _config(
        alfworld_config, alfworld_server, tmp_path / "run", steps=1, eval={"every": 1, "num_tasks": 2, "samples": 3}
    )
    assert train(config, progress=False).final_step == 1
    (record,) = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert record["eval/trajectories"] == 6.0 and record["eval/success_rate"] in {i / 6 for i in range(7)}


def test_held_out_play_is_the_policy_alone_when_training_rollouts_take_over(
    alfworld_config: Callable[..., TrainerConfig], alfworld_server: str
) -> None:
    """With `rollout.strategy: recovery` the training rollouts hand stalled episodes to the teacher; the held-out
    play of `eval.every` measures the student alone, as `trainer eval` does."""
    config = alfworld_config(
        alfworld_server,
        env={"max_turns": 5},
        rollout={"strategy": "recovery", "snapshots": True, "group_size": 1, "tasks_per_step": 4},
        divopd={"recovery": {"patience": 1}},
        objective={"name": "opd"},
    )
    group = WorkerGroup(config, [alfworld_server])
    try:
        tasks = [(task_id, 0) for task_id in group.task_ids("train", ["pick_and_place_simple"])[:4]]
        sampling = SamplingSettings(max_new_tokens=8, temperature=1.0, seed=0)
        trained, stats = group.rollout(tasks, sampling, 1)
        held_out, _ = group.play_held_out(tasks, sampling)
    finally:
        group.close()
    assert stats.takeovers > 0 and any(turn.teacher for episode in trained for turn in episode.turns)
    assert len(held_out) == 4 and not any(turn.teacher for episode in held_out for turn in episode.turns)


def test_held_out_evaluations_play_the_weights_moving_average(
    alfworld_config: Callable[..., TrainerConfig], alfworld_server: str
) -> None:
    """With `optim.ema_decay` the held-out play of `eval.every` reads the learner's moving average, as checkpoints
    do, and the rollout workers go back to the trained weights after it (training stays on-policy)."""
    config = alfworld_config(alfworld_server, optim={"lr": 5e-2, "ema_decay": 0.5}, objective={"name": "opd"})
    group = WorkerGroup(config, [alfworld_server])

    def played() -> dict[str, torch.Tensor]:
        model = group.rollout_workers[0].ref.backend.model  # the in-process worker's own engine
        return {name: t.detach().clone() for name, t in model.state_dict().items()}

    try:
        composer = SyncGroups(config.prompt.context)
        tasks = [(task_id, 0) for task_id in group.task_ids("train", ["pick_and_place_simple"])[:2]]
        for step in range(2):
            train_step(config, group, composer, tasks, step)
        trained, average = group.executor.gather([group.weight_sync.full_state(), group.evaluated_weights()])
        assert played().keys() == trained.keys() == average.keys()
        assert any(not torch.equal(trained[name], average[name]) for name in trained)
        with group.evaluating():
            for name, tensor in played().items():
                torch.testing.assert_close(tensor, average[name])
        for name, tensor in played().items():
            torch.testing.assert_close(tensor, trained[name])
    finally:
        group.close()
