"""TextWorld's TatSu parsers, one per thread.

TextWorld keeps one module-level parser object per grammar (`textworld.logic`, its PDDL `logic` and
`textgen`) and a TatSu parser keeps its parse state on itself, so two threads parsing at once corrupt
each other's parse (IndexError / FailedToken deep in TatSu). A worker with a start thread (design note
031) loads games on one thread (game grammars, `logic`) while steps derive text on another (`textgen`
templates), both on memoisation misses. `install` puts a proxy in each module's place that gives every
thread a parser of its own, built as TextWorld builds the shared one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import textworld.envs.pddl.logic as pddl_logic
import textworld.envs.pddl.textgen as textgen
import textworld.logic as game_logic


class ThreadLocalParser:
    """A stand-in for a module's `_PARSER` that parses with a parser of the calling thread's own."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self._build = build
        self._local = threading.local()

    def parse(self, *args: Any, **kwargs: Any) -> Any:
        parser = getattr(self._local, "parser", None)
        if parser is None:
            parser = self._local.parser = self._build()
        return parser.parse(*args, **kwargs)


def _builder(module: ModuleType) -> Callable[[], Any]:
    """How `module` built its shared parser: the same class and semantics class, with parse info."""
    shared = module._PARSER
    parser_class, semantics_class = type(shared), type(shared.semantics)
    return lambda: parser_class(semantics=semantics_class(), parseinfo=True)


_SHARED_PARSER = "_PARSER"
"""The module attribute TextWorld parses with."""
_MODULES: tuple[ModuleType, ...] = (game_logic, pddl_logic, textgen)


def install() -> None:
    """Give every thread its own parser in TextWorld's grammar modules (idempotent)."""
    for module in _MODULES:
        if not isinstance(module._PARSER, ThreadLocalParser):
            setattr(module, _SHARED_PARSER, ThreadLocalParser(_builder(module)))
