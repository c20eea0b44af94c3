"""ALFWorld's six task types and how a task (object, receptacle, lamp) is drawn for a room."""

from __future__ import annotations

import random
from dataclasses import dataclass

import alfworld.gen.constants as constants

from envhub.envs.alfworld.generator.layouts import FloorPlan

TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
"""In ALFWorld's order (`alfworld.agents.environment.alfred_tw_env.TASK_TYPES`, ids 1-6)."""

APPLIANCE = {
    "pick_clean_then_place_in_recep": "SinkBasin",
    "pick_heat_then_place_in_recep": "Microwave",
    "pick_cool_then_place_in_recep": "Fridge",
}
"""The receptacle each state-change task needs (ALFWorld's domain: CleanObject needs SinkBasinType)."""
_OBJECT_CLASS = {
    "pick_clean_then_place_in_recep": "Cleanable",
    "pick_heat_then_place_in_recep": "Heatable",
    "pick_cool_then_place_in_recep": "Coolable",
}


@dataclass(frozen=True)
class TaskParams:
    """ALFRED's `pddl_params` plus the task type."""

    task_type: str
    object_target: str
    parent_target: str = ""
    toggle_target: str = ""

    def pddl_params(self) -> dict[str, object]:
        """The `pddl_params` dict of ALFRED's traj_data.json."""
        return {
            "object_target": self.object_target,
            "parent_target": self.parent_target,
            "toggle_target": self.toggle_target,
            "mrecep_target": "",
            "object_sliced": False,
        }


def can_contain(rtype: str, otype: str) -> bool:
    """ALFWorld's receptacle compatibility table."""
    return otype in constants.VAL_RECEPTACLE_OBJECTS.get(rtype, ())


def _objects_for(plan: FloorPlan, task_type: str) -> list[str]:
    """Object types of the room that the task may target (each must fit in some room receptacle)."""
    rtypes = plan.receptacle_types()
    wanted = constants.VAL_ACTION_OBJECTS[_OBJECT_CLASS[task_type]] if task_type in _OBJECT_CLASS else None
    return [o for o in plan.object_types if (wanted is None or o in wanted) and any(can_contain(r, o) for r in rtypes)]


def _parents_for(plan: FloorPlan, task_type: str, otype: str) -> list[str]:
    """Receptacle types that can be the goal: they hold `otype` and another receptacle can start with it."""
    rtypes = sorted(plan.receptacle_types())
    excluded = APPLIANCE.get(task_type, "")
    return [
        r
        for r in rtypes
        if r != excluded and can_contain(r, otype) and any(s != r and can_contain(s, otype) for s in rtypes)
    ]


def supports(plan: FloorPlan, task_type: str) -> bool:
    """True when the room type is valid for the task (ALFRED's `GOALS_VALID`) and the room has what it needs."""
    if plan.room_type not in constants.GOALS_VALID[task_type]:
        return False
    if task_type in APPLIANCE and APPLIANCE[task_type] not in plan.receptacle_types():
        return False
    if task_type == "look_at_obj_in_light":
        non_openable = [r for r in plan.receptacles if not r.openable]
        return bool(plan.lamp_types and non_openable and _objects_for(plan, task_type))
    return any(_parents_for(plan, task_type, o) for o in _objects_for(plan, task_type))


def sample_task(plan: FloorPlan, task_type: str, rng: random.Random) -> TaskParams:
    """Draw a task of `task_type` for a room that `supports` it."""
    objects = _objects_for(plan, task_type)
    if task_type == "look_at_obj_in_light":
        return TaskParams(task_type, rng.choice(objects), toggle_target=rng.choice(plan.lamp_types))
    otype = rng.choice([o for o in objects if _parents_for(plan, task_type, o)])
    return TaskParams(task_type, otype, parent_target=rng.choice(_parents_for(plan, task_type, otype)))
