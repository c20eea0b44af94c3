"""`ScienceWorldKind`: the ScienceWorld task set, options and environment factory.

One kind object per worker process owns one JVM (started on the first `create`) in
which every environment of that process is a separate simulator.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from scienceworld.version import __version__ as SCIENCEWORLD_VERSION

from envhub.core.environment import Capabilities, Environment, EnvironmentKind, TaskSpec
from envhub.envs.scienceworld import catalog
from envhub.envs.scienceworld import options as sw_options
from envhub.envs.scienceworld.environment import ScienceWorldEnvironment
from envhub.envs.scienceworld.expert import GoldPaths
from envhub.envs.scienceworld.jvm import DEFAULT_JAVA_OPTS, Jvm

DETERMINISM_PATH = Path(__file__).with_name("determinism.json")
"""The committed result of `python -m envhub.envs.scienceworld.determinism`."""


def nondeterministic_tasks(path: Path = DETERMINISM_PATH) -> frozenset[str]:
    """Task names whose replay the determinism study saw diverge."""
    result = json.loads(path.read_text())
    return frozenset(name for name, row in result["tasks"].items() if not row["deterministic"])


class ScienceWorldKind(EnvironmentKind):
    """ScienceWorld (Wang et al., 2022): 30 science tasks, train/dev/test variations."""

    name = "scienceworld"
    version = f"{SCIENCEWORLD_VERSION}+envhub.1"
    description = "ScienceWorld text simulator: 30 elementary-science tasks with train/dev/test variations"
    capabilities = Capabilities(native_snapshot=False, deterministic_replay=True, expert=True, admissible_actions=True)
    default_max_steps = 100
    options: Mapping[str, str] = {
        sw_options.SIMPLIFICATIONS_OPTION: "comma-separated ScienceWorld simplifications (e.g. 'easy' or "
        "'teleportAction,openDoors'); default none"
    }

    config_keys: Mapping[str, str] = {
        "java_opts": f"JVM options of each worker's ScienceWorld engine, space-separated (default: "
        f"{' '.join(DEFAULT_JAVA_OPTS)})"
    }

    def __init__(self, java_opts: Sequence[str] = DEFAULT_JAVA_OPTS) -> None:
        self._java_opts = tuple(java_opts)
        self._jvm = Jvm(java_opts)
        self._gold_paths = GoldPaths(self._jvm)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ScienceWorldKind:
        """From `envhub serve --env scienceworld --set scienceworld.java_opts=-Xmx2g`."""
        super().from_config({key: value for key, value in config.items() if key not in cls.config_keys})
        opts = str(config.get("java_opts", " ".join(DEFAULT_JAVA_OPTS))).split()
        if not all(opt.startswith("-") for opt in opts):
            raise ValueError(f"scienceworld.java_opts must be JVM options (each starting with '-'), not {opts}")
        return cls(opts)

    def config(self) -> Mapping[str, str]:
        return {"java_opts": " ".join(self._java_opts)}

    @cached_property
    def _specs(self) -> dict[str, list[TaskSpec]]:
        return catalog.task_specs(nondeterministic_tasks())

    @cached_property
    def _by_id(self) -> dict[str, TaskSpec]:
        return {spec.task_id: spec for specs in self._specs.values() for spec in specs}

    def splits(self) -> list[str]:
        return list(catalog.SPLITS)

    def tasks(self, split: str) -> Sequence[TaskSpec]:
        """Tasks of `split`; KeyError for an unknown split."""
        return self._specs[split]

    def task(self, task_id: str) -> TaskSpec:
        return self._by_id[task_id]

    def validate_options(self, options: Mapping[str, str]) -> None:
        super().validate_options(options)
        sw_options.simplifications(options)

    def create(self) -> Environment:
        return ScienceWorldEnvironment(self._jvm, self._gold_paths)

    def close(self) -> None:
        self._gold_paths.close()
        self._jvm.close()
