"""Speed-ups for TextWorld's PDDL engine: memoised pure computations and one needless deep copy.

A stock ALFWorld reset translates the same PDDL problem to SAS twice and every step
re-parses the same grammar templates and conjunctive queries. `install` replaces four
module-level functions with cached versions, and `textgen.copy_context` with one that
copies the context's dicts without deep-copying their values; `uninstall` restores the
originals (used by the tests that compare outputs with and without, and by the
benchmark's "before").

* `fast_downward.pddl2sas`: the result (task, sas text) is only read by `PddlState`. With a
  `TranslationStore`, SAS texts are also kept on disk and read back by any process (the
  task beside them is parsed again: `translations.parse_task`).
* `textworld.envs.pddl.logic._parse_and_convert` (game grammar -> actions, grammar): the
  result is only read (`GameLogic` copies it into its own dict and grammar). A game's grammar is
  ALFWorld's with the goal inserted, so the parse of ALFWorld's own is kept and converted with
  the goal (`cached_logic_parse`).
* `textworld.envs.pddl.textgen._parse_and_convert` (template -> symbols): `derive` sets a
  `context` on each returned symbol, so the parsed TatSu model is cached and converted
  afresh on every call (the conversion is cheap, the parse is not).
* `textworld.logic.Rule.parse_conjunctive_query`: a `Rule` is a value (never mutated).
* `textworld.envs.pddl.textgen.copy_context` deep-copies the "variables" (EntityInfo
  objects) and "mapping" dicts for every symbol derived, most of a step's time. The
  grammar only adds keys to those dicts (`query`) and reads the values (`{r.name}`
  evaluations), so fresh dicts holding the same values derive the same text.
* `textworld.envs.pddl.logic.PddlState.all_applicable_actions`, for states whose library is a
  game-state handle (`envhub.envs.alfworld.library.DownwardHandle`): the handle's operators
  are read directly (no ctypes structures to fill and decode), and each operator's action
  name and argument mapping is worked out once per task, then given to a fresh `Action`.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import alfworld.info
import fast_downward
import textworld.envs.pddl.logic as pddl_logic
import textworld.envs.pddl.textgen as textgen
from textworld.logic import Action, Placeholder, Rule, Variable

from envhub.envs.alfworld.library import DownwardHandle
from envhub.envs.alfworld.sas import SasOperator, SasTask
from envhub.envs.alfworld.translations import TranslationStore, parse_task

CACHE_SIZE = 256
"""Entries per cache (problems and grammars are a few hundred KB each)."""
PARSED_KEPT = 4
"""Parsed tasks kept for stored translations: a game's load asks for its two translations one after the other
(`PddlState`: plain, then optimised, whose task it drops), so the second reuses the first's parse: the two
parses were two thirds of a cold load's time (design note 021, 2026-12-02)."""
_ALFRED_GRAMMAR = Path(alfworld.info.ALFRED_TWL2_PATH).read_text()

_ORIGINALS: dict[str, Any] = {
    "pddl2sas": fast_downward.pddl2sas,
    "logic_parse": pddl_logic._parse_and_convert,
    "textgen_parse": textgen._parse_and_convert,
    "conjunctive_query": Rule.__dict__["parse_conjunctive_query"],
    "copy_context": textgen.copy_context,
    "applicable_actions": pddl_logic.PddlState.all_applicable_actions,
}

_Grounding = tuple[str, tuple[tuple[Placeholder, Variable], ...], str, str]
"""An operator's action name, argument mapping, command template and feedback rule."""
_GROUNDINGS: weakref.WeakKeyDictionary[SasTask, dict[int, _Grounding]] = weakref.WeakKeyDictionary()


_STORE: dict[str, TranslationStore] = {}
"""The translation store in use, if any (under the key "store")."""
_TRANSLATING = threading.Lock()
"""One translation at a time: Fast Downward's translator keeps module state and swaps `sys.argv` and `sys.stdout`."""


