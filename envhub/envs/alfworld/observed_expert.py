"""An ALFWorld expert that acts only on what the agent has seen.

ALFWorld's planner expert reads the hidden PDDL state and walks straight to objects the
agent has never seen, which an agent cannot imitate from its observations. This expert
sees exactly what the agent sees (the admissible commands and the feedback of its own
actions) and searches like a person would: receptacles where the target class usually
lies first (ALFWorld's own placement priors), open surfaces before closed containers, in
a fixed order; it opens closed receptacles, remembers what it saw where, then takes,
cleans/heats/cools, uses a lamp or places as the task type needs. It is deterministic, and its memory is plain data
(`ObservedMemory`), so native snapshots carry it.

Receptacles of equal rank are searched (and the first of a class chosen) in one of `ORDERS`: "intro" (default)
in the order the intro listed them, which a prompt showing only the admissible commands after turn 1 does not
carry; "listed" in the order the admissible commands list them (the engine sorts them by name), which every
turn's prompt shows, so an agent reading its prompt can imitate the expert's choices.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import alfworld.gen.constants as constants

NOTHING_HAPPENS = "Nothing happens."

TRANSFORM = {
    "pick_clean_then_place_in_recep": ("clean", "sinkbasin"),
    "pick_heat_then_place_in_recep": ("heat", "microwave"),
    "pick_cool_then_place_in_recep": ("cool", "fridge"),
}
"""Task type -> (verb, receptacle class) of the state change the goal needs."""

LAMP_RECEPTACLES = ("desk", "sidetable", "dresser", "nightstand", "shelf", "coffeetable")
"""Where lamps usually stand (searched first in look_at_obj_in_light)."""

ORDERS = ("intro", "listed")
"""Orders of receptacles of equal rank (`ObservedExpert`'s `order`; first: the default)."""

_OPENABLE = {name.lower() for name in constants.OPENABLE_CLASS_LIST}
_PRIORS: dict[str, set[str]] = {}
for _receptacle, _objects in constants.VAL_RECEPTACLE_OBJECTS.items():
    for _object in _objects:
        _PRIORS.setdefault(_object.lower(), set()).add(_receptacle.lower())


def entity_class(name: str) -> str:
    """The class of an entity name: "apple 1" -> "apple"."""
    return name.rsplit(" ", 1)[0]


@dataclass(frozen=True)
class ObservedTask:
    """What the expert knows about the goal (the task type and its parameters)."""

    task_type: str
    target: str
    """Object class to find ("apple")."""
    parent: str = ""
    """Receptacle class to place it in ("fridge")."""
    toggle: str = ""
    """Lamp class for look_at_obj_in_light ("desklamp")."""

    @classmethod
    def from_traj_data(cls, traj_data: dict[str, Any]) -> ObservedTask:
        params = traj_data.get("pddl_params", {})
        return cls(
            task_type=traj_data["task_type"],
            target=str(params.get("object_target", "")).lower(),
            parent=str(params.get("parent_target", "")).lower(),
            toggle=str(params.get("toggle_target", "")).lower(),
        )


@dataclass
class ObservedMemory:
    """Everything the expert remembers; JSON-compatible."""

    receptacles: list[str] = field(default_factory=list)
    """From the intro, in the expert's order (the intro's, or by name as the admissible commands list them)."""
    here: list[str] = field(default_factory=list)
    """Receptacles at the agent's location (no "go to" command leads to them)."""
    visited: list[str] = field(default_factory=list)
    opened: list[str] = field(default_factory=list)
    contents: dict[str, list[str]] = field(default_factory=dict)
    """Takeable objects seen at each receptacle (while the hands were free)."""
    lamps: dict[str, list[str]] = field(default_factory=dict)
    """Lamps usable at each visited location, keyed by its first receptacle."""
    holding: str = ""
    transformed: bool = False
    placed: list[str] = field(default_factory=list)
    goal_receptacle: str = ""
    taken_from: str = ""
    """Where the object held was taken from."""


def intro_receptacles(intro: str) -> list[str]:
    """The receptacles the intro lists ("... you see a cabinet 2, a cabinet 1, and a sinkbasin 1.")."""
    found = _INTRO.search(intro)
    if not found:
        return []
    return [_ARTICLE.sub("", item.strip()) for item in found.group(1).split(",") if item.strip()]


_INTRO = re.compile(r"Looking quickly around you, you see (.*?)\.(?:\n|$)")
_ARTICLE = re.compile(r"^(?:and )?(?:a|an|some) ")


class ObservedExpert:
    """The default expert: searches, remembers, acts; never reads the hidden state."""

    def __init__(self, task: ObservedTask, order: str = ORDERS[0]) -> None:
        if order not in ORDERS:
            raise ValueError(f"expert order {order!r} is not one of {', '.join(ORDERS)}")
        self.task = task
        self.order = order
        self.memory = ObservedMemory()

    def start(self, intro: str, admissible: Sequence[str]) -> None:
        """Begin an episode from the intro text and the admissible commands after reset."""
        listed = intro_receptacles(intro)
        reachable = [c[len("go to ") :] for c in admissible if c.startswith("go to ")]
        receptacles = listed + [r for r in reachable if r not in listed]
        self.memory = ObservedMemory(receptacles=sorted(receptacles) if self.order == "listed" else receptacles)
        self._look_around(admissible)

    def observe(self, action: str, feedback: str, admissible: Sequence[str]) -> None:
        """Update the memory with the outcome of `action`."""
        memory = self.memory
        if feedback != NOTHING_HAPPENS:
            verb = action.split(" ", 1)[0]
            if verb == "open":
                memory.opened.append(action[len("open ") :])
            elif verb == "close" and action[len("close ") :] in memory.opened:
                memory.opened.remove(action[len("close ") :])
            elif verb == "take" and " from " in action:
                obj, receptacle = action[len("take ") :].split(" from ", 1)
                memory.holding = obj
                memory.taken_from = receptacle
                if obj in memory.contents.get(receptacle, []):
                    memory.contents[receptacle].remove(obj)
            elif verb == "move" and " to " in action:
                obj, receptacle = action[len("move ") :].split(" to ", 1)
                memory.holding = ""
                if self._is_goal(obj, receptacle):
                    memory.placed.append(obj)
                    memory.goal_receptacle = receptacle
                memory.contents.setdefault(receptacle, []).append(obj)
            elif verb in ("clean", "heat", "cool"):
                memory.transformed = True
        self._look_around(admissible)

    def _look_around(self, admissible: Sequence[str]) -> None:
        """Remember where the agent is and what is visible there."""
        memory = self.memory
        reachable = {c[len("go to ") :] for c in admissible if c.startswith("go to ")}
        memory.here = [r for r in memory.receptacles if r not in reachable]
        for receptacle in memory.here:
            if receptacle not in memory.visited:
                memory.visited.append(receptacle)
            seen_open = self._openable(receptacle) and f"open {receptacle}" not in admissible
            if seen_open and receptacle not in memory.opened:
                memory.opened.append(receptacle)  # its contents are in the admissible commands
            if not memory.holding:
                suffix = f" from {receptacle}"
                memory.contents[receptacle] = [
                    c[len("take ") : -len(suffix)] for c in admissible if c.startswith("take ") and c.endswith(suffix)
                ]
        if memory.here:
            memory.lamps[memory.here[0]] = [c[len("use ") :] for c in admissible if c.startswith("use ")]

    def next_action(self, admissible: Sequence[str]) -> str:
        """The next action from the current state."""
        memory, task = self.memory, self.task
        if memory.holding and entity_class(memory.holding) != task.target:
            return self._put_down(admissible)
        if not memory.holding:
            found = self._known_target()
            if found is None:
                return self._explore(admissible, task.target)
            receptacle, obj = found
            return f"take {obj} from {receptacle}" if receptacle in memory.here else f"go to {receptacle}"
        if task.task_type == "look_at_obj_in_light":
            lamp_at = next((r for r in memory.lamps if self._lamp(r)), "")
            if not lamp_at:
                return self._explore(admissible, task.toggle)
            return f"use {self._lamp(lamp_at)}" if lamp_at in memory.here else f"go to {lamp_at}"
        if task.task_type in TRANSFORM and not memory.transformed:
            verb, device_class = TRANSFORM[task.task_type]
            device = self._first_of_class(device_class) or self._first_of_class("bathtubbasin")
            if device not in memory.here:
                return f"go to {device}"
            return self._or_open(f"{verb} {memory.holding} with {device}", device, admissible)
        goal = memory.goal_receptacle or self._first_of_class(task.parent)
        if goal not in memory.here:
            return f"go to {goal}"
        return self._or_open(f"move {memory.holding} to {goal}", goal, admissible)

    def _known_target(self) -> tuple[str, str] | None:
        memory = self.memory
        for receptacle in self._search_order(self.task.target):
            if receptacle == memory.goal_receptacle:
                continue
            for obj in memory.contents.get(receptacle, []):
                if entity_class(obj) == self.task.target and obj not in memory.placed:
                    return receptacle, obj
        return None

    def _lamp(self, receptacle: str) -> str:
        lamps = [lamp for lamp in self.memory.lamps.get(receptacle, []) if entity_class(lamp) == self.task.toggle]
        return lamps[0] if lamps else ""

    def _first_of_class(self, receptacle_class: str) -> str:
        return next((r for r in self.memory.receptacles if entity_class(r) == receptacle_class), "")

    def _search_order(self, wanted: str) -> list[str]:
        """Likely receptacles first, and within each group open surfaces (one step) before containers (two)."""
        likely = LAMP_RECEPTACLES if wanted == self.task.toggle else _PRIORS.get(wanted, set())

        def rank(receptacle: str) -> tuple[bool, bool]:
            kind = entity_class(receptacle)
            return kind not in likely, kind in _OPENABLE

        return sorted(self.memory.receptacles, key=rank)

    def _explore(self, admissible: Sequence[str], wanted: str) -> str:
        memory = self.memory
        if wanted == self.task.target:
            for receptacle in memory.here:
                if f"open {receptacle}" in admissible and receptacle not in memory.opened:
                    return f"open {receptacle}"
        for receptacle in self._search_order(wanted):
            if wanted != self.task.target:
                unseen = receptacle not in memory.visited
            else:  # an agent may have passed by a closed one, or come by with its hands full (nothing recorded)
                closed = self._openable(receptacle) and receptacle not in memory.opened
                unseen = receptacle not in memory.contents or closed
            if unseen:
                return f"go to {receptacle}"
        return "look"

    def _is_goal(self, obj: str, receptacle: str) -> bool:
        """Placing `obj` in `receptacle` serves the goal (an agent off the expert's path may place anything)."""
        return entity_class(obj) == self.task.target and entity_class(receptacle) == self.task.parent

    def _put_down(self, admissible: Sequence[str]) -> str:
        """Put back an object the goal does not need (taken by an agent off the expert's path): here if it fits here,
        else where it was taken from."""
        memory = self.memory
        prefix = f"move {memory.holding} to "
        movable = [c for c in admissible if c.startswith(prefix)]
        if movable:
            return movable[0]
        closed = [r for r in memory.here if f"open {r}" in admissible]
        if closed:
            return f"open {closed[0]}"
        return f"go to {memory.taken_from}" if memory.taken_from not in ("", *memory.here) else "look"

    @staticmethod
    def _openable(receptacle: str) -> bool:
        return entity_class(receptacle) in _OPENABLE

    @staticmethod
    def _or_open(action: str, receptacle: str, admissible: Sequence[str]) -> str:
        if action not in admissible and f"open {receptacle}" in admissible:
            return f"open {receptacle}"
        return action

    def state(self) -> dict[str, Any]:
        """The memory as plain data."""
        return asdict(self.memory)

    def load(self, state: dict[str, Any]) -> None:
        """Restore the memory `state` returned."""
        self.memory = ObservedMemory(**state)
