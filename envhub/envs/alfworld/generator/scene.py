"""A playable room: a subset of a floor plan's receptacles with objects placed where they fit."""

from __future__ import annotations

import random
from dataclasses import dataclass

from envhub.envs.alfworld.generator.layouts import FloorPlan, Receptacle
from envhub.envs.alfworld.generator.naming import thor_id
from envhub.envs.alfworld.generator.tasks import APPLIANCE, TaskParams, can_contain

LAMP_HOSTS = ("Desk", "SideTable", "Dresser")
"""Where ALFRED rooms keep their lamps; other non-openable receptacles are used when none is present."""


@dataclass(frozen=True)
class RoomSize:
    """How much of a floor plan goes into a game. See `ROOMS` for the named sizes."""

    min_receptacles: int = 5
    """Fewest receptacles (fewer only when the floor plan has fewer)."""
    max_receptacles: int = 10
    """Most receptacles."""
    min_distractors: int = 2
    """Fewest objects that are not the task's target."""
    max_distractors: int = 6
    """Most objects that are not the task's target."""
    whole: bool = False
    """Every receptacle of the floor plan, as ALFWorld's own games (up to ~30 in kitchens); the
    receptacle bounds are then unused."""

    def tag(self) -> str:
        """Short text for version strings."""
        rooms = "whole-" if self.whole else f"r{self.min_receptacles}-{self.max_receptacles}"
        return f"{rooms}d{self.min_distractors}-{self.max_distractors}"


ROOMS: dict[str, RoomSize] = {
    "whole": RoomSize(whole=True, min_distractors=8, max_distractors=16),
    "small": RoomSize(),
}
"""Named room sizes: "whole" (the default: ALFWorld's full floor plans, with many distractor
objects as its games have) and "small" (5-10 receptacles, 2-6 distractors: short games for
tiny-model work, tests and the quickstart)."""
DEFAULT_ROOMS = "whole"


@dataclass(frozen=True)
class PlacedObject:
    """An object instance and the receptacle it starts in."""

    thor_id: str
    otype: str
    receptacle: Receptacle


@dataclass(frozen=True)
class Scene:
    """Everything a PDDL problem needs about the room."""

    plan: FloorPlan
    receptacles: tuple[Receptacle, ...]
    objects: tuple[PlacedObject, ...]
    """Pickupable objects, targets first."""
    lamps: tuple[PlacedObject, ...]
    start: tuple[int, int, int, int]
    """The agent's start pose; no receptacle is reachable from it without moving."""


def _pick(rng: random.Random, receptacles: list[Receptacle]) -> Receptacle:
    return receptacles[rng.randrange(len(receptacles))]


def _lamp_host(plan: FloorPlan, rng: random.Random) -> Receptacle:
    non_openable = [r for r in plan.receptacles if not r.openable]
    return _pick(rng, [r for r in non_openable if r.rtype in LAMP_HOSTS] or non_openable)


def _required(
    plan: FloorPlan, task: TaskParams, lamp_host: Receptacle | None, rng: random.Random
) -> tuple[list[Receptacle], Receptacle]:
    """Receptacles the task cannot do without (goal receptacle, appliance, lamp host, a start place for the
    target), and that start place."""
    needed: list[Receptacle] = [lamp_host] if lamp_host else []
    for rtype in (task.parent_target, APPLIANCE.get(task.task_type, "")):
        if rtype:
            needed.append(_pick(rng, [r for r in plan.receptacles if r.rtype == rtype]))
    sources = [
        r for r in plan.receptacles if r.rtype != task.parent_target and can_contain(r.rtype, task.object_target)
    ]
    appliance = APPLIANCE.get(task.task_type, "")
    elsewhere = [r for r in sources if r not in needed and r.rtype != appliance]
    start_place = _pick(rng, elsewhere or sources)
    return list(dict.fromkeys([*needed, start_place])), start_place


def _object_id(otype: str, where: Receptacle, taken: set[str], rng: random.Random) -> str:
    x, y, z = where.position
    while True:
        candidate = thor_id(otype, x + rng.uniform(-0.4, 0.4), y + rng.uniform(0.0, 0.2), z + rng.uniform(-0.4, 0.4))
        if candidate not in taken:
            taken.add(candidate)
            return candidate


def _start_pose(receptacles: tuple[Receptacle, ...], rng: random.Random) -> tuple[int, int, int, int]:
    taken = {(r.pose[0], r.pose[1]) for r in receptacles}
    xs = [r.pose[0] for r in receptacles]
    zs = [r.pose[1] for r in receptacles]
    while True:
        x, z = rng.randint(min(xs), max(xs) + 1), rng.randint(min(zs), max(zs) + 1)
        if (x, z) not in taken:
            return (x, z, rng.randrange(4), 30)


def build_scene(plan: FloorPlan, task: TaskParams, size: RoomSize, rng: random.Random) -> Scene:
    """Choose the room's receptacles and place the task's objects and some distractors."""
    lamp_host = _lamp_host(plan, rng) if task.toggle_target else None
    required, start_place = _required(plan, task, lamp_host, rng)
    others = [r for r in plan.receptacles if r not in required]
    wanted = len(plan.receptacles) if size.whole else rng.randint(size.min_receptacles, size.max_receptacles)
    extra = rng.sample(others, max(0, min(len(others), wanted - len(required))))
    receptacles = tuple(sorted(required + extra, key=lambda r: r.thor_id))

    taken: set[str] = set()
    objects: list[PlacedObject] = []
    two = task.task_type == "pick_two_obj_and_place"
    appliance = APPLIANCE.get(task.task_type, "")
    sources = [r for r in receptacles if r.rtype not in (task.parent_target, appliance)]
    sources = [r for r in sources if can_contain(r.rtype, task.object_target)] or [start_place]
    for _ in range(rng.randint(2, 3) if two else rng.randint(1, 2)):
        where = _pick(rng, sources)
        objects.append(PlacedObject(_object_id(task.object_target, where, taken, rng), task.object_target, where))

    placeable = [
        o for o in plan.object_types if o != task.object_target and any(can_contain(r.rtype, o) for r in receptacles)
    ]
    count = min(len(placeable), rng.randint(size.min_distractors, size.max_distractors))
    for otype in rng.sample(placeable, count):
        where = _pick(rng, [r for r in receptacles if can_contain(r.rtype, otype)])
        objects.append(PlacedObject(_object_id(otype, where, taken, rng), otype, where))

    lamps = (
        [PlacedObject(_object_id(task.toggle_target, lamp_host, taken, rng), task.toggle_target, lamp_host)]
        if lamp_host
        else []
    )
    return Scene(plan, receptacles, tuple(objects), tuple(lamps), _start_pose(receptacles, rng))
