"""A run's local server starts making the tasks the run will play (ALFWorld's generated games) at once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from envhub.client import EnvhubClient
from trainer.config import config_from_dict
from trainer.runs import env_targets, tasks_to_prepare


def _config(**sections: Any) -> Any:
    return config_from_dict({"objective": {"name": "grpo"}, "models": {"teacher": None}, **sections})


def test_the_bounded_training_tasks_and_the_held_out_ones_are_prepared() -> None:
    assert tasks_to_prepare(_config(env={"max_tasks": 8}, eval={"every": 5, "num_tasks": 4})) == {
        "train": 8,
        "valid_unseen": 4,
    }
    assert tasks_to_prepare(_config(env={"max_tasks": 8})) == {"train": 8}
    assert tasks_to_prepare(_config()) == {}  # the whole split: its order is the sampler's, not the server's
    assert tasks_to_prepare(_config(env={"max_tasks": 8, "families": ["pick_and_place_simple"]})) == {}


@pytest.mark.slow
def test_a_local_alfworld_server_makes_them_from_its_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("alfworld")
    monkeypatch.setenv("ENVHUB_CACHE", str(tmp_path))  # a cold cache, inherited by the server
    with env_targets(_config(env={"max_tasks": 2})) as (target,), EnvhubClient(target, timeout=60) as client:
        (info,) = client.list_environments()
        assert info.config["prepare_ahead"] == "train:2"
        made: list[str] = []
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            made = sorted(p.name for p in tmp_path.glob("alfworld/*/train/*.json"))
            if len(made) == 2:
                break
            time.sleep(0.5)
        assert made == ["00000.json", "00001.json"]  # made before any session asked for them
