"""The `simplifications` session option and its checks."""

from __future__ import annotations

from collections.abc import Mapping

SIMPLIFICATIONS_OPTION = "simplifications"
DEFAULT_SIMPLIFICATIONS = ""
"""No simplification, as AgentGym's ScienceWorld server and the upstream default use."""
KNOWN_SIMPLIFICATIONS: frozenset[str] = frozenset(
    {"easy", "teleportAction", "selfWateringFlowerPots", "openContainers", "openDoors", "noElectricalAction"}
)
"""What the jar accepts (`getPossibleSimplifications`) plus "easy" (all of them)."""
ELECTRICAL_TASK_MARKERS: tuple[str, ...] = ("power-component", "conductivity")


def simplifications(options: Mapping[str, str]) -> str:
    """The comma-separated simplification string of `options`; ValueError when malformed."""
    value = options.get(SIMPLIFICATIONS_OPTION, DEFAULT_SIMPLIFICATIONS)
    items = value.split(",") if value else []
    if any(item not in KNOWN_SIMPLIFICATIONS for item in items):
        known = ", ".join(sorted(KNOWN_SIMPLIFICATIONS))
        raise ValueError(
            f"bad {SIMPLIFICATIONS_OPTION} option {value!r}: use a comma-separated list (no spaces) of: {known}"
        )
    return value


def check_for_task(task_name: str, simplification: str) -> None:
    """ValueError when `simplification` cannot be used with `task_name` (upstream's rule)."""
    electrical = any(marker in task_name for marker in ELECTRICAL_TASK_MARKERS)
    if electrical and "noElectricalAction" in simplification.split(","):
        raise ValueError(f"task {task_name} needs electrical actions; drop noElectricalAction from simplifications")
