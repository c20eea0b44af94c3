"""A SAS planning task (fast-downward's translator output), stepped in Python.

fast-downward's library holds one task and one current state per process, so sessions
sharing it had to swap their states in and out around every call (a SAS parse per
swap: most of a step's cost once a process held more than one session). What a step
needs from the library is small: the applicable operators, the effects of applying
one, the goal test and the state's atoms. `SasTask` answers those from the task text
alone, for any number of states at once; a state is a list of variable values.

The answers are the library's, in the library's order: applicable operators come in
the order of its successor generator (operators sorted by their sorted preconditions,
ties by operator id), effects in the operator's order, derived variables re-evaluated
after every change by the same layered axiom rules. `tests/envs/alfworld/test_sas.py`
compares both on random walks through games of every task type.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Fact = tuple[int, int]
"""(variable, value)."""


@dataclass(frozen=True)
class SasVariable:
    """One variable of a SAS task: its value names and its axiom layer (-1: not derived)."""

    values: tuple[str, ...]
    layer: int

    @property
    def derived(self) -> bool:
        return self.layer >= 0


@dataclass(frozen=True)
class SasOperator:
    """One grounded operator: its preconditions (prevail conditions and effect preconditions) and effects."""

    id: int
    name: str
    preconditions: tuple[Fact, ...]
    """Sorted by variable."""
    effects: tuple[tuple[tuple[Fact, ...], int, int], ...]
    """(effect conditions, variable, new value), in the task's order."""

    @property
    def nb_effect_atoms(self) -> int:
        """How many effect atoms applying it reports (the library's operator field)."""
        return len(self.effects)


@dataclass(frozen=True)
class SasAxiom:
    """A rule deriving `variable = value` when its conditions hold."""

    conditions: tuple[Fact, ...]
    variable: int
    value: int


class _Lines:
    """The task text, line by line."""

    def __init__(self, text: str) -> None:
        self._lines = text.split("\n")
        self._next = 0

    def take(self) -> str:
        line = self._lines[self._next]
        self._next += 1
        return line

    def number(self) -> int:
        return int(self.take())

    def facts(self, count: int) -> tuple[Fact, ...]:
        return tuple(self.fact(self.take()) for _ in range(count))

    @staticmethod
    def fact(line: str) -> Fact:
        var, value = line.split()
        return int(var), int(value)

    def expect(self, word: str) -> None:
        line = self.take()
        if line != word:
            raise ValueError(f"not a SAS task: expected {word!r}, found {line!r}")

    def done(self) -> bool:
        return self._next >= len(self._lines) or not any(self._lines[self._next :])


