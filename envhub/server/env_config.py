"""Per-environment server settings from the command line: `--env-config FILE.yaml` and `--set ENV.KEY=VALUE`.

A file maps environment names to their settings:

    alfworld:
      rooms: small
      data: /data/alfworld

`--set alfworld.rooms=small` sets one value (parsed as a YAML scalar, so `seed=3` is a number)
and wins over the files. The kind checks the keys and values when its workers start
(`EnvironmentKind.from_config`): a bad one stops the server with the kind's message.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from envhub.core.registry import kinds


def check_environments(environments: Sequence[str]) -> None:
    """ValueError naming an environment that is neither registered nor a "module:Class" reference."""
    known = kinds()
    for name in environments:
        if name not in known and ":" not in name:
            raise ValueError(f"unknown environment {name!r}; known: {', '.join(sorted(known))} (or module:Class)")


def environment_config(
    environments: Sequence[str], files: Sequence[str], sets: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """The settings of each served environment from YAML `files` then `sets`; ValueError when malformed."""
    check_environments(environments)
    config: dict[str, dict[str, Any]] = {}
    for path in files:
        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ValueError(f"--env-config {path}: {exc}") from exc
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise ValueError(
                f"--env-config {path} must map environment names to settings, e.g. `alfworld: {{rooms: small}}`"
            )
        for name, settings in data.items():
            config.setdefault(str(name), {}).update({str(key): value for key, value in settings.items()})
    for item in sets:
        target, equals, text = item.partition("=")
        name, dot, key = target.rpartition(".")
        if not (equals and dot and name and key):
            raise ValueError(f"--set {item!r} must look like ENV.KEY=VALUE, e.g. alfworld.rooms=small")
        try:
            value = yaml.safe_load(text) if text else ""
        except yaml.YAMLError:
            value = text
        config.setdefault(name, {})[key] = value if isinstance(value, str | int | float | bool) else text
    stray = sorted(set(config) - set(environments))
    if stray:
        raise ValueError(f"settings given for environment(s) not served: {stray} (serve them with --env)")
    return config
