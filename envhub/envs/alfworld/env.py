"""`AlfWorldEnv`: one ALFWorld episode behind envhub's `Environment` contract.

Observations, admissible commands and `won` are ALFWorld's (TextWorld's PDDL engine with
ALFWorld's demangler); the reward is the "success_reward" option (1 by default, 10 as in
the papers) on the step that wins, which also terminates the episode. The step limit is
the session's (50 by default, as ALFWorld's).

Native snapshots are plain JSON: the PDDL facts that differ from the initial state, the
move count, the score and the expert's memory; restoring rebuilds the initial state from
the cached translation and applies them, so restore cost does not depend on the depth.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from envhub.core import errors
from envhub.core.environment import Environment, Observation, StepResult, TaskSpec
from envhub.envs.alfworld.engine import GameEngine
from envhub.envs.alfworld.experts import EXPERTS, Expert, make_expert
from envhub.envs.alfworld.library import SharedDownward
from envhub.envs.alfworld.observed_expert import ORDERS
from envhub.envs.alfworld.taskset import AlfredGame, TaskSet

NATIVE_FORMAT = 1
"""Version of the native snapshot layout."""


class AlfWorldEnv(Environment):
    """One ALFWorld game at a time; reusable across tasks and seeds."""

    def __init__(self, taskset: TaskSet, library: SharedDownward) -> None:
        self._taskset = taskset
        self._library = library
        self._engine: GameEngine | None = None
        self._engine_has_facts = False
        self._game: AlfredGame | None = None
        self._expert: Expert | None = None
        self._reward = 1.0
        self._score = 0.0

    def _start(self, task: TaskSpec, seed: int, options: Mapping[str, str]) -> tuple[GameEngine, Expert]:
        """Load the task's game into an engine fit for the chosen expert."""
        expert_name = options.get("expert", EXPERTS[0])
        needs_facts = expert_name == "handcoded"  # ALFWorld's handcoded expert reads the facts
        if self._engine is None or self._engine_has_facts != needs_facts:
            if self._engine is not None:
                self._engine.close()
            self._engine = GameEngine(self._library, facts=needs_facts)
            self._engine_has_facts = needs_facts
        if self._game is None or self._game.task_id != task.task_id:
            self._game = self._taskset.game(task.split, task.index)
        self._engine.load(self._game.game_json, f"{self._taskset.version}:{self._game.task_id}")
        order = options.get("expert_order", ORDERS[0])
        self._expert = make_expert(expert_name, self._game.traj_data, self._engine, seed, order)
        self._reward = float(options.get("success_reward", "1"))
        self._score = 0.0
        return self._engine, self._expert

    def _observation(self, text: str) -> Observation:
        engine, game, _ = self._live()
        info = {"won": engine.won, "task_type": game.task_type, "floorplan": game.floorplan}
        return Observation(text=text, task_description=game.goal, score=self._score, info=info)

    def _live(self) -> tuple[GameEngine, AlfredGame, Expert]:
        if self._engine is None or self._game is None or self._expert is None:
            raise errors.failed_precondition("the ALFWorld environment has not been reset", "NOT_RESET")
        return self._engine, self._game, self._expert

    def reset(self, task: TaskSpec, *, seed: int, options: Mapping[str, str]) -> Observation:
        engine, expert = self._start(task, seed, options)
        state = engine.reset()
        expert.start(state)
        return self._observation(state["feedback"])

    def step(self, action: str) -> StepResult:
        engine, _, expert = self._live()
        state = engine.step(action)
        won = engine.won
        reward = self._reward if won else 0.0
        self._score += reward
        expert.observe(action, state)
        return StepResult(self._observation(state["feedback"]), reward, terminated=won, won=won)

    def admissible_actions(self) -> list[str]:
        engine, _, _ = self._live()
        return engine.admissible

    def expert_actions(self) -> list[str]:
        engine, _, expert = self._live()
        return [] if engine.won else expert.next_actions()

    def native_state(self) -> str:
        """Plain JSON, or "" when the expert's memory is not plain data (replay is used)."""
        engine, game, expert = self._live()
        expert_state = expert.state()
        if expert_state is None:
            return ""
        state = {
            "format": NATIVE_FORMAT,
            "task_id": game.task_id,
            "engine": engine.export_state(),
            "score": self._score,
            "expert": expert_state,
        }
        return json.dumps(state, separators=(",", ":"), sort_keys=True)

    def load_native_state(
        self, task: TaskSpec, *, seed: int, options: Mapping[str, str], state: str, observation: Observation
    ) -> None:
        data = _parse_native(state, task)
        engine, expert = self._start(task, seed, options)
        try:
            game_state = engine.import_state(data["engine"], observation.text)
            expert.load(data["expert"], game_state)
        except (KeyError, TypeError, ValueError) as exc:
            raise errors.invalid_argument(f"unusable native state in snapshot: {exc!r}", "BAD_NATIVE_STATE") from exc
        self._score = float(data["score"])

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None


def _parse_native(state: str, task: TaskSpec) -> dict[str, Any]:
    """Decode and check a native state written by `AlfWorldEnv.native_state`."""
    try:
        data = json.loads(state)
    except json.JSONDecodeError as exc:
        raise errors.invalid_argument(f"native state is not JSON: {exc}", "BAD_NATIVE_STATE") from exc
    if not isinstance(data, dict) or data.get("format") != NATIVE_FORMAT:
        raise errors.invalid_argument(f"native state is not ALFWorld format {NATIVE_FORMAT}", "BAD_NATIVE_STATE")
    if data.get("task_id") != task.task_id:
        raise errors.invalid_argument(
            f"native state is for task {data.get('task_id')!r}, not {task.task_id!r}", "BAD_NATIVE_STATE"
        )
    missing = {"engine", "score", "expert"} - set(data)
    if missing:
        raise errors.invalid_argument(f"native state lacks {sorted(missing)}", "BAD_NATIVE_STATE")
    return data