class SasTask:
    """A parsed SAS task: applicable operators, successor states, axioms and goal, for any state."""

    def __init__(self, text: str) -> None:
        self.text = text
        """The task text (one copy per process, shared by every state of the task)."""
        lines = _Lines(text)
        lines.expect("begin_version")
        if lines.number() != 3:
            raise ValueError("only SAS version 3 is supported")
        lines.expect("end_version")
        lines.expect("begin_metric")
        lines.take()
        lines.expect("end_metric")
        variables = []
        for _ in range(lines.number()):
            lines.expect("begin_variable")
            lines.take()  # its name
            layer = lines.number()
            variables.append(SasVariable(tuple(lines.take() for _ in range(lines.number())), layer))
            lines.expect("end_variable")
        self.variables: tuple[SasVariable, ...] = tuple(variables)
        for _ in range(lines.number()):  # mutex groups: not needed to step
            lines.expect("begin_mutex_group")
            lines.facts(lines.number())
            lines.expect("end_mutex_group")
        lines.expect("begin_state")
        self.initial: tuple[int, ...] = tuple(lines.number() for _ in variables)
        """The initial values as written (derived variables: their default values)."""
        lines.expect("end_state")
        lines.expect("begin_goal")
        self.goal: tuple[Fact, ...] = lines.facts(lines.number())
        lines.expect("end_goal")
        self.operators: tuple[SasOperator, ...] = tuple(self._operator(lines, i) for i in range(lines.number()))
        axioms = []
        for _ in range(lines.number()):
            lines.expect("begin_rule")
            conditions = lines.facts(lines.number())
            var, _, new = (int(part) for part in lines.take().split())  # the old value is the default
            axioms.append(SasAxiom(conditions, var, new))
            lines.expect("end_rule")
        self.axiom_layers: tuple[tuple[SasAxiom, ...], ...] = tuple(
            tuple(a for a in axioms if variables[a.variable].layer == layer)
            for layer in sorted({variables[a.variable].layer for a in axioms})
        )
        self._derived = tuple(i for i, v in enumerate(variables) if v.derived)
        self._defaults = tuple(
            start if v.derived else next(i for i, name in enumerate(v.values) if not name.startswith("Atom "))
            for v, start in zip(variables, self.initial, strict=True)
        )
        self._order = tuple(sorted(self.operators, key=lambda op: (op.preconditions, op.id)))
        """The library's successor-generator order."""
        self._by_first: dict[Fact, tuple[SasOperator, ...]] = {}
        """Operators indexed by their first precondition; those without any are under (-1, -1)."""
        grouped: dict[Fact, list[SasOperator]] = {}
        for op in self._order:
            grouped.setdefault(op.preconditions[0] if op.preconditions else (-1, -1), []).append(op)
        self._by_first = {fact: tuple(ops) for fact, ops in grouped.items()}
        self._rank = {op.id: rank for rank, op in enumerate(self._order)}
        self.atoms: dict[str, Fact] = {
            name: (number, value) for number, v in enumerate(variables) for value, name in enumerate(v.values)
        }
        """Every value name -> (variable, value)."""
        self.encoded: tuple[tuple[bytes, ...], ...] = tuple(
            tuple(name.encode("cp1252") for name in v.values) for v in variables
        )
        """The value names as the library's structures hold them."""
        self.operator_names: tuple[bytes, ...] = tuple(op.name.encode("cp1252") for op in self.operators)

    @staticmethod
    def _operator(lines: _Lines, index: int) -> SasOperator:
        lines.expect("begin_operator")
        name = lines.take()
        preconditions = dict(lines.facts(lines.number()))
        effects = []
        for _ in range(lines.number()):
            parts = [int(part) for part in lines.take().split()]
            count = parts[0]
            conditions = tuple((parts[1 + 2 * i], parts[2 + 2 * i]) for i in range(count))
            var, pre, post = parts[1 + 2 * count :]
            if pre >= 0:
                preconditions[var] = pre
            effects.append((conditions, var, post))
        lines.take()  # cost
        lines.expect("end_operator")
        return SasOperator(index, name, tuple(sorted(preconditions.items())), tuple(effects))

    def initial_state(self) -> list[int]:
        """The initial state, derived variables evaluated."""
        return self.with_axioms(list(self.initial))

    def with_axioms(self, values: list[int]) -> list[int]:
        """`values` with every derived variable reset to its default and derived again (in place)."""
        if not self.axiom_layers:
            return values
        for var in self._derived:
            values[var] = self.initial[var]
        for layer in self.axiom_layers:
            changed = True
            while changed:
                changed = False
                for axiom in layer:
                    if values[axiom.variable] != axiom.value and all(values[v] == x for v, x in axiom.conditions):
                        values[axiom.variable] = axiom.value
                        changed = True
        return values

    def applicable(self, values: Sequence[int]) -> list[SasOperator]:
        """The operators applicable in `values`, in the library's order."""
        found = [op for op in self._by_first.get((-1, -1), ()) if self._holds(op.preconditions, values)]
        for var, value in enumerate(values):
            for op in self._by_first.get((var, value), ()):
                if self._holds(op.preconditions, values):
                    found.append(op)
        if len(found) > 1:
            found.sort(key=lambda op: self._rank[op.id])
        return found

    @staticmethod
    def _holds(facts: Iterable[Fact], values: Sequence[int]) -> bool:
        return all(values[var] == value for var, value in facts)

    def apply(self, values: list[int], op: SasOperator) -> list[Fact]:
        """Apply `op` to `values` (in place); returns the facts of all its effects, in order.

        As the library reports them: conditional effects whose conditions did not hold are listed too.
        """
        fired = [(var, post) for conditions, var, post in op.effects if self._holds(conditions, values)]
        for var, post in fired:
            values[var] = post
        self.with_axioms(values)
        return [(var, post) for _, var, post in op.effects]

    def is_goal(self, values: Sequence[int]) -> bool:
        return self._holds(self.goal, values)

    def values_from_atoms(self, true_atoms: Iterable[str]) -> list[int]:
        """The state whose true atoms ("Atom p(a, b)") are `true_atoms`, derived variables evaluated.

        A variable takes the value whose atom is true, else its negated or "none of those" value.
        """
        values = list(self._defaults)
        for name in true_atoms:
            fact = self.atoms.get(name)
            if fact is not None and not self.variables[fact[0]].derived:
                values[fact[0]] = fact[1]
        return self.with_axioms(values)

    def values_after(self, values: Sequence[int], removed: Iterable[str], added: Iterable[str]) -> list[int]:
        """`values_from_atoms` of the atoms true in `values` less `removed` plus `added`, from those alone.

        A variable's atoms are mutually exclusive, so a removed atom's variable takes its negated or "none of
        those" value unless an added atom sets it. A restore's few changed facts instead of its whole state.
        """
        changed = list(values)
        for name in removed:
            fact = self.atoms.get(name)
            if fact is not None and not self.variables[fact[0]].derived and changed[fact[0]] == fact[1]:
                changed[fact[0]] = self._defaults[fact[0]]
        for name in added:
            fact = self.atoms.get(name)
            if fact is not None and not self.variables[fact[0]].derived:
                changed[fact[0]] = fact[1]
        return self.with_axioms(changed)

    def with_state(self, text: str, values: Sequence[int]) -> str:
        """The task text `text` (this task's) with its initial state replaced by `values`.

        Derived variables keep their defaults: the library reads them as such, and derives them again.
        """
        start = text.index("\nbegin_state\n") + len("\nbegin_state\n")
        end = text.index("end_state\n", start)
        kept = (self.initial[var] if variable.derived else values[var] for var, variable in enumerate(self.variables))
        return text[:start] + "".join(f"{value}\n" for value in kept) + text[end:]

    def atom(self, fact: Fact) -> str:
        """The name of a fact ("Atom p(a, b)", "NegatedAtom p(a)", "<none of those>")."""
        return self.variables[fact[0]].values[fact[1]]


def atom_name(predicate: str, arguments: Iterable[str]) -> str:
    """The SAS name of a true atom, as the library reports it."""
    return f"Atom {predicate}({', '.join(arguments)})"


@functools.lru_cache(maxsize=256)
def sas_task(text: str) -> SasTask:
    """The parsed task of a SAS text (shared by every state of the same task in this process)."""
    return SasTask(text)
