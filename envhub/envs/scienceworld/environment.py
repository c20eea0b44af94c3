"""`ScienceWorldEnvironment`: one ScienceWorld simulator playing one task variation.

Every simulator call that advances the world runs under its own seed and object-id
counter (`_advance`), so episodes are reproducible from (task, seed, actions) and
several simulators in one JVM do not disturb each other. Stepping uses the jar's raw
`step`; the valid-action list (the expensive part of upstream's `step`) is computed only
in `admissible_actions`. Every call into the JVM runs in one of the JVM's turns (`Jvm.turns`):
a start's (`reset`, `replay`) one simulator call at a time, the others' whole, so sessions may be
started on one thread while others step on another (`ScienceWorldKind.concurrent_starts`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from envhub.core import errors
from envhub.core.environment import Environment, Observation, StepResult, TaskSpec
from envhub.envs.scienceworld import options as sw_options
from envhub.envs.scienceworld.expert import GoldPaths
from envhub.envs.scienceworld.jvm import Jvm, step_seed

FIRST_ACTION = "look around"
"""The action whose output is the initial observation (as upstream's `reset` does)."""
LOAD_STEP = -1
"""Step index used to seed the load."""


def parse_task_id(task_id: str) -> tuple[str, int]:
    """Split "boil/3" into ("boil", 3); ValueError when malformed."""
    name, _, variation = task_id.rpartition("/")
    if not name or not variation.isdigit():
        raise ValueError(f"bad ScienceWorld task id {task_id!r}; expected '<task-name>/<variation>'")
    return name, int(variation)


class ScienceWorldEnvironment(Environment):
    """One simulator inside the process's shared JVM."""

    def __init__(self, jvm: Jvm, gold_paths: GoldPaths, on_close: Callable[[], None] | None = None) -> None:
        """`on_close` is called once, when the simulator is released."""
        self._jvm = jvm
        self._on_close = on_close
        self._gold_paths = gold_paths
        self._simulator: Any = jvm.new_simulator()
        self._task_name = ""
        self._variation = 0
        self._simplification = ""
        self._seed = 0
        self._step_index = 0
        self._id_counter = 0
        self._score = 0
        self._task_description = ""
        self._actions: list[str] = []

    def reset(self, task: TaskSpec, *, seed: int, options: Mapping[str, str]) -> Observation:
        try:
            name, variation = parse_task_id(task.task_id)
            simplification = sw_options.simplifications(options)
            sw_options.check_for_task(name, simplification)
        except ValueError as exc:
            raise errors.invalid_argument(str(exc), "BAD_OPTION") from exc
        simulator = self._live_simulator()
        with self._jvm.turns.start():
            self._jvm.seed(step_seed(seed, LOAD_STEP))
            message = simulator.load(name, variation, simplification, False)
            if message:
                raise errors.not_found(f"ScienceWorld cannot load {task.task_id}: {message}", "UNKNOWN_TASK")
            self._id_counter = self._jvm.id_counter
        self._task_name, self._variation, self._simplification, self._seed = name, variation, simplification, seed
        self._step_index = 0
        self._actions = []
        with self._jvm.turns.start():
            self._task_description = str(simulator.getTaskDescription())
            text = self._advance(FIRST_ACTION)
            self._score = self._read_score()
            return self._observation(text)

    def step(self, action: str) -> StepResult:
        self._require_loaded()
        with self._jvm.turns.step():
            text = self._advance(action)
            score = self._read_score()
            completed = bool(self._simulator.getCompleted())
            reward, self._score = score - self._score, score
            observation = self._observation(text)
        self._actions.append(action)
        failed = score < 0
        return StepResult(
            observation=observation,
            reward=float(reward),
            terminated=completed or failed,
            won=completed and not failed,
        )

    def replay(self, actions: Sequence[str]) -> list[str]:
        """Raw-step `actions` (no score, info or valid-action reads between them), one turn each."""
        self._require_loaded()
        texts = []
        for action in actions:
            with self._jvm.turns.start():
                texts.append(self._advance(action))
        self._actions.extend(actions)
        with self._jvm.turns.start():
            self._score = self._read_score()
        return texts

    def admissible_actions(self) -> list[str]:
        self._require_loaded()
        with self._jvm.turns.step():
            return self._jvm.strings(self._simulator.getValidActionObjectCombinations())

    def expert_actions(self) -> list[str]:
        """The rest of the gold path while the episode has followed it exactly, else []."""
        self._require_loaded()
        gold = self._gold_paths.get(self._task_name, self._variation, self._simplification)
        done = len(self._actions)
        if tuple(self._actions) != gold[:done]:
            return []
        return list(gold[done:])

    def close(self) -> None:
        if self._simulator is None:
            return
        with self._jvm.turns.step():
            self._jvm.release(self._simulator)
        self._simulator = None
        if self._on_close is not None:
            self._on_close()

    def _advance(self, action: str) -> str:
        """One raw simulator step under this episode's seed and object-id counter (in a turn)."""
        self._jvm.seed(step_seed(self._seed, self._step_index))
        self._jvm.id_counter = self._id_counter
        text = str(self._simulator.step(action))
        self._id_counter = self._jvm.id_counter
        self._step_index += 1
        return text

    def _read_score(self) -> int:
        return round(100 * float(self._simulator.getScore()))

    def _observation(self, text: str) -> Observation:
        info = {
            "moves": int(self._simulator.getNumMoves()),
            "task": self._task_name,
            "variation": self._variation,
            "simplifications": self._simplification,
        }
        return Observation(text=text, task_description=self._task_description, score=float(self._score), info=info)

    def _live_simulator(self) -> Any:
        if self._simulator is None:
            raise errors.failed_precondition("the environment is closed", "CLOSED")
        return self._simulator

    def _require_loaded(self) -> None:
        self._live_simulator()
        if not self._task_name:
            raise errors.failed_precondition("reset the environment before using it", "NOT_RESET")
