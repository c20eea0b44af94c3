"""Environment kinds by name: the built-ins, plus any package's `envhub.environments` entry points.

A third-party package adds a kind without editing envhub by declaring, in its pyproject.toml,

    [project.entry-points."envhub.environments"]
    mykind = "mypackage.kind:MyKind"

    [project.entry-points."envhub.action_formats"]   # how agents prompt it and parse replies
    mykind = "mypackage.action_format:FORMAT"

Kinds are imported lazily (only when served), so a client-only install stays light. A name
may also be given as "package.module:Class" directly (handy for tests and experiments).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from envhub.core.environment import EnvironmentKind

ENTRY_POINT_GROUP = "envhub.environments"
FORMAT_ENTRY_POINT_GROUP = "envhub.action_formats"


@dataclass(frozen=True)
class BuiltInKind:
    """One environment kind envhub ships: where its class is, the pip extra installing its engine and where
    its action format is (`envhub.client.formats`; a module importing nothing heavy)."""

    reference: str
    """Its `EnvironmentKind` class as "module:Class"."""
    extra: str
    """`pip install 'envhub[<extra>]'` installs what it imports."""
    format: str
    """Its `ActionFormat` as "module:ATTR"."""


KINDS: Mapping[str, BuiltInKind] = {
    "scienceworld": BuiltInKind(
        "envhub.envs.scienceworld.kind:ScienceWorldKind",
        extra="scienceworld",
        format="envhub.envs.scienceworld.action_format:FORMAT",
    ),
    "alfworld": BuiltInKind(
        "envhub.envs.alfworld.kind:AlfWorldKind", extra="alfworld", format="envhub.envs.alfworld.action_format:FORMAT"
    ),
    "searchqa": BuiltInKind(
        "envhub.envs.searchqa.kind:SearchQAKind", extra="searchqa", format="envhub.envs.searchqa.action_format:FORMAT"
    ),
    "webshop": BuiltInKind(
        "envhub.envs.webshop.kind:WebShopKind", extra="webshop", format="envhub.envs.webshop.action_format:FORMAT"
    ),
}
"""The built-in kinds by environment name: one row each."""


def kinds() -> dict[str, str]:
    """Every known kind: the built-ins, then entry points of installed packages (which may not shadow them)."""
    found = {name: kind.reference for name, kind in KINDS.items()}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(entry.name, entry.value)
    return found


def formats() -> dict[str, str]:
    """Environment name -> its action format ("module:ATTR"): the built-ins, then installed packages'
    `envhub.action_formats` entry points (which may not shadow them)."""
    found = {name: kind.format for name, kind in KINDS.items()}
    for entry in entry_points(group=FORMAT_ENTRY_POINT_GROUP):
        found.setdefault(entry.name, entry.value)
    return found


def kind_class(name: str) -> type[EnvironmentKind]:
    """The `EnvironmentKind` subclass registered under `name` (or named "module:Class").

    Raises KeyError for an unknown name and ImportError (with the pip remedy) when
    the environment's extra is not installed.
    """
    known = kinds()
    reference = known.get(name) or (name if ":" in name else None)
    if reference is None:
        raise KeyError(f"unknown environment {name!r}; known: {', '.join(sorted(known))}")
    module_name, class_name = reference.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        built_in = KINDS.get(name)
        remedy = f"pip install 'envhub[{built_in.extra}]'" if built_in else f"install the package of {module_name}"
        raise ImportError(f"environment {name!r} needs extra packages: {remedy} ({exc})") from exc
    kind = getattr(module, class_name, None)
    if not (isinstance(kind, type) and issubclass(kind, EnvironmentKind)):
        raise TypeError(f"{reference} is not an envhub EnvironmentKind")
    return kind


def build_kind(name: str, config: Mapping[str, Any] | None = None) -> EnvironmentKind:
    """An instance of kind `name` built from its server-side `config` (see `EnvironmentKind.from_config`)."""
    return kind_class(name).from_config(dict(config or {}))