@functools.lru_cache(maxsize=CACHE_SIZE)
def _pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
    with _TRANSLATING:
        return _translate(domain, problem, verbose, optimize)


@functools.lru_cache(maxsize=PARSED_KEPT)
def _parsed_task(domain: str, problem: str) -> Any:
    """The parsed task of a stored translation, once for both of a load's translations (plain and optimised)."""
    return parse_task(domain, problem)


def _translate(domain: str, problem: str, verbose: bool, optimize: bool) -> Any:
    store = _STORE.get("store")
    if store is not None and not verbose:
        sas = store.get(domain, problem, optimize)
        if sas is not None:
            return _parsed_task(domain, problem), sas
    task, sas = _ORIGINALS["pddl2sas"](domain, problem, verbose=verbose, optimize=optimize)
    if store is not None:
        store.put(domain, problem, optimize, sas)
    return task, sas


def cached_pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
    """`fast_downward.pddl2sas`, memoised on (domain, problem, verbose, optimize)."""
    return _pddl2sas(domain, problem, bool(verbose), bool(optimize))


@functools.lru_cache(maxsize=CACHE_SIZE)
def _logic_parse(text: str, rule_name: str) -> Any:
    return _ORIGINALS["logic_parse"](text, rule_name=rule_name)


GOAL_MARKER = "UNKNOWN GOAL"
"""What ALFWorld replaces with a game's goal sentence in its grammar (`add_task_to_grammar`)."""


@functools.lru_cache(maxsize=8)
def _logic_model(text: str) -> Any:
    return pddl_logic._PARSER.parse(text, rule_name="pddlStart")


class _GoalConverter(pddl_logic._ModelConverter):
    """TextWorld's model converter, with the goal marker in the document's blocks replaced by a goal."""

    def __init__(self, goal: str) -> None:
        super().__init__()
        self._goal = goal

    def _unescape_block(self, string: str) -> str:
        return str(super()._unescape_block(string)).replace(GOAL_MARKER, self._goal)


def _goal_of(text: str) -> str | None:
    """The goal sentence when `text` is ALFWorld's grammar with one inserted (and nothing else changed)."""
    prefix, marker, suffix = _ALFRED_GRAMMAR.partition(GOAL_MARKER)
    if not marker or len(text) < len(prefix) + len(suffix) or not (text.startswith(prefix) and text.endswith(suffix)):
        return None
    goal = text[len(prefix) : len(text) - len(suffix)]
    return goal if '"' not in goal and "\\" not in goal and "\n" not in goal else None


def cached_logic_parse(text: str, rule_name: str) -> Any:
    """`textworld.envs.pddl.logic._parse_and_convert`, memoised (the result is only read).

    Every ALFWorld game's grammar is ALFWorld's with its goal sentence inserted in a grammar block,
    so each would be a miss: for those, the parse of ALFWorld's own grammar is kept (most of a game
    load's cost) and converted afresh with the goal in the block, which the parser takes as opaque
    text (a goal with quotes, backslashes or line breaks is parsed as it is).
    """
    goal = _goal_of(text) if rule_name == "pddlStart" else None
    if goal is None:
        return _logic_parse(text, rule_name)
    return _GoalConverter(goal).walk(_logic_model(_ALFRED_GRAMMAR))


@functools.lru_cache(maxsize=4 * CACHE_SIZE)
def _textgen_model(text: str, rule_name: str, trace: bool) -> Any:
    return textgen._PARSER.parse(text, rule_name=rule_name, trace=trace)


def cached_textgen_parse(text: str, rule_name: str, trace: bool = False) -> Any:
    """`textworld.envs.pddl.textgen._parse_and_convert` with the TatSu parse memoised."""
    return textgen._Converter().walk(_textgen_model(text, rule_name, bool(trace)))


