"""`ScienceWorldKind`: the ScienceWorld task set, options and environment factory.

One kind object per worker process owns one JVM (started on the first `create`) in
which every environment of that process is a separate simulator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

from scienceworld.version import __version__ as SCIENCEWORLD_VERSION

from envhub.core import errors
from envhub.core.environment import Capabilities, Environment, EnvironmentKind, TaskSpec
from envhub.core.settings import whole_number
from envhub.envs.scienceworld import catalog
from envhub.envs.scienceworld import options as sw_options
from envhub.envs.scienceworld.environment import ScienceWorldEnvironment
from envhub.envs.scienceworld.expert import GoldPaths
from envhub.envs.scienceworld.jvm import (
    DEFAULT_JAVA_OPTS,
    DEFAULT_SIMULATORS,
    HEAP_STEP,
    LIVE_PER_SIMULATOR_MB,
    Jvm,
    heap_mb,
    heap_options,
    planned_simulators,
)

NONDETERMINISTIC_TASKS: frozenset[str] = frozenset()
"""Task names whose replay the determinism study saw diverge: `summary.nondeterministic` of its committed
result, docs/results/scienceworld-determinism.json (`python -m envhub.bench.scienceworld_determinism`)."""


class ScienceWorldKind(EnvironmentKind):
    """ScienceWorld (Wang et al., 2022): 30 science tasks, train/dev/test variations, and DivOPD's task-type split
    (`type-train` / `type-heldout`)."""

    name = "scienceworld"
    version = f"{SCIENCEWORLD_VERSION}+envhub.1"
    description = "ScienceWorld text simulator: 30 elementary-science tasks with train/dev/test variations"
    capabilities = Capabilities(native_snapshot=False, deterministic_replay=True, expert=True, admissible_actions=True)
    default_max_steps = 100
    concurrent_starts = True
    """Starts may run beside steps (design note 034): the JVM-global random and object-id counter that every
    simulator call sets and uses are taken in turns (`Jvm.turns`), a start's one call at a time (its load, each
    replayed action) and a waiting step's first, so a step waits for at most one of a start's calls."""
    options: Mapping[str, str] = {
        sw_options.SIMPLIFICATIONS_OPTION: "comma-separated ScienceWorld simplifications (e.g. 'easy' or "
        "'teleportAction,openDoors'); default none"
    }

    config_keys: Mapping[str, str] = {
        "java_opts": f"JVM options of each worker's ScienceWorld engine, space-separated (default: "
        f"{' '.join(DEFAULT_JAVA_OPTS)}, plus -Xmx sized from sessions_per_worker unless given)",
        "sessions_per_worker": f"live sessions one worker's JVM may hold; more are refused with "
        f"RESOURCE_EXHAUSTED (default {DEFAULT_SIMULATORS}; the heap may grow to fit them)",
        "heap_step": f"sessions the JVM's heap is planned for at first; the plan doubles when outgrown and halves "
        f"when a quarter of it is in use (default {HEAP_STEP}; ignored when java_opts set -Xmx or another collector)",
    }

    def __init__(
        self,
        java_opts: Sequence[str] = DEFAULT_JAVA_OPTS,
        sessions_per_worker: int = DEFAULT_SIMULATORS,
        heap_step: int = HEAP_STEP,
    ) -> None:
        if sessions_per_worker < 1:
            raise ValueError(f"scienceworld.sessions_per_worker must be at least 1, not {sessions_per_worker}")
        self._java_opts = heap_options(java_opts, sessions_per_worker, heap_step)
        self._sessions_per_worker = sessions_per_worker
        self._heap_step = heap_step
        self._resizes = "-XX:+UseSerialGC" in java_opts and not any(opt.startswith("-Xmx") for opt in java_opts)
        """Whether this kind sizes the heap (with Serial, unless the options fix the heap)."""
        self.planned = min(heap_step, sessions_per_worker)
        """Sessions the JVM's heap is planned for now (`jvm.planned_simulators`)."""
        self._live = 0
        self._jvm = Jvm(self._java_opts)
        self._gold_paths = GoldPaths(self._jvm)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ScienceWorldKind:
        """From `envhub serve --env scienceworld --set scienceworld.sessions_per_worker=64`."""
        cls.check_config_keys(config)
        opts = str(config.get("java_opts", " ".join(DEFAULT_JAVA_OPTS))).split()
        if not all(opt.startswith("-") for opt in opts):
            raise ValueError(f"scienceworld.java_opts must be JVM options (each starting with '-'), not {opts}")
        cap = whole_number("scienceworld.sessions_per_worker", config.get("sessions_per_worker", DEFAULT_SIMULATORS), 1)
        step = whole_number("scienceworld.heap_step", config.get("heap_step", HEAP_STEP), 1)
        return cls(opts, cap, step)

    def config(self) -> Mapping[str, str]:
        return {
            "java_opts": " ".join(self._java_opts),
            "sessions_per_worker": str(self._sessions_per_worker),
            "heap_step": str(self._heap_step),
        }

    @cached_property
    def _specs(self) -> dict[str, list[TaskSpec]]:
        return catalog.task_specs(NONDETERMINISTIC_TASKS)

    @cached_property
    def _by_id(self) -> dict[str, TaskSpec]:
        """Each task id's spec under the jar's own split (a type split lists the same games again)."""
        return {spec.task_id: spec for split in catalog.SPLITS for spec in self._specs[split]}

    def splits(self) -> list[str]:
        """The jar's train/dev/test, then the DivOPD task-type split set (type-train, type-heldout)."""
        return [*catalog.SPLITS, *catalog.TYPE_SPLITS]

    def tasks(self, split: str) -> Sequence[TaskSpec]:
        """Tasks of `split`; KeyError for an unknown split."""
        return self._specs[split]

    def task(self, task_id: str) -> TaskSpec:
        return self._by_id[task_id]

    def validate_options(self, options: Mapping[str, str]) -> None:
        super().validate_options(options)
        sw_options.simplifications(options)

    def create(self) -> Environment:
        """A new simulator; RESOURCE_EXHAUSTED (SESSIONS_PER_WORKER) when the JVM holds its cap already."""
        with self._jvm.turns.start():
            if self._live >= self._sessions_per_worker:
                raise errors.resource_exhausted(
                    f"this ScienceWorld worker holds {self._live} of at most {self._sessions_per_worker} sessions "
                    "(setting scienceworld.sessions_per_worker; its JVM heap is sized from it); close sessions, "
                    "run more workers, or raise the setting",
                    "SESSIONS_PER_WORKER",
                    sessions_per_worker=str(self._sessions_per_worker),
                )
            self._plan_heap(self._live + 1)
            env = ScienceWorldEnvironment(self._jvm, self._gold_paths, on_close=self._released)
            self._live += 1
        return env

    def _released(self) -> None:
        with self._jvm.turns.step():
            self._live -= 1
            self._plan_heap(self._live)

    def _plan_heap(self, live: int) -> None:
        """Resize the JVM's heap when `live` simulators call for another plan (`jvm.planned_simulators`)."""
        planned = planned_simulators(live, self.planned, self._sessions_per_worker, self._heap_step)
        if planned == self.planned or not self._resizes:
            return
        growing = planned > self.planned
        self.planned = planned
        if self._jvm.started:  # else it starts with the first plan's heap
            self._jvm.resize_heap(heap_mb(planned), 4 + live * LIVE_PER_SIMULATOR_MB if growing else None)

    def close(self) -> None:
        self._gold_paths.close()
        self._jvm.close()
