"""The shipped paper configs (atod.yaml, divopd.yaml, branchopd.yaml) run end to end on the server the trainer
starts itself, which serves ALFWorld's whole rooms (only the quickstart's tiny configs ask for small rooms), and
evaluate in and out of distribution (valid_seen, valid_unseen) and their mean in one report."""

from __future__ import annotations

from pathlib import Path

import pytest

from envhub.client import EnvhubClient
from trainer.config import config_from_dict, load_config
from trainer.driver import env_targets, train
from trainer.eval import evaluate
from trainer.metrics import read_metrics
from trainer.models.tiny import TinyModels

PAPER_CONFIGS = ("atod.yaml", "divopd.yaml", "branchopd.yaml")
TINY = ("quickstart.yaml", "grpo-tiny.yaml", "divopd-tiny.yaml", "branchopd-tiny.yaml")


def test_paper_configs_serve_whole_rooms_and_hold_out_both_alfworld_splits() -> None:
    for name in (*PAPER_CONFIGS, "grpo.yaml", "opd.yaml"):
        config = load_config(name)
        assert config.env.server_settings == {}, name  # the environment's defaults: whole rooms
        assert config.env.held_out_splits() == ["valid_seen", "valid_unseen"] and config.eval.num_tasks >= 140
    for name in TINY:
        assert load_config(name).env.server_settings == {"rooms": "small"}, name


def warm_up(client: EnvhubClient, families: list[str]) -> None:
    """Make the run's whole-room games once with a long deadline (a game takes seconds to generate, far more on
    a loaded machine); the server caches them, so the run's own CreateSession calls are quick."""
    for split, count in (("train", 4), ("valid_seen", 1), ("valid_unseen", 1)):
        tasks = [t for t in client.list_tasks("alfworld", split=split) if t.family in families][:count]
        for task in tasks:
            start = client.create_session("alfworld", task=task.task_id, seed=0)
            client.close_session(start.session_id)


def small(name: str, tiny_models: TinyModels, out: Path) -> dict:
    """The paper config at test size: tiny models, one short step, in-process workers; rooms and splits kept."""
    data = load_config(name).model_dump()
    data.update(steps=1, output_dir=str(out / name), checkpoint_every=0)
    data["models"] = {"student": str(tiny_models.student), "teacher": str(tiny_models.teacher)}
    data["backend"] = {**data["backend"], "device": "cpu"}
    data["ray"] = {**data["ray"], "enabled": False}
    data["env"].update(
        max_turns=2, families=["pick_and_place_simple"], max_tasks=4, step_timeout_s=900.0
    )  # whole-room games take seconds to make
    data["prompt"].update(style="compact", history_length=1, max_prompt_tokens=256)
    data["rollout"].update(tasks_per_step=2, max_new_tokens=8)
    data["eval"].update(num_tasks=1, every=1)
    if data["divopd"]["enabled"]:
        data["divopd"].update(batch_rows=2, schedule="lockstep", producers=1)
    if data["rollout"]["strategy"] == "branch":
        data["branch"].update(min_turn_gap=0)
    return data


@pytest.mark.slow
@pytest.mark.parametrize("name", PAPER_CONFIGS)
def test_paper_config_runs_end_to_end_on_whole_rooms(name: str, tiny_models: TinyModels, tmp_path: Path) -> None:
    pytest.importorskip("alfworld")
    config = config_from_dict(small(name, tiny_models, tmp_path))
    with env_targets(config) as targets:  # the server the trainer starts itself for `targets: [local]`
        with EnvhubClient(targets[0], timeout=900.0) as client:
            [info] = [e for e in client.list_environments() if e.name == "alfworld"]
            assert info.config["rooms"] == "whole"
            warm_up(client, config.env.families)
        running = config.model_copy(update={"env": config.env.model_copy(update={"targets": targets})})
        result = train(running, progress=False)
        assert result.final_step == 1
        [record] = [r for r in read_metrics(Path(config.output_dir) / "metrics.jsonl") if "eval/success_rate" in r]
        if not config.divopd.enabled:  # the async driver's held-out curve is checked in test_async_driver
            for split in ("valid_seen", "valid_unseen"):
                assert f"eval/{split}/success_rate" in record
            mean = (record["eval/valid_seen/success_rate"] + record["eval/valid_unseen/success_rate"]) / 2
            assert record["eval/success_rate"] == pytest.approx(mean)
        report = evaluate(running, targets=targets)  # `trainer eval`: both splits and their mean in one report
        assert report.split == "valid_seen+valid_unseen" and report.tasks == 2
        assert set(report.per_split) == {"valid_seen", "valid_unseen"}
        assert report.success_rate == pytest.approx(
            (report.per_split["valid_seen"]["success_rate"] + report.per_split["valid_unseen"]["success_rate"]) / 2
        )
