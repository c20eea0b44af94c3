"""One fast-downward library per worker process, time-shared by many game states.

`fast_downward.load_lib()` copies the 34 MB `libdownward.so` to a temporary folder and
loads it, and the loaded library holds exactly one planning task and one current state.
Sessions in a worker interleave, so each needs its own state, but not its own library:
`SharedDownward` loads the library once and hands every game a `DownwardHandle`, which
is what TextWorld's `PddlState` sees as its `downward_lib`. Before any call, a handle
that is not the library's current owner swaps itself in: the outgoing handle saves its
state (one value per SAS variable), and the incoming one reloads its SAS task with the
`begin_state` section rewritten to its saved values (plus its replanning task, whose
search starts from the main task's current state). A swap costs one SAS parse in C, a
few milliseconds for a kitchen-sized game; no Python state is touched.

The same rewrite restores a native snapshot: `SasLayout.values_from_atoms` turns any state,
given as its true atoms, into variable values, and `DownwardHandle.adopt` takes them,
without re-translating the PDDL problem.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import fast_downward
from textworld.envs.pddl.logic import Atom


@dataclass(frozen=True)
class SasVariable:
    """One variable of a SAS task: its value names and whether axioms derive it."""

    values: tuple[str, ...]
    derived: bool


@dataclass(frozen=True)
class SasLayout:
    """What state rewriting needs to know about one SAS task text."""

    variables: tuple[SasVariable, ...]
    initial: tuple[int, ...]
    state_start: int
    """Offset of the first value line of the `begin_state` section."""
    state_end: int
    """Offset of the `end_state` line."""
    atoms: dict[str, tuple[int, int]]
    """True-atom name -> (variable, value) for the variables that are not derived."""
    defaults: tuple[int, ...]
    """Each variable's value when none of its atoms is true (derived ones: their initial value)."""

    def values_from_atoms(self, true_atoms: Iterable[str]) -> list[int]:
        """Variable values for a state given by its true atom names ("Atom p(a, b)").

        A variable takes the value whose atom is true, else its negated or "none of
        those" value; derived variables keep their initial (default) value, as the
        translator writes them and as the library re-derives them.
        """
        values = list(self.defaults)
        for name in true_atoms:
            found = self.atoms.get(name)
            if found is not None:
                values[found[0]] = found[1]
        return values

    def with_state(self, sas: str, values: Iterable[int]) -> str:
        """`sas` with its initial state replaced by `values`."""
        return sas[: self.state_start] + "".join(f"{value}\n" for value in values) + sas[self.state_end :]


@functools.lru_cache(maxsize=256)
def sas_layout(sas: str) -> SasLayout:
    """Parse the variables and the initial-state position of a SAS task text."""
    lines = sas.split("\n")
    variables: list[SasVariable] = []
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    index = 0
    initial: list[int] = []
    state_start = state_end = -1
    while index < len(lines):
        line = lines[index]
        if line == "begin_variable":
            count = int(lines[index + 3])
            derived = int(lines[index + 2]) >= 0
            variables.append(SasVariable(tuple(lines[index + 4 : index + 4 + count]), derived))
            index += 4 + count
        elif line == "begin_state":
            state_start = offsets[index + 1]
            initial = [int(value) for value in lines[index + 1 : index + 1 + len(variables)]]
            index += 1 + len(variables)
            state_end = offsets[index]
            break
        else:
            index += 1
    if state_start < 0 or lines[index] != "end_state":
        raise ValueError("not a SAS task: no begin_state section after the variables")
    atoms = {
        name: (number, value)
        for number, variable in enumerate(variables)
        if not variable.derived
        for value, name in enumerate(variable.values)
        if name.startswith("Atom ")
    }
    defaults = tuple(
        start if variable.derived else next(i for i, name in enumerate(variable.values) if not name.startswith("Atom "))
        for variable, start in zip(variables, initial, strict=True)
    )
    return SasLayout(tuple(variables), tuple(initial), state_start, state_end, atoms, defaults)


