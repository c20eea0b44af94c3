"""THOR floor plans as ALFWorld ships them (`alfworld/gen/layouts/FloorPlanN-*.json`).

`-openable.json` maps each static receptacle's THOR id to the pose the agent interacts from;
`-objects.json` lists the object types present in the room. Rooms are read once per process.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import alfworld.gen.constants as constants

LAYOUT_DIR = Path(constants.__file__).parent / "layouts"
AGENT_STEP = 0.25
"""THOR's grid step in metres: interaction poses become grid locations `loc|x|z|rotation|horizon`."""
LAMP_TYPES = frozenset({"DeskLamp", "FloorLamp"})
PICKUPABLE_TYPES = frozenset(
    t
    for types in constants.VAL_RECEPTACLE_OBJECTS.values()
    for t in types
    if (t in constants.OBJECTS and t not in constants.RECEPTACLES) or t in constants.MOVABLE_RECEPTACLES_SET
)
"""Object types some receptacle can hold (sliced variants excluded), including movable receptacles (mugs, pans)."""


@dataclass(frozen=True)
class Receptacle:
    """A static receptacle of a room."""

    thor_id: str
    """THOR id, e.g. `Cabinet|+00.68|+00.50|-02.20` or `Sink|...|SinkBasin`."""
    rtype: str
    """Receptacle type, e.g. "Cabinet", "SinkBasin"."""
    pose: tuple[int, int, int, int]
    """Grid pose the agent interacts from (x, z, rotation, horizon)."""
    position: tuple[float, float, float]
    """THOR position parsed from the id (x, y, z)."""

    @property
    def openable(self) -> bool:
        """True for fridges, cabinets, drawers, microwaves, safes and boxes."""
        return self.rtype in constants.OPENABLE_CLASS_SET


@dataclass(frozen=True)
class FloorPlan:
    """What one THOR room really contains."""

    number: int
    room_type: str
    """"Kitchen", "LivingRoom", "Bedroom" or "Bathroom"."""
    receptacles: tuple[Receptacle, ...]
    object_types: tuple[str, ...]
    """Pickupable object types present in the room, sorted."""
    lamp_types: tuple[str, ...]
    """Light sources present ("DeskLamp", "FloorLamp")."""

    @property
    def name(self) -> str:
        """ALFRED's scene name, e.g. "FloorPlan12"."""
        return f"FloorPlan{self.number}"

    def receptacle_types(self) -> set[str]:
        """Receptacle types present in the room."""
        return {r.rtype for r in self.receptacles}


def room_type(number: int) -> str:
    """The room type of a floor plan number (ALFRED's numbering: 1-30 kitchens, 2xx living rooms, ...)."""
    for name, numbers in constants.SCENE_TYPE.items():
        if number in numbers:
            return name
    raise ValueError(f"floor plan {number} has no room type")


def _receptacle(thor_id: str, pose: list[float]) -> Receptacle:
    parts = thor_id.split("|")
    rtype = parts[4] if len(parts) > 4 else parts[0]
    x, y, z = (float(p) for p in parts[1:4])
    grid = (round(pose[0] / AGENT_STEP), round(pose[1] / AGENT_STEP), round(pose[2] / 90) % 4, round(pose[3]))
    return Receptacle(thor_id=thor_id, rtype=rtype, pose=grid, position=(x, y, z))


@functools.cache
def floor_plan(number: int) -> FloorPlan:
    """Read floor plan `number` from ALFWorld's layouts."""
    openable = json.loads((LAYOUT_DIR / f"FloorPlan{number}-openable.json").read_text())
    objects = json.loads((LAYOUT_DIR / f"FloorPlan{number}-objects.json").read_text())
    receptacles = tuple(
        _receptacle(thor_id, pose)
        for thor_id, pose in sorted(openable.items())
        if _receptacle(thor_id, pose).rtype in constants.RECEPTACLES
    )
    return FloorPlan(
        number=number,
        room_type=room_type(number),
        receptacles=receptacles,
        object_types=tuple(sorted(set(objects) & PICKUPABLE_TYPES)),
        lamp_types=tuple(sorted(set(objects) & LAMP_TYPES)),
    )


@functools.cache
def floor_plan_numbers() -> tuple[int, ...]:
    """Every floor plan ALFWorld ships, ascending."""
    names = (p.name for p in LAYOUT_DIR.glob("FloorPlan*-openable.json"))
    return tuple(sorted(int(n.removeprefix("FloorPlan").split("-")[0]) for n in names))
