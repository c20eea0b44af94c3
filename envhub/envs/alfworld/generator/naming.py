"""ALFWorld's object naming: THOR ids (`Apple|+00.12|+00.95|-01.23`) and their PDDL-safe mangled form.

The mangled form (`Apple_bar__plus_00_dot_12_bar_...`) is what ALFWorld's `Demangler` turns into
"apple 1"; the replacement table is the one ALFWorld's own game generator uses
(`alfworld.gen.game_states.planned_game_state.PlannedGameState.fix_pddl_str_chars`, which cannot be
imported here because its module needs OpenCV).
"""

from __future__ import annotations

from alfworld.gen.utils.py_util import multireplace

_PDDL_CHARS = {"-": "_minus_", "#": "-", "|": "_bar_", "+": "_plus_", ".": "_dot_", ",": "_comma_"}


def mangle(text: str) -> str:
    """THOR id or goal template (with `#` as the PDDL type separator) -> PDDL-safe text."""
    return str(multireplace(text, _PDDL_CHARS))


def coordinate(value: float) -> str:
    """One THOR coordinate as ALFWorld writes it in ids: sign, two integer digits, two decimals."""
    return f"{value:+06.2f}"


def thor_id(object_type: str, x: float, y: float, z: float) -> str:
    """A THOR object id, e.g. `Apple|+00.12|+00.95|-01.23`."""
    return f"{object_type}|{coordinate(x)}|{coordinate(y)}|{coordinate(z)}"


def location_id(pose: tuple[int, int, int, int]) -> str:
    """ALFWorld's location name for a grid pose (x, z, rotation, horizon), mangled."""
    return mangle("loc|{}|{}|{}|{}".format(*pose))
