"""Environment kinds by name, imported lazily so a client-only install stays light."""

from __future__ import annotations

import importlib

from envhub.core.environment import EnvironmentKind

KINDS: dict[str, str] = {
    "scienceworld": "envhub.envs.scienceworld.kind:ScienceWorldKind",
    "alfworld": "envhub.envs.alfworld.kind:AlfWorldKind",
    "searchqa": "envhub.envs.searchqa.kind:SearchQAKind",
    "webshop": "envhub.envs.webshop.kind:WebShopKind",
}
"""Environment name -> "module:class" of its `EnvironmentKind`."""

EXTRAS: dict[str, str] = {
    "scienceworld": "scienceworld",
    "alfworld": "alfworld",
    "searchqa": "searchqa",
    "webshop": "webshop",
}


def kind_class(name: str) -> type[EnvironmentKind]:
    """The `EnvironmentKind` subclass registered under `name`.

    Raises KeyError for an unknown name and ImportError (with the pip remedy) when
    the environment's extra is not installed.
    """
    if name not in KINDS:
        raise KeyError(f"unknown environment {name!r}; known: {', '.join(sorted(KINDS))}")
    module_name, class_name = KINDS[name].split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(
            f"environment {name!r} needs extra packages: pip install 'envhub[{EXTRAS[name]}]' ({exc})"
        ) from exc
    kind: type[EnvironmentKind] = getattr(module, class_name)
    return kind
