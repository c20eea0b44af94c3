"""The planner check: ALFWorld's own planner expert must solve every generated game.

ALFWorld's planner expert replans from every state and plays the first action of each plan
(`AlfredExpert(expert_type="planner")`: its `extra.expert_plan` is `PddlState.replan` after each
step). `solve` does exactly that on envhub's game engine (the same states and plans, with the
engine's speed-ups; `tests/envs/alfworld/test_generator.py` checks it against `AlfredExpert`), one
engine per process, reused for every game (each library copies the 34 MB libdownward.so once).

`expert_env` is ALFWorld's own env, for code that wants to play games exactly as ALFWorld does.
"""

from __future__ import annotations

import functools
import hashlib
import tempfile
from collections.abc import Mapping
from typing import Any

import textworld
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert, AlfredExpertType
from textworld.envs.pddl import PddlEnv

from envhub.envs.alfworld.engine import GameEngine
from envhub.envs.alfworld.library import SharedDownward

MAX_SOLUTION_STEPS = 50
"""ALFWorld's default episode step limit: a game the expert cannot win within it is rejected."""


@functools.cache
def expert_env() -> tuple[Any, tempfile.TemporaryDirectory[str]]:
    """The process's planner-expert env and its scratch folder (removed when the process exits).

    `AlfredExpert(AlfredDemangler(PddlEnv))`, reporting admissible commands and `won`. Code that needs
    to play ALFWorld games in this process may reuse it rather than load another library copy.
    """
    infos = textworld.EnvInfos(admissible_commands=True, won=True)
    env = AlfredExpert(AlfredDemangler(PddlEnv(infos)), expert_type=AlfredExpertType.PLANNER)
    return env, tempfile.TemporaryDirectory(prefix="envhub-alfgen-")


@functools.cache
def _engine() -> GameEngine:
    """The process's engine for planner checks."""
    return GameEngine(SharedDownward())


def solve(game_json: Mapping[str, Any], traj_data: Mapping[str, Any]) -> list[str] | None:
    """The planner expert's actions that win the game, or None when it does not win within the step limit.

    A game already won before the first action counts as unsolvable (nothing to do). `traj_data`
    is not read: only ALFWorld's handcoded expert needs it.
    """
    engine = _engine()
    engine.load(game_json, "solver:" + hashlib.sha256(str(game_json["pddl_problem"]).encode()).hexdigest())
    engine.reset()
    if engine.won:
        return None
    actions: list[str] = []
    while len(actions) < MAX_SOLUTION_STEPS:
        plan = engine.replan()
        if not plan:
            return None
        actions.append(plan[0])
        engine.step(plan[0])
        if engine.won:
            return actions
    return None
