"""One ALFWorld game engine: TextWorld's `PddlEnv` behind ALFWorld's demangler, on a shared library.

`GameEngine` plays one game as ALFWorld does (`PddlEnv` wrapped in `AlfredDemangler`, so
objects read "apple 1"), but its `PddlEnv` talks to the worker's `SharedDownward` through
its own `DownwardHandle` instead of loading a private 34 MB library copy.

Its state as plain data (`export_state`) is the difference between the current PDDL
facts and the initial ones, the move count and the texts of the applicable commands.
`import_state` copies the game's initial state (kept per process, so nothing is
translated again), applies the difference, hands the matching SAS values to the library
handle and pairs the library's applicable actions with the recorded texts: no replay and
no grammar derivation. A state this process exported itself (a fork) is simply copied.
"""

from __future__ import annotations

import copy
import json
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import textworld
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
from textworld.core import GameState
from textworld.envs import PddlEnv
from textworld.envs.pddl import logic as pddl_logic
from textworld.logic import Proposition, Variable

from envhub.envs.alfworld.commands import CommandTexts, changing_predicates
from envhub.envs.alfworld.library import DownwardHandle, SharedDownward
from envhub.envs.alfworld.sas import atom_name, sas_task

FactRow = list[Any]
"""A fact as plain data: [predicate, [argument, ...], [type, ...]]."""

GAME_CACHE_SIZE = 32
"""Loaded games kept per process (parsed logic and demangled names, shared read-only by engines)."""
TEMPLATE_CACHE_SIZE = 16
"""States recently exported in this process, kept so that restoring them (a fork) is a copy."""


@dataclass(frozen=True)
class _LoadedGame:
    """The read-only part of a loaded game, shared by every engine playing it in this process."""

    data: dict[str, Any]
    logic: pddl_logic.GameLogic
    entity_infos: dict[str, Any]
    initial_state: pddl_logic.PddlState
    """A private copy of the state right after load (restores copy it instead of translating again)."""
    initial_facts: frozenset[Proposition]
    commands: CommandTexts
    """Its command texts, derived once per action where the grammar allows (shared by its engines)."""
    initial_values: list[int]
    """The SAS values of the initial state (a restore changes the few its facts differ in)."""


@dataclass(frozen=True)
class _Template:
    """A private copy of an exported engine state."""

    pddl_state: pddl_logic.PddlState
    game_state: GameState
    values: list[int]


_GAMES: OrderedDict[str, _LoadedGame] = OrderedDict()
_TEMPLATES: OrderedDict[str, _Template] = OrderedDict()


