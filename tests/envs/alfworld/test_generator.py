"""The ALFWorld task generator and task sets, checked against the real alfworld/textworld engines."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
from alfworld.agents.environment.alfred_tw_env import TASK_TYPES as ALFWORLD_TASK_TYPES
from alfworld.gen import goal_library

from envhub.core.errors import EnvhubError
from envhub.envs.alfworld.generator.__main__ import main as generator_main
from envhub.envs.alfworld.generator.build import GameRecord, generate
from envhub.envs.alfworld.generator.layouts import floor_plan
from envhub.envs.alfworld.generator.solver import expert_env, solve
from envhub.envs.alfworld.generator.splits import (
    SPLIT_SIZES,
    UNSEEN_FLOOR_PLANS,
    floor_plans,
    rooms_for,
    task_types,
)
from envhub.envs.alfworld.generator.tasks import TASK_TYPES
from envhub.envs.alfworld.taskset import AlfredGame, GeneratedTaskSet, game_path

SEED = 3


@pytest.fixture(scope="module")
def taskset(tmp_path_factory: pytest.TempPathFactory) -> GeneratedTaskSet:
    return GeneratedTaskSet(seed=SEED, cache_dir=tmp_path_factory.mktemp("alfcache"))


@pytest.fixture(scope="module")
def one_per_type(taskset: GeneratedTaskSet) -> dict[str, AlfredGame]:
    """The first train game of every task type."""
    order = task_types("train", SEED)
    return {t: taskset.game("train", order.index(t)) for t in TASK_TYPES}


@pytest.fixture(scope="module")
def player() -> Any:
    """ALFWorld's env (AlfredExpert(AlfredDemangler(PddlEnv))) to replay games from their files.

    The process's one copy, shared with the generator's check: every `PddlEnv` loads its own
    libdownward copy, and test processes that also unload copies have crashed loading new ones.
    """
    return expert_env()[0]


def test_task_types_are_alfworlds() -> None:
    assert tuple(ALFWORLD_TASK_TYPES.values()) == TASK_TYPES


def test_split_sizes_and_type_counts_mirror_alfworld(taskset: GeneratedTaskSet) -> None:
    assert [taskset.size(s) for s in taskset.splits()] == [3553, 140, 134]
    for split in taskset.splits():
        order = task_types(split, SEED)
        assert len(order) == taskset.size(split)
        assert {t: order.count(t) for t in TASK_TYPES} == SPLIT_SIZES[split]


def test_every_task_type_is_planner_solvable(
    taskset: GeneratedTaskSet, one_per_type: dict[str, AlfredGame], player: Any
) -> None:
    for task_type, game in one_per_type.items():
        assert game.task_type == task_type == game.traj_data["task_type"]
        walkthrough = game.game_json["walkthrough"]
        assert game.game_json["solvable"] and 0 < len(walkthrough) <= 50
        player.load(str(game_path(game, taskset.cache_dir)))
        state = player.reset()
        assert not state["won"]
        assert f"Your task is to: {game.goal}" in state["feedback"]
        for action in walkthrough:
            assert action in state["admissible_commands"], (task_type, action)
            state, _, _ = player.step(action)
        assert state["won"], task_type


def test_solver_plays_as_alfworlds_planner_expert(
    taskset: GeneratedTaskSet, one_per_type: dict[str, AlfredGame], player: Any
) -> None:
    """`solve` (envhub's engine) chooses what `AlfredExpert(expert_type="planner")` chooses, state by state."""
    for game in one_per_type.values():
        player.load(str(game_path(game, taskset.cache_dir)))
        state, alfworlds = player.reset(), []
        while not state["won"]:
            alfworlds.append(state["extra.expert_plan"][0])
            state, _, _ = player.step(alfworlds[-1])
        assert solve(game.game_json, game.traj_data) == alfworlds == game.game_json["walkthrough"]


def test_goal_sentences_follow_alfworld_templates(one_per_type: dict[str, AlfredGame]) -> None:
    for task_type, game in one_per_type.items():
        params = game.traj_data["pddl_params"]
        expected = {
            template.format(
                obj=params["object_target"].lower(),
                recep=params["parent_target"].lower(),
                toggle=params["toggle_target"].lower(),
                mrecep="",
            )
            + "."
            for template in goal_library.gdict[task_type]["templates"]
        }
        assert game.goal in expected


def test_names_are_alfworlds(taskset: GeneratedTaskSet, one_per_type: dict[str, AlfredGame], player: Any) -> None:
    mangled = re.compile(r"^[A-Z][A-Za-z]*(_bar_(_plus_|_minus_)?\d\d_dot_\d\d){3}(_bar_[A-Za-z]+)?$")
    for game in one_per_type.values():
        problem = game.game_json["pddl_problem"]
        declared = re.findall(r"^\s+([A-Za-z]\S*) - (?:object|receptacle)$", problem, re.MULTILINE)
        assert declared and all(mangled.match(name) for name in declared)
        player.load(str(game_path(game, taskset.cache_dir)))
        intro = player.reset()["feedback"]
        assert re.search(r"you see a [a-z]+ \d", intro)
        assert "basinbasin" not in intro


def test_rooms_are_subsets_of_the_floor_plan(taskset: GeneratedTaskSet, one_per_type: dict[str, AlfredGame]) -> None:
    for game in one_per_type.values():
        plan = floor_plan(int(game.floorplan.removeprefix("FloorPlan")))
        problem = game.game_json["pddl_problem"]
        declared = re.findall(r"^\s+([A-Za-z]\S*) - receptacle$", problem, re.MULTILINE)
        assert taskset.room.min_receptacles <= len(declared) <= taskset.room.max_receptacles or len(declared) == len(
            plan.receptacles
        )
        demangled = {
            d.replace("_plus_", "+").replace("_minus_", "-").replace("_dot_", ".").replace("_bar_", "|")
            for d in declared
        }
        assert demangled <= {r.thor_id for r in plan.receptacles}


def test_same_split_index_seed_gives_identical_game(taskset: GeneratedTaskSet) -> None:
    cached = taskset.record("valid_seen", 5)
    fresh = generate("valid_seen", 5, SEED, taskset.domain, taskset.grammar, taskset.room)
    assert fresh.to_json() == cached.to_json()
    other_seed = generate("valid_seen", 5, SEED + 1, taskset.domain, taskset.grammar, taskset.room)
    assert other_seed.pddl_problem != cached.pddl_problem


def test_another_process_generates_the_same_game(taskset: GeneratedTaskSet, tmp_path: Path) -> None:
    """Other hash seeds (set iteration order) and a fresh interpreter give the same bytes."""
    script = (
        "import hashlib, json, sys; from pathlib import Path;"
        "from envhub.envs.alfworld.taskset import GeneratedTaskSet;"
        f"r = GeneratedTaskSet(seed={SEED}, cache_dir=Path(sys.argv[1])).record('valid_unseen', 7).to_json();"
        "print(hashlib.sha256(json.dumps(r, sort_keys=True).encode()).hexdigest())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    here = json.dumps(taskset.record("valid_unseen", 7).to_json(), sort_keys=True).encode()
    assert out.stdout.strip() == hashlib.sha256(here).hexdigest()


def test_cache_hit_returns_the_cached_game(taskset: GeneratedTaskSet, tmp_path: Path) -> None:
    first = taskset.game("valid_unseen", 3)
    again = GeneratedTaskSet(seed=SEED, cache_dir=taskset.cache_dir.parent).game("valid_unseen", 3)
    assert again == first
    path = taskset.record_path("valid_unseen", 3)
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "goal": "marker goal."}))
    assert taskset.game("valid_unseen", 3) is first  # a task set keeps the games it made in memory
    fresh = GeneratedTaskSet(seed=SEED, cache_dir=taskset.cache_dir.parent)
    assert fresh.game("valid_unseen", 3).goal == "marker goal."  # another reads the file, does not generate
    path.write_text(json.dumps(record))
    shared = sorted(p.name for p in taskset.cache_dir.iterdir() if p.is_file())
    assert shared == ["alfred.pddl", "alfred.twl2"]
    assert "pddl_domain" not in record and "grammar" not in record


