"""Game states answered in Python, and one fast-downward library per worker process for planning.

TextWorld's `PddlState` talks to fast-downward's native library (`downward_lib`), which
holds exactly one planning task and one current state; `fast_downward.load_lib()` copies
the 34 MB `libdownward.so` for each copy. Sessions in a worker interleave, so each needs
its own state. A `DownwardHandle` is what each game's `PddlState` sees as its
`downward_lib`: it answers the calls a step makes (applicable operators, apply, goal
test, state) from its own state, a list of variable values, with `envhub.envs.alfworld.sas`
(the same answers, in the same order: tested against the library). So a step touches no
global state and costs the same however many sessions a process holds.

Only planning needs the native library (`replan`: ALFWorld's planner expert): the
handle then loads its task with the `begin_state` section rewritten to its values (and
its replanning task) into the worker's one `SharedDownward` library, a few milliseconds
for a kitchen-sized game, and only when the library holds another state.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import fast_downward

from envhub.envs.alfworld.sas import SasOperator, SasTask, sas_task


@functools.lru_cache(maxsize=512)
def _text(data: bytes) -> str:
    """A task text, decoded once per process (every state of a game shares the one copy)."""
    return data.decode("utf-8")


class SharedDownward:
    """The native library of one process (for planning) and the handle whose state it holds."""

    def __init__(self) -> None:
        self._lib: Any = fast_downward.load_lib()
        self._owner: DownwardHandle | None = None
        self.swaps = 0
        """How many times a handle loaded its state into the library (for the benchmark and tests)."""

    def handle(self) -> DownwardHandle:
        """A handle for one game state (pass it where TextWorld expects `downward_lib`)."""
        return DownwardHandle(self)

    def activate(self, handle: DownwardHandle) -> Any:
        """Make `handle`'s current state the library's; returns the raw library."""
        if self._owner is not handle:
            handle.load_into(self._lib)
            self._owner = handle
            self.swaps += 1
        return self._lib

    def release(self, handle: DownwardHandle) -> None:
        """Forget that the library holds `handle`'s state (it changed, or its game is closed)."""
        if self._owner is handle:
            self._owner = None

    def close(self) -> None:
        """Free the library's task memory. The library itself stays loaded until the process exits:
        unloading one fast-downward copy and loading another in the same process can crash."""
        self._lib.cleanup()
        self._owner = None


class DownwardHandle:
    """A game's view of fast-downward: the library's functions, on this game's own state."""

    def __init__(self, shared: SharedDownward) -> None:
        self._shared = shared
        self._sas = ""
        self._sas_replan = ""
        self._task: SasTask | None = None
        self._values: list[int] = []
        self._applicable: list[SasOperator] | None = None
        """The operators applicable in the current state, once asked for."""

    @property
    def task(self) -> SasTask:
        if self._task is None:
            raise ValueError("no SAS task loaded")
        return self._task

    @property
    def sas(self) -> str:
        """The task text."""
        return self._sas

    # The two loaders `PddlState` calls.
    def load_sas(self, sas: bytes) -> None:
        self.adopt(_text(sas), None, None)

    def load_sas_replan(self, sas: bytes) -> None:
        self._sas_replan = _text(sas)

    def values(self) -> list[int]:
        """This handle's current state, one value per SAS variable."""
        return list(self._values)

    def adopt(self, sas: str, sas_replan: str | None, values: Sequence[int] | None) -> None:
        """Take the task `sas` (and its replanning task, unless None) in the state `values` (None: initial).

        The texts are kept as given (shared with the game's translation, not copied per state)."""
        self._shared.release(self)
        self._task = sas_task(sas)
        self._sas = self._task.text
        if sas_replan is not None:
            self._sas_replan = sas_replan
        self._values = self._task.initial_state() if values is None else self._task.with_axioms(list(values))
        self._applicable = None

    # What a step asks; the library's signatures (TextWorld passes ctypes arrays to fill).
    def get_state_size(self) -> int:
        return len(self._values)

    def get_state(self, atoms: Any) -> None:
        names = self.task.encoded
        for index, value in enumerate(self._values):
            atoms[index]._name = names[index][value]

    def applicable_operators(self) -> list[SasOperator]:
        """The operators applicable in the current state, in the library's order."""
        if self._applicable is None:
            self._applicable = self.task.applicable(self._values)
        return self._applicable

    def get_applicable_operators_count(self) -> int:
        return len(self.applicable_operators())

    def get_applicable_operators(self, operators: Any) -> None:
        names = self.task.operator_names
        for slot, op in zip(operators, self.applicable_operators(), strict=False):
            slot.id, slot._name, slot.nb_effect_atoms = op.id, names[op.id], op.nb_effect_atoms

    def apply_operator(self, operator_id: int, effects: Any) -> int:
        task = self.task
        facts = task.apply(self._values, task.operators[operator_id])
        for slot, (var, value) in zip(effects, facts, strict=False):
            slot._name = task.encoded[var][value]
        self._applicable = None
        self._shared.release(self)
        return len(facts)

    def check_goal(self) -> bool:
        return self.task.is_goal(self._values)

    # Planning: the native library, from this state.
    def replan(self, verbose: bool) -> bool:
        return bool(self._shared.activate(self).replan(verbose))

    def get_last_plan_length(self) -> int:
        return int(self._shared.activate(self).get_last_plan_length())

    def get_last_plan(self, operators: Any) -> None:
        self._shared.activate(self).get_last_plan(operators)

    def load_into(self, lib: Any) -> None:
        """Load this handle's task, in its current state, and its replanning task into `lib`."""
        lib.load_sas(self.task.with_state(self._sas, self._values).encode("utf-8"))
        lib.load_sas_replan(self._sas_replan.encode("utf-8"))

    def close(self) -> None:
        """Forget this handle's claim on the library."""
        self._shared.release(self)