def atom_name(predicate: str, arguments: Iterable[str]) -> str:
    """The SAS name of a true atom, as the library reports it."""
    return f"Atom {predicate}({', '.join(arguments)})"


class SharedDownward:
    """The library of one process and the handle whose state it currently holds."""

    def __init__(self) -> None:
        self._lib: Any = fast_downward.load_lib()
        self._owner: DownwardHandle | None = None
        self.swaps = 0
        """How many times a handle swapped its state in (for the benchmark)."""

    def handle(self) -> DownwardHandle:
        """A handle for one game state (pass it where TextWorld expects `downward_lib`)."""
        return DownwardHandle(self)

    def activate(self, handle: DownwardHandle) -> Any:
        """Make `handle`'s state the library's current one; returns the raw library."""
        if self._owner is not handle:
            if self._owner is not None:
                self._owner.save_from(self._lib)
            handle.load_into(self._lib)
            self._owner = handle
            self.swaps += 1
        return self._lib

    def claim(self, handle: DownwardHandle) -> Any:
        """Make `handle` the owner without restoring anything (it is about to load a task)."""
        if self._owner is not None and self._owner is not handle:
            self._owner.save_from(self._lib)
        self._owner = handle
        return self._lib

    def owns(self, handle: DownwardHandle) -> bool:
        """Whether the library currently holds `handle`'s state."""
        return self._owner is handle

    @property
    def raw(self) -> Any:
        """The loaded library itself."""
        return self._lib

    def release(self, handle: DownwardHandle) -> None:
        """Forget `handle` (its game is closed)."""
        if self._owner is handle:
            self._owner = None

    def close(self) -> None:
        """Free the library's task memory. The library itself stays loaded until the process exits:
        unloading one fast-downward copy and loading another in the same process can crash."""
        self._lib.cleanup()
        self._owner = None


class DownwardHandle:
    """A game's view of the shared library: the same functions, with its own state."""

    def __init__(self, shared: SharedDownward) -> None:
        self._shared = shared
        self._sas = ""
        self._sas_replan = b""
        self._values: list[int] | None = None

    # The two loaders `PddlState` calls: record the task, then load it as owner.
    def load_sas(self, sas: bytes) -> None:
        self._sas = sas.decode("utf-8")
        self._values = None
        self._shared.claim(self).load_sas(sas)

    def load_sas_replan(self, sas: bytes) -> None:
        self._sas_replan = sas
        self._shared.claim(self).load_sas_replan(sas)

    def values(self) -> list[int]:
        """This handle's current state, one value per SAS variable."""
        if self._shared.owns(self):
            self.save_from(self._shared.raw)
        if self._values is None:
            return list(sas_layout(self._sas).initial)
        return list(self._values)

    def adopt(self, sas: str, sas_replan: str, values: list[int]) -> None:
        """Take the task `sas` (and its replanning task) in the state `values`; loaded on first use."""
        self._shared.release(self)
        self._sas, self._sas_replan, self._values = sas, sas_replan.encode("utf-8"), list(values)

    def save_from(self, lib: Any) -> None:
        """Record the library's current state as this handle's (it is being swapped out)."""
        layout = sas_layout(self._sas)
        atoms = (Atom * lib.get_state_size())()
        lib.get_state(atoms)
        self._values = [
            initial if variable.derived else variable.values.index(atom.name)
            for variable, initial, atom in zip(layout.variables, layout.initial, atoms, strict=True)
        ]

    def load_into(self, lib: Any) -> None:
        """Load this handle's task and state into `lib`."""
        sas = self._sas if self._values is None else sas_layout(self._sas).with_state(self._sas, self._values)
        lib.load_sas(sas.encode("utf-8"))
        lib.load_sas_replan(self._sas_replan)

    def close(self) -> None:
        """Forget this handle's state."""
        self._shared.release(self)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        """Any other library function: swap this state in, then call it."""
        if name.startswith("_"):
            raise AttributeError(name)

        def call(*args: Any) -> Any:
            return getattr(self._shared.activate(self), name)(*args)

        return call
