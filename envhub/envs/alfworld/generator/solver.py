"""The planner check: ALFWorld's own planner expert must solve every generated game.

One `PddlEnv` per process, reused with `load()` (each new one copies the 34 MB libdownward.so to a
temporary folder). `AlfredExpert` reads traj_data.json beside the game file, so the game is written to
a per-process scratch folder first.
"""

from __future__ import annotations

import functools
import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import textworld
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert, AlfredExpertType
from textworld.envs.pddl import PddlEnv

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


def solve(game_json: Mapping[str, Any], traj_data: Mapping[str, Any]) -> list[str] | None:
    """The planner expert's actions that win the game, or None when it does not win within the step limit.

    A game already won before the first action counts as unsolvable (nothing to do).
    """
    env, scratch_dir = expert_env()
    scratch = Path(scratch_dir.name)
    (scratch / "traj_data.json").write_text(json.dumps(traj_data))
    game_file = scratch / "game.tw-pddl"
    game_file.write_text(json.dumps(game_json))
    env.load(str(game_file))
    state = env.reset()
    if state["won"]:
        return None
    actions: list[str] = []
    while len(actions) < MAX_SOLUTION_STEPS:
        plan = state["extra.expert_plan"]
        if not plan:
            return None
        actions.append(plan[0])
        state, _, _ = env.step(plan[0])
        if state["won"]:
            return actions
    return None
