"""The command texts of a game's actions, derived from the grammar once per game instead of every step.

After every step TextWorld derives, for each applicable action, its command text from the
game's context-sensitive grammar ("go to [{r.name | receptacleatlocation(r, lend)}]"): most
of a step's cost. A derivation reads the state only through its queries and rule
conditions; when all of those name predicates that no action changes (static facts, such
as which receptacle stands at which location), the text depends on the grounded action
alone, so `CommandTexts` derives it once per (action, arguments) and game and hands out
the same text afterwards. Templates that read changing facts are derived every time, as
TextWorld does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import textworld.envs.pddl.textgen as textgen
from textworld.envs.pddl import logic as pddl_logic
from textworld.logic import Action, Rule


def changing_predicates(task: Any) -> frozenset[str]:
    """Predicates that an action's effect or an axiom can change, in a translator task (lower case)."""
    changed = {effect.literal.predicate for action in task.actions for effect in action.effects}
    changed |= {axiom.name for axiom in task.axioms}
    return frozenset(name.lower() for name in changed)


class CommandTexts:
    """The command texts of one loaded game, derived once where the grammar allows."""

    def __init__(self, logic: pddl_logic.GameLogic, changing: frozenset[str]) -> None:
        self._grammar = logic.grammar
        self._changing = changing
        self._static: dict[str, bool] = {}
        """Template -> whether its derivation reads only static facts."""
        self._texts: dict[tuple[str, tuple[str, ...]], tuple[str, str]] = {}
        """(action name, argument names) -> (derived template, command)."""

    def command(self, action: Action, state: Any, entity_infos: Mapping[str, Any]) -> str:
        """The command of an applicable `action`, its `command_template` set to the derived one (as TextWorld does)."""
        key = (action.name, tuple(variable.name for variable in action.mapping.values()))
        known = self._texts.get(key)
        if known is not None:
            action.command_template = known[0]
            return known[1]
        template = action.command_template
        context = {
            "state": state,
            "facts": list(state.facts),
            "variables": {ph.name: entity_infos[var.name] for ph, var in action.mapping.items()},
            "mapping": action.mapping,
            "entity_infos": entity_infos,
        }
        action.command_template = self._grammar.derive(template, context)
        command = str(action.format_command({k: info.name for k, info in entity_infos.items()}))
        if self._is_static(template):
            self._texts[key] = (action.command_template, command)
        return command

    def _is_static(self, template: str) -> bool:
        if template not in self._static:
            self._static[template] = self._symbols_static(
                textgen._parse_and_convert(template, rule_name="symbols"), set()
            )
        return self._static[template]

    def _symbols_static(self, symbols: Iterable[Any], seen: set[str]) -> bool:
        return all(self._symbol_static(symbol, seen) for symbol in symbols)

    def _symbol_static(self, symbol: Any, seen: set[str]) -> bool:
        if isinstance(symbol, (textgen.TerminalSymbol, textgen.EvalSymbol)):
            return True
        if isinstance(symbol, textgen.ListSymbol):
            return self._symbol_static(symbol.symbol, seen)
        if isinstance(symbol, textgen.ConditionalSymbol):
            return self._query_static(symbol.given) and self._symbol_static(symbol.expression, seen)
        if isinstance(symbol, textgen.NonterminalSymbol):
            name = str(symbol)
            if name in seen:
                return True
            seen.add(name)
            rules = self._grammar._rules.get(name, [])
            return all(self._query_static(rule.condition) and self._symbols_static(rule.rhs, seen) for rule in rules)
        return False  # a symbol kind this check does not know: derive it every time

    def _query_static(self, query: str) -> bool:
        if not query:
            return True
        predicates = Rule.parse_conjunctive_query(query).preconditions
        return not any(p.name.lower().removeprefix("not_") in self._changing for p in predicates)
