"""Environment kinds by name: the built-ins, plus any package's `envhub.environments` entry points.

A third-party package adds a kind without editing envhub by declaring, in its pyproject.toml,

    [project.entry-points."envhub.environments"]
    mykind = "mypackage.kind:MyKind"

Kinds are imported lazily (only when served), so a client-only install stays light. A name
may also be given as "package.module:Class" directly (handy for tests and experiments).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any

from envhub.core.environment import EnvironmentKind

ENTRY_POINT_GROUP = "envhub.environments"
KINDS: dict[str, str] = {
    "scienceworld": "envhub.envs.scienceworld.kind:ScienceWorldKind",
    "alfworld": "envhub.envs.alfworld.kind:AlfWorldKind",
    "searchqa": "envhub.envs.searchqa.kind:SearchQAKind",
    "webshop": "envhub.envs.webshop.kind:WebShopKind",
}
"""Environment name -> "module:Class" of its `EnvironmentKind`, for the kinds envhub ships."""

EXTRAS: dict[str, str] = {
    "scienceworld": "scienceworld",
    "alfworld": "alfworld",
    "searchqa": "searchqa",
    "webshop": "webshop",
}
"""Built-in kind -> the pip extra that installs its engine."""


def kinds() -> dict[str, str]:
    """Every known kind: the built-ins, then entry points of installed packages (which may not shadow them)."""
    found = dict(KINDS)
    for entry in entry_points(group=ENTRY_POINT_GROUP):
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
        remedy = f"pip install 'envhub[{EXTRAS[name]}]'" if name in EXTRAS else f"install the package of {module_name}"
        raise ImportError(f"environment {name!r} needs extra packages: {remedy} ({exc})") from exc
    kind = getattr(module, class_name, None)
    if not (isinstance(kind, type) and issubclass(kind, EnvironmentKind)):
        raise TypeError(f"{reference} is not an envhub EnvironmentKind")
    return kind


def build_kind(name: str, config: Mapping[str, Any] | None = None) -> EnvironmentKind:
    """An instance of kind `name` built from its server-side `config` (see `EnvironmentKind.from_config`)."""
    return kind_class(name).from_config(dict(config or {}))