@functools.lru_cache(maxsize=4 * CACHE_SIZE)
def _conjunctive_query(expr: str) -> Rule:
    parse: Callable[[str], Rule] = _ORIGINALS["conjunctive_query"].__get__(None, Rule)
    return parse(expr)


def cached_conjunctive_query(cls: type[Rule], expr: str) -> Rule:
    """`Rule.parse_conjunctive_query`, memoised (a `Rule` is never mutated)."""
    return _conjunctive_query(expr)


def shallow_copy_context(context: dict[str, Any]) -> dict[str, Any]:
    """`textgen.copy_context` without deep-copying the values of "variables" and "mapping"."""
    return {
        "state": context["state"],
        "facts": context["facts"],
        "variables": dict(context["variables"]),
        "mapping": dict(context["mapping"]),
        "entity_infos": context["entity_infos"],
    }


def _grounding(state: pddl_logic.PddlState, op: SasOperator) -> _Grounding:
    """What `PddlState.all_applicable_actions` works out for one operator, as it does."""
    name, *arguments = op.name.split()
    parameters = state._actions[name].parameters
    mapping = tuple(
        (Placeholder(p.name.strip("?"), p.type_name), Variable(arg, p.type_name))
        for p, arg in zip(parameters, arguments, strict=False)
    )
    logic_action = state._logic.actions[name]
    return name, mapping, logic_action.template, logic_action.feedback_rule


def fast_applicable_actions(state: pddl_logic.PddlState) -> list[Action]:
    """`PddlState.all_applicable_actions`, read straight from a game-state handle (others: the original)."""
    handle = state.downward_lib
    if not isinstance(handle, DownwardHandle):
        return list(_ORIGINALS["applicable_actions"](state))
    operators = handle.applicable_operators()
    state._operators = {op.id: op for op in operators}
    groundings = _GROUNDINGS.setdefault(handle.task, {})
    actions = []
    seen = set()
    for op in operators:
        if op.name in seen:
            continue
        seen.add(op.name)
        grounding = groundings.get(op.id)
        if grounding is None:
            grounding = groundings[op.id] = _grounding(state, op)
        name, mapping, template, feedback_rule = grounding
        action = Action(name=name, preconditions=[], postconditions=[])
        action.id = op.id
        action.mapping = dict(mapping)
        action.command_template = template
        action.feedback_rule = feedback_rule
        actions.append(action)
    return actions


def install(translations: TranslationStore | None = None) -> None:
    """Put the cached functions and the shallow context copy in place (idempotent); `translations`: where
    SAS texts are kept on disk (replaces the store in use)."""
    if translations is not None:
        _STORE["store"] = translations
    fast_downward.pddl2sas = cached_pddl2sas
    pddl_logic._parse_and_convert = cached_logic_parse
    textgen._parse_and_convert = cached_textgen_parse
    Rule.parse_conjunctive_query = classmethod(cached_conjunctive_query)
    textgen.copy_context = shallow_copy_context
    pddl_logic.PddlState.all_applicable_actions = fast_applicable_actions


def uninstall() -> None:
    """Put the original functions back and empty the caches."""
    fast_downward.pddl2sas = _ORIGINALS["pddl2sas"]
    pddl_logic._parse_and_convert = _ORIGINALS["logic_parse"]
    textgen._parse_and_convert = _ORIGINALS["textgen_parse"]
    Rule.parse_conjunctive_query = _ORIGINALS["conjunctive_query"]
    textgen.copy_context = _ORIGINALS["copy_context"]
    pddl_logic.PddlState.all_applicable_actions = _ORIGINALS["applicable_actions"]
    _GROUNDINGS.clear()
    _STORE.clear()
    for cache in (_pddl2sas, _parsed_task, _logic_parse, _logic_model, _textgen_model, _conjunctive_query):
        cache.cache_clear()


def installed() -> bool:
    """Whether the cached versions are in place."""
    return fast_downward.pddl2sas is cached_pddl2sas