def test_seen_and_unseen_floor_plans_are_disjoint(taskset: GeneratedTaskSet) -> None:
    seen = set(floor_plans("train"))
    assert seen == set(floor_plans("valid_seen"))
    assert set(floor_plans("valid_unseen")) == set(UNSEEN_FLOOR_PLANS)
    assert not seen & set(UNSEEN_FLOOR_PLANS)
    for split in taskset.splits():
        assert all(rooms_for(split, t) for t in TASK_TYPES), split
    for index in range(3):
        assert int(taskset.game("valid_unseen", index).floorplan.removeprefix("FloorPlan")) in UNSEEN_FLOOR_PLANS
        assert int(taskset.game("valid_seen", index).floorplan.removeprefix("FloorPlan")) in seen


def test_bad_split_and_index_are_not_found(taskset: GeneratedTaskSet) -> None:
    with pytest.raises(EnvhubError) as unknown:
        taskset.game("test", 0)
    assert (unknown.value.code, unknown.value.reason) == (grpc.StatusCode.NOT_FOUND, "UNKNOWN_SPLIT")
    for index in (-1, 140):
        with pytest.raises(EnvhubError) as outside:
            taskset.game("valid_seen", index)
        assert (outside.value.code, outside.value.reason) == (grpc.StatusCode.NOT_FOUND, "TASK_NOT_FOUND")
    assert taskset.locate("valid_seen/00007") == ("valid_seen", 7)
    with pytest.raises(EnvhubError):
        taskset.locate("valid_seen/x")


def test_game_path_writes_game_and_traj_data(taskset: GeneratedTaskSet, one_per_type: dict[str, AlfredGame]) -> None:
    game = one_per_type["pick_and_place_simple"]
    path = game_path(game, taskset.cache_dir)
    assert json.loads(path.read_text()) == game.game_json
    assert json.loads((path.parent / "traj_data.json").read_text()) == game.traj_data
    with pytest.raises(ValueError):
        game_path(game)


def test_bulk_command_and_statistics(
    taskset: GeneratedTaskSet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache_root = str(taskset.cache_dir.parent)
    common = ["--seed", str(SEED), "--workers", "1", "--cache-dir", cache_root, "--rooms", "small"]
    generator_main(["--split", "valid_seen", "--start", "20", "--count", "2", *common])
    assert "2 games in" in capsys.readouterr().out
    for index in (20, 21):
        made_in_worker = GameRecord.from_json(json.loads(taskset.record_path("valid_seen", index).read_text()))
        assert made_in_worker == generate("valid_seen", index, SEED, taskset.domain, taskset.grammar, taskset.room)

    generator_main(["--stats", "1", "--out", str(tmp_path), *common])
    stats = json.loads((tmp_path / "alfworld-taskset.json").read_text())
    assert stats["games"] == 6 and list(stats["per_type"]) == list(TASK_TYPES)
    for task_type, row in stats["per_type"].items():
        game = taskset.game("train", task_types("train", SEED).index(task_type))
        assert row["solution_length"]["max"] == len(game.game_json["walkthrough"])
    assert "| pick_two_obj_and_place | 1 |" in (tmp_path / "alfworld-taskset.md").read_text()
