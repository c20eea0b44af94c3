"""OfficialTaskSet reads the json_2.1.1 layout (written here from generated games: it cannot be downloaded)."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from envhub.core.errors import EnvhubError
from envhub.envs.alfworld.generator.solver import expert_env
from envhub.envs.alfworld.taskset import AlfredGame, GeneratedTaskSet, OfficialTaskSet, game_path

PICKED = {"train": [0, 1, 2], "valid_seen": [0], "valid_unseen": [0, 1]}


def _trial_dir(root: Path, game: AlfredGame) -> Path:
    params = game.traj_data["pddl_params"]
    task = f"{game.task_type}-{params['object_target']}-None-{params['parent_target'] or 'None'}-{game.floorplan[9:]}"
    return root / game.split / task / f"trial_T20190909_{game.index:06d}"


def _write(folder: Path, game_json: dict[str, object], traj_data: dict[str, object]) -> None:
    folder.mkdir(parents=True)
    (folder / "game.tw-pddl").write_text(json.dumps(game_json))
    (folder / "traj_data.json").write_text(json.dumps(traj_data))


@pytest.fixture(scope="module")
def official(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[AlfredGame]]]:
    """An official-layout folder holding generated games plus entries ALFWorld skips."""
    generated = GeneratedTaskSet(seed=11, cache_dir=tmp_path_factory.mktemp("cache"))
    root = tmp_path_factory.mktemp("alfworld_data") / "json_2.1.1"
    games = {split: [generated.game(split, i) for i in indices] for split, indices in PICKED.items()}
    for split_games in games.values():
        for game in split_games:
            _write(_trial_dir(root, game), game.game_json, game.traj_data)
    template = games["train"][0]
    unsolvable = {**template.game_json, "solvable": False}
    _write(root / "train" / "pick_and_place_simple-Mug-None-Shelf-1" / "trial_T1", unsolvable, template.traj_data)
    movable = root / "train" / "pick_and_place_with_movable_recep-Apple-Bowl-Fridge-2" / "trial_T1"
    _write(movable, template.game_json, {**template.traj_data, "task_type": "pick_and_place_with_movable_recep"})
    sliced = root / "train" / "pick_heat_then_place_in_recep-AppleSliced-None-Fridge-4" / "trial_T1"
    _write(sliced, template.game_json, template.traj_data)
    no_key = {k: v for k, v in template.game_json.items() if k != "solvable"}
    _write(root / "valid_seen" / "pick_and_place_simple-Mug-None-Shelf-5" / "trial_T1", no_key, template.traj_data)
    (root / "train" / "pick_two_obj_and_place-Cup-None-Shelf-3" / "trial_T1").mkdir(parents=True)
    return root, games


def test_reads_the_official_layout(official: tuple[Path, dict[str, list[AlfredGame]]]) -> None:
    root, games = official
    taskset = OfficialTaskSet(root)
    assert taskset.splits() == ["train", "valid_seen", "valid_unseen"]
    assert {s: taskset.size(s) for s in taskset.splits()} == {s: len(g) for s, g in games.items()}
    assert taskset.version == "official-json_2.1.1-3-1-2"
    for split, expected_games in games.items():
        read = sorted((taskset.game(split, i) for i in range(taskset.size(split))), key=lambda g: g.task_id)
        expected = sorted(expected_games, key=lambda g: str(_trial_dir(root, g).relative_to(root)))
        for got, want in zip(read, expected, strict=True):
            assert got.task_id == str(_trial_dir(root, want).relative_to(root))
            assert (got.task_type, got.floorplan, got.goal) == (want.task_type, want.floorplan, want.goal)
            assert got.game_json == want.game_json and got.traj_data == want.traj_data
            assert game_path(got) == Path(got.path) == _trial_dir(root, want) / "game.tw-pddl"
            assert taskset.locate(got.task_id) == (split, got.index)


def test_official_game_plays_from_its_file(official: tuple[Path, dict[str, list[AlfredGame]]]) -> None:
    game = OfficialTaskSet(official[0]).game("valid_seen", 0)
    env = expert_env()[0]  # the process's one ALFWorld env (see test_generator.player)
    env.load(str(game_path(game)))
    state = env.reset()
    for action in game.game_json["walkthrough"]:
        state, _, _ = env.step(action)
    assert state["won"]


def test_missing_data_and_unknown_tasks_are_clear_errors(
    tmp_path: Path, official: tuple[Path, dict[str, list[AlfredGame]]]
) -> None:
    with pytest.raises(EnvhubError) as missing:
        OfficialTaskSet(tmp_path / "json_2.1.1")
    assert (missing.value.code, missing.value.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "OFFICIAL_DATA_MISSING")
    taskset = OfficialTaskSet(official[0])
    with pytest.raises(EnvhubError) as unknown:
        taskset.locate("train/pick_and_place_simple-Mug-None-Shelf-1/trial_T1")
    assert unknown.value.reason == "TASK_NOT_FOUND"
    with pytest.raises(EnvhubError) as outside:
        taskset.game("valid_seen", 1)
    assert outside.value.code == grpc.StatusCode.NOT_FOUND
