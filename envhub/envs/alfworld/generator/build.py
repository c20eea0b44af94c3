"""One generated game: a deterministic function of (split, index, seed), verified by the planner expert."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from alfworld.agents.utils.misc import get_templated_task_desc

from envhub.envs.alfworld.generator.layouts import floor_plan
from envhub.envs.alfworld.generator.pddl import problem_pddl
from envhub.envs.alfworld.generator.scene import RoomSize, build_scene
from envhub.envs.alfworld.generator.solver import solve
from envhub.envs.alfworld.generator.splits import check_index, rooms_for, split_size, task_types
from envhub.envs.alfworld.generator.tasks import sample_task

GENERATOR_VERSION = "1"
"""Bump whenever generated games change for the same (split, index, seed)."""
MAX_ATTEMPTS = 50


class GenerationError(RuntimeError):
    """No solvable game was found for an index within `MAX_ATTEMPTS` draws."""


@dataclass(frozen=True)
class GameRecord:
    """What the cache stores per game; the domain and grammar are stored once per task set."""

    split: str
    index: int
    task_type: str
    floorplan: str
    goal: str
    """Goal sentence with its final period, as in "put a clean apple in fridge."."""
    pddl_problem: str
    walkthrough: tuple[str, ...]
    """The planner expert's winning actions."""
    traj_data: dict[str, Any]
    attempts: int
    """Draws until a solvable one (1 when the first was solvable)."""

    def to_json(self) -> dict[str, Any]:
        """Plain JSON form (the cache file)."""
        return {
            "split": self.split,
            "index": self.index,
            "task_type": self.task_type,
            "floorplan": self.floorplan,
            "goal": self.goal,
            "pddl_problem": self.pddl_problem,
            "walkthrough": list(self.walkthrough),
            "traj_data": self.traj_data,
            "attempts": self.attempts,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GameRecord:
        """Inverse of `to_json`."""
        return cls(**{**data, "walkthrough": tuple(data["walkthrough"])})


@contextlib.contextmanager
def _global_random(seed: int) -> Iterator[None]:
    """Seed Python's global `random` (ALFWorld draws goal templates from it) and restore it afterwards."""
    saved = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(saved)


def insert_goal(grammar: str, goal_sentence: str) -> str:
    """ALFWorld's `add_task_to_grammar` with a given sentence (no trailing period)."""
    return grammar.replace("UNKNOWN GOAL", goal_sentence)


def game_json(domain: str, grammar: str, record: GameRecord) -> dict[str, Any]:
    """The ALFWorld game dict (the content of a game.tw-pddl file)."""
    return {
        "pddl_domain": domain,
        "grammar": insert_goal(grammar, record.goal.removesuffix(".")),
        "pddl_problem": record.pddl_problem,
        "solvable": True,
        "walkthrough": list(record.walkthrough),
    }


def generate(split: str, index: int, seed: int, domain: str, grammar: str, size: RoomSize) -> GameRecord:
    """Draw games for (split, index, seed) until the planner expert solves one."""
    check_index(split, index, split_size(split))
    task_type = task_types(split, seed)[index]
    for attempt in range(MAX_ATTEMPTS):
        rng = random.Random(f"envhub-alfworld/{seed}/{split}/{index}/{attempt}")
        plan = floor_plan(rng.choice(rooms_for(split, task_type)))
        task = sample_task(plan, task_type, rng)
        scene = build_scene(plan, task, size, rng)
        problem = problem_pddl(scene, task, f"plan_{split}_{index:05d}")
        traj_data = {
            "task_type": task_type,
            "pddl_params": task.pddl_params(),
            "scene": {"floor_plan": plan.name, "scene_num": plan.number},
            "task_id": f"{split}/{index:05d}",
        }
        with _global_random(rng.getrandbits(32)):
            sentence = get_templated_task_desc(traj_data)
        record = GameRecord(split, index, task_type, plan.name, sentence + ".", problem, (), traj_data, attempt + 1)
        solution = solve(game_json(domain, grammar, record), traj_data)
        if solution is not None:
            return GameRecord(**{**record.to_json(), "walkthrough": tuple(solution)})
    raise GenerationError(f"no solvable game for {split}/{index} (seed {seed}) in {MAX_ATTEMPTS} attempts")
