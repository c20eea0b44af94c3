"""ALFWorld games prepared ahead: a generated game is unprepared until it is in the cache; a server makes it
in its worker's preparation lane (a helper process), and `prepare_ahead` names the games made from the start."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envhub.client import EnvhubClient
from envhub.envs.alfworld.generator.scene import ROOMS
from envhub.envs.alfworld.kind import AlfWorldKind
from envhub.envs.alfworld.taskset import GeneratedTaskSet
from envhub.server.background import BackgroundServer


def test_a_generated_game_is_prepared_once_it_is_in_the_cache(tmp_path: Path) -> None:
    taskset = GeneratedTaskSet(cache_dir=tmp_path, room=ROOMS["small"])
    kind = AlfWorldKind(taskset=taskset, rooms="small", prepare_ahead=2)
    ahead = kind.tasks_to_prepare()
    assert [spec.task_id for spec in ahead] == [
        f"{split}/{index:05d}" for split in ("train", "valid_seen", "valid_unseen") for index in range(2)
    ]
    task = kind.task("train/00001")
    assert not kind.prepared(task)
    kind.prepare(task)
    assert kind.prepared(task) and taskset.record_path("train", 1).exists()
    assert AlfWorldKind.from_config({"rooms": "small", "prepare_ahead": "3"}).config()["prepare_ahead"] == "3"
    with pytest.raises(ValueError, match="prepare_ahead"):
        AlfWorldKind.from_config({"prepare_ahead": "many"})


def test_prepare_ahead_names_splits_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVHUB_CACHE", str(tmp_path))
    kind = AlfWorldKind.from_config({"rooms": "small", "prepare_ahead": "valid_seen:1, train:3"})
    assert [spec.task_id for spec in kind.tasks_to_prepare()] == [
        "valid_seen/00000",
        *(f"train/{index:05d}" for index in range(3)),
    ]
    assert kind.config()["prepare_ahead"] == "valid_seen:1,train:3"
    for bad in ("train:3,train:4", "train:x", ":3", "test:2"):
        with pytest.raises(ValueError, match="prepare_ahead"):
            AlfWorldKind.from_config({"rooms": "small", "prepare_ahead": bad})


def test_a_server_creates_a_session_on_a_game_not_made_yet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVHUB_CACHE", str(tmp_path))  # workers and their helpers inherit it: a cold cache
    config = {"alfworld": {"rooms": "small"}}
    with (
        BackgroundServer.local("alfworld", workers=1, environment_config=config) as server,
        EnvhubClient(server.target, timeout=300) as client,
    ):
        session = client.create_session("alfworld", "train/00002")
        assert session.view.text
        assert client.step(session.session_id, "look").step_index == 1
    made = GeneratedTaskSet(cache_dir=Path(os.environ["ENVHUB_CACHE"]) / "alfworld", room=ROOMS["small"])
    assert made.record_path("train", 2).exists()
