"""The three ALFWorld experts behind one small interface.

* "observed" (default): `ObservedExpert`, acts only on what the agent has seen.
* "planner": ALFWorld's planner expert (fast-downward from the hidden state, optimal).
* "handcoded": ALFWorld's `HandCodedTWAgent`, fed every step as `AlfredExpert` does. It
  breaks ties with Python's global `random`; each session keeps its own generator state
  (seeded by the session seed) and swaps it in around the expert's calls, so interleaved
  sessions in one worker stay reproducible.

`state()` returns the expert's memory as plain data for native snapshots, or None when
it has none in that form (the handcoded agent): the session then snapshots by replay.
"""

from __future__ import annotations

import random
from typing import Any, Protocol

from alfworld.agents.expert import HandCodedAgentTimeout, HandCodedTWAgent
from alfworld.agents.expert.handcoded_expert import HandCodedAgentFailed
from alfworld.gen import constants
from textworld.core import GameState

from envhub.envs.alfworld.engine import GameEngine
from envhub.envs.alfworld.observed_expert import ORDERS, ObservedExpert, ObservedTask

EXPERTS = ("observed", "handcoded", "planner")
"""Expert names accepted by the "expert" session option (first: the default)."""


class Expert(Protocol):
    """Follows the episode and proposes the next action(s)."""

    def start(self, state: GameState) -> None:
        """The episode (re)started in `state`."""

    def observe(self, action: str, state: GameState) -> None:
        """`action` led to `state`."""

    def next_actions(self) -> list[str]:
        """The next action(s), next first."""
        ...

    def state(self) -> dict[str, Any] | None:
        """The expert's memory as plain data, or None when it cannot be written out."""
        ...

    def load(self, state: dict[str, Any], game_state: GameState) -> None:
        """Restore the memory `state()` returned, at `game_state`."""


class PlannerExpert:
    """ALFWorld's planner expert: fast-downward's optimal plan from the hidden state."""

    def __init__(self, engine: GameEngine) -> None:
        self._engine = engine

    def start(self, state: GameState) -> None:
        """Nothing to remember."""

    def observe(self, action: str, state: GameState) -> None:
        """Nothing to remember."""

    def next_actions(self) -> list[str]:
        return self._engine.replan()

    def state(self) -> dict[str, Any] | None:
        return {}

    def load(self, state: dict[str, Any], game_state: GameState) -> None:
        """Nothing to restore."""


class HandcodedExpert:
    """ALFWorld's handcoded TextWorld expert, with a per-session random generator."""

    def __init__(self, traj_data: dict[str, Any], seed: int) -> None:
        params = {**traj_data["pddl_params"], "task_type": traj_data["task_type"]}
        params = {k: v.lower() if v in constants.OBJECTS else v for k, v in params.items()}
        self._agent = HandCodedTWAgent(max_steps=200)
        self._agent.task_params = params
        self._agent.policy = self._agent.get_task_policy(params)(params, max_steps=200)
        self._random_state = random.Random(seed).getstate()
        self._next: list[str] = []

    def start(self, state: GameState) -> None:
        self._agent.observe(state["feedback"])
        self._next = ["look"]

    def observe(self, action: str, state: GameState) -> None:
        outer = random.getstate()
        random.setstate(self._random_state)
        try:
            proposed = self._agent.act(state, 0, state["won"], action)
            self._next = [proposed if proposed in state["admissible_commands"] else "look"]
        except (HandCodedAgentTimeout, HandCodedAgentFailed):
            self._next = []  # the expert gave up on this episode
        finally:
            self._random_state = random.getstate()
            random.setstate(outer)

    def next_actions(self) -> list[str]:
        return list(self._next)

    def state(self) -> dict[str, Any] | None:
        return None

    def load(self, state: dict[str, Any], game_state: GameState) -> None:
        raise ValueError("the handcoded expert has no plain-data state; restore by replay")


class ObservedAdapter:
    """`ObservedExpert` on TextWorld game states."""

    def __init__(self, traj_data: dict[str, Any], order: str = ORDERS[0]) -> None:
        self._expert = ObservedExpert(ObservedTask.from_traj_data(traj_data), order)
        self._admissible: list[str] = []

    def start(self, state: GameState) -> None:
        self._admissible = list(state["admissible_commands"])
        self._expert.start(state["feedback"], self._admissible)

    def observe(self, action: str, state: GameState) -> None:
        self._admissible = list(state["admissible_commands"])
        self._expert.observe(action, state["feedback"], self._admissible)

    def next_actions(self) -> list[str]:
        return [self._expert.next_action(self._admissible)]

    def state(self) -> dict[str, Any] | None:
        return self._expert.state()

    def load(self, state: dict[str, Any], game_state: GameState) -> None:
        self._admissible = list(game_state["admissible_commands"])
        self._expert.load(state)


def make_expert(name: str, traj_data: dict[str, Any], engine: GameEngine, seed: int, order: str = ORDERS[0]) -> Expert:
    """The expert called `name` (one of `EXPERTS`) for one episode; `order`: the observed expert's (`ORDERS`)."""
    if name == "planner":
        return PlannerExpert(engine)
    if name == "handcoded":
        return HandcodedExpert(traj_data, seed)
    if name == "observed":
        return ObservedAdapter(traj_data, order)
    raise ValueError(f"unknown expert {name!r}; choose one of {', '.join(EXPERTS)}")