def _remember(cache: OrderedDict[str, Any], key: str, value: Any, size: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > size:
        cache.popitem(last=False)


def forget_exported_states() -> None:
    """Drop the copies kept for forks, so the next restores rebuild from plain data (tests, benchmark)."""
    _TEMPLATES.clear()


def _copy_pddl_state(state: pddl_logic.PddlState, handle: DownwardHandle) -> pddl_logic.PddlState:
    """A copy of `state` with its own facts, on `handle` (translation and operators are shared, read-only)."""
    clone = copy.copy(state)
    clone._facts = defaultdict(set, {signature: set(facts) for signature, facts in state._facts.items()})
    clone._vars_by_name = dict(state._vars_by_name)
    clone._vars_by_type = defaultdict(set, {kind: set(names) for kind, names in state._vars_by_type.items()})
    clone._var_counts = Counter(state._var_counts)
    clone.downward_lib = handle
    return clone


class _SharedPddlEnv(PddlEnv):
    """`PddlEnv` whose `downward_lib` is a game-state handle, and whose command texts come from `CommandTexts`."""

    def __init__(self, infos: textworld.EnvInfos, handle: DownwardHandle) -> None:
        textworld.Environment.__init__(self, infos)
        self.downward_lib = handle
        self.commands: CommandTexts | None = None
        """The loaded game's command texts (set by `GameEngine.load`)."""

    def _gather_infos(self, commands: list[str] | None = None) -> None:
        """What `PddlEnv._gather_infos` computes; the command texts from `commands` (a restore) or `CommandTexts`.

        The applicable actions come from the state in a fixed order, so recorded texts line up.
        """
        pddl_state, state = self._pddl_state, self.state
        state["command_templates"] = sorted({action.template for action in self._logic.actions.values()})
        state["won"] = pddl_state.check_goal()
        state["lost"] = False
        state["_entity_infos"] = dict(self._entity_infos)
        state["_facts"] = list(pddl_state.facts)
        if self.request_infos.facts:
            state["facts"] = [self._get_human_readable_fact(fact) for fact in state["_facts"]]
        state["last_action"] = None
        state["_last_action"] = self._last_action
        state["_valid_actions"] = list(pddl_state.all_applicable_actions())
        if commands is None:
            texts = self.commands
            if texts is None:
                raise ValueError("no game loaded")
            commands = [texts.command(action, pddl_state, self._entity_infos) for action in state["_valid_actions"]]
        elif len(commands) != len(state["_valid_actions"]):
            raise ValueError(f"{len(commands)} command texts for {len(state['_valid_actions'])} applicable actions")
        state["_valid_commands"] = commands
        state["admissible_commands"] = sorted(set(commands))
        if self.request_infos.moves:
            state["moves"] = self._moves
        if self.request_infos.policy_commands:
            state["policy_commands"] = pddl_state.replan(self._entity_infos)


def _fact_row(fact: Proposition) -> FactRow:
    return [fact.name, [v.name for v in fact.arguments], [v.type for v in fact.arguments]]


def _fact(row: FactRow) -> Proposition:
    name, arguments, types = row
    return Proposition(name, [Variable(a, t) for a, t in zip(arguments, types, strict=True)])


class GameEngine:
    """Plays one ALFWorld game at a time; reusable across games with `load`."""

    def __init__(self, library: SharedDownward, *, facts: bool = False) -> None:
        self._handle = library.handle()
        infos = textworld.EnvInfos(won=True, admissible_commands=True, facts=facts)
        self._pddl = _SharedPddlEnv(infos, self._handle)
        self._env = AlfredDemangler(self._pddl)
        self._game_key = ""
        self._loaded: _LoadedGame | None = None
        self._exported: tuple[GameState, dict[str, Any], str] | None = None
        """The last export: the game state it was made from, the plain data, its copy's key."""
        self.state: GameState = GameState()

    def load(self, game_json: Mapping[str, Any], key: str) -> None:
        """Load a game; a game already loaded in this process (same `key`) is shared, not parsed again."""
        if key == self._game_key:
            return
        loaded = _GAMES.get(key)
        if loaded is None:
            self._env.load(dict(game_json))
            pddl = self._pddl
            initial = _copy_pddl_state(pddl._pddl_state, self._handle)
            commands = CommandTexts(pddl._logic, changing_predicates(initial.task))
            values = sas_task(initial.sas).values_from_atoms(atom_name(f.name, f.names) for f in initial.facts)
            loaded = _LoadedGame(
                pddl._game_data, pddl._logic, pddl._entity_infos, initial, frozenset(initial.facts), commands, values
            )
        else:
            self._pddl._game_data = loaded.data
            self._pddl.walkthrough = loaded.data.get("walkthrough")
            self._pddl._logic = loaded.logic
            self._pddl._entity_infos = loaded.entity_infos
        self._pddl.commands = loaded.commands
        _remember(_GAMES, key, loaded, GAME_CACHE_SIZE)
        self._game_key = key
        self._loaded = loaded

    def reset(self) -> GameState:
        """Start the loaded game; returns TextWorld's game state (feedback, admissible, won)."""
        self.state = self._env.reset()
        return self.state

    def step(self, command: str) -> GameState:
        """Apply a command; unknown commands give "Nothing happens.", as in ALFWorld."""
        self.state, _, _ = self._env.step(command)
        return self.state

    @property
    def admissible(self) -> list[str]:
        return list(self.state["admissible_commands"])

    @property
    def won(self) -> bool:
        return bool(self.state["won"])

    def replan(self) -> list[str]:
        """The optimal plan from the current state (ALFWorld's planner expert)."""
        plan: list[str] = self._pddl._pddl_state.replan(self._pddl._entity_infos)
        return plan

    def export_state(self) -> dict[str, Any]:
        """The current state as plain data: differences from the initial facts, moves, command texts.

        Exporting the same state again (n forks of one session) returns the same dict.
        """
        if self._exported is not None and self._exported[0] is self.state and self._exported[2] in _TEMPLATES:
            return self._exported[1]
        pddl, initial_facts = self._pddl, self._game().initial_facts
        facts = set(pddl._pddl_state.facts)
        state = {
            "added": sorted(_fact_row(f) for f in facts - initial_facts),
            "removed": sorted(_fact_row(f) for f in initial_facts - facts),
            "moves": pddl._moves,
            "commands": list(pddl.state["_valid_commands"]),
        }
        template = _Template(
            _copy_pddl_state(pddl._pddl_state, self._handle), GameState(pddl.state), self._handle.values()
        )
        key = self._template_key(state)
        _remember(_TEMPLATES, key, template, TEMPLATE_CACHE_SIZE)
        self._exported = (self.state, state, key)
        return state

    def _template_key(self, state: Mapping[str, Any]) -> str:
        return f"{self._game_key}\n{json.dumps(state, sort_keys=True)}"

    def import_state(self, state: Mapping[str, Any], feedback: str) -> GameState:
        """Put the loaded game into `state` (from `export_state`), showing `feedback`.

        A state exported in this process is copied (a fork); any other is rebuilt from
        the initial state and the fact differences, and loaded into the library.
        """
        pddl = self._pddl
        pddl._moves = int(state["moves"])
        pddl.prev_state = None
        pddl._last_action = None
        template = _TEMPLATES.get(self._template_key(state))
        if template is not None:
            pddl._pddl_state = _copy_pddl_state(template.pddl_state, self._handle)
            self._handle.adopt(template.pddl_state.sas, template.pddl_state.sas_replan, template.values)
            pddl.state = GameState(template.game_state)
        else:
            game = self._game()
            rebuilt = _copy_pddl_state(game.initial_state, self._handle)
            rebuilt.remove_facts([_fact(row) for row in state["removed"]])
            rebuilt.add_facts([_fact(row) for row in state["added"]])
            values = sas_task(rebuilt.sas).values_after(
                game.initial_values,
                (atom_name(row[0], row[1]) for row in state["removed"]),
                (atom_name(row[0], row[1]) for row in state["added"]),
            )
            self._handle.adopt(rebuilt.sas, rebuilt.sas_replan, values)
            pddl._pddl_state = rebuilt
            pddl.state = GameState()
            pddl._gather_infos(list(state["commands"]))
        pddl.state.feedback = pddl.state.raw = feedback
        self.state = pddl.state
        return self.state

    def _game(self) -> _LoadedGame:
        if self._loaded is None:
            raise ValueError("no game loaded")
        return self._loaded

    def close(self) -> None:
        """Release this engine's claim on the shared library."""
        self._handle.close()
