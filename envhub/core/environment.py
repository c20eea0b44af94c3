"""The environment contract every envhub environment implements.

Two classes, kept as small as gymnasium's:

* `EnvironmentKind`: one per environment name ("scienceworld", "alfworld"). It knows the
  task set, declares capabilities, and makes `Environment` instances. A server builds one
  kind object per worker process, so a kind may hold per-process resources (a JVM).
* `Environment`: one live instance playing one task. It need not be thread-safe: the
  worker process that owns it never calls it from two threads at once (though not always
  from the same thread: its reading thread applies a step itself when its serving thread is idle).

Step limits, action logs, replay verification and snapshots are not the environment's
job: `envhub.core.session.Session` does them once for every environment.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self


@dataclass(frozen=True)
class Capabilities:
    """What an environment supports; declared by its kind and checked by clients."""

    native_snapshot: bool = False
    """`Environment.native_state` returns plain data and `load_native_state` restores it."""
    deterministic_replay: bool = True
    """Replaying an action log reproduces the observations (tasks may opt out one by one)."""
    expert: bool = False
    """`Environment.expert_actions` answers."""
    admissible_actions: bool = True
    """`Environment.admissible_actions` answers."""


@dataclass(frozen=True)
class TaskSpec:
    """One playable task of an environment kind."""

    task_id: str
    """Stable id, unique within the kind (e.g. "boil/3")."""
    split: str
    """Split the task belongs to (e.g. "train")."""
    index: int
    """Position of the task within its split."""
    family: str = ""
    """Task family (e.g. "boil", "pick_and_place_simple")."""
    description: str = ""
    """Goal text when known without starting the task."""
    deterministic: bool = True
    """False when replaying the same actions may give other observations."""


@dataclass(frozen=True)
class Observation:
    """What the agent sees at one point of an episode."""

    text: str
    """Observation text."""
    task_description: str = ""
    """Natural-language goal of the task."""
    score: float = 0.0
    """Cumulative score as the environment defines it."""
    info: Mapping[str, Any] = field(default_factory=dict)
    """JSON-compatible extra information."""


@dataclass(frozen=True)
class StepResult:
    """The outcome of one `Environment.step`."""

    observation: Observation
    reward: float
    """Reward for this step (e.g. the score delta)."""
    terminated: bool
    """The episode ended inside the environment (success or failure)."""
    won: bool = False
    """The task was accomplished."""


class Environment(abc.ABC):
    """One live environment instance. Created by `EnvironmentKind.create`."""

    @abc.abstractmethod
    def reset(self, task: TaskSpec, *, seed: int, options: Mapping[str, str]) -> Observation:
        """Start `task` from its initial state; equal seeds give equal episodes."""

    @abc.abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply one action. Unknown actions are a normal step, never an exception."""

    def admissible_actions(self) -> list[str]:
        """Actions valid in the current state (only called when a client asks)."""
        raise NotImplementedError(f"{type(self).__name__} does not list admissible actions")

    def expert_actions(self) -> list[str]:
        """The expert's next action(s) from the current state, next first."""
        raise NotImplementedError(f"{type(self).__name__} has no expert")

    def replay(self, actions: Sequence[str]) -> list[str]:
        """Apply `actions` after a reset and return each observation text.

        Environments override this with a faster path (no admissible-action or info
        computation); the default steps normally.
        """
        return [self.step(action).observation.text for action in actions]

    def native_state(self) -> str:
        """The current state as JSON text (only with `Capabilities.native_snapshot`)."""
        raise NotImplementedError(f"{type(self).__name__} has no native snapshot")

    def load_native_state(
        self, task: TaskSpec, *, seed: int, options: Mapping[str, str], state: str, observation: Observation
    ) -> None:
        """Put the environment into the state `native_state` returned.

        `observation` is the observation recorded at that state, for environments whose
        engine does not keep it.
        """
        raise NotImplementedError(f"{type(self).__name__} has no native snapshot")

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources held by this instance."""


class EnvironmentKind(abc.ABC):
    """A named environment: its task set, capabilities, options, and a factory.

    Subclasses set the class attributes and implement `tasks` and `create`.
    """

    name: str = ""
    """Name used on the wire (e.g. "scienceworld")."""
    version: str = ""
    """Engine and task-set version: a snapshot of another version restores only by a replay that reproduces
    every observation (`Session.restore`), never from its native state."""
    description: str = ""
    capabilities: Capabilities = Capabilities()
    default_max_steps: int = 50
    options: Mapping[str, str] = {}
    """Option names accepted at session creation, with a one-line description each."""
    config_keys: Mapping[str, str] = {}
    """Server-side configuration keys `from_config` accepts (`envhub serve --set NAME.KEY=VALUE`),
    with a one-line description each."""
    gc_thresholds: tuple[int, int, int] | None = None
    """Garbage-collector thresholds (`gc.set_threshold`) for a worker process holding many of its
    sessions; None keeps Python's (700, 10, 10). Worth setting when each session holds many
    long-lived Python objects: a full collection walks every session's state, so with Python's
    thresholds a step's cost grows with the sessions a process holds (ALFWorld: design note 015)."""
    gc_freeze_starts: bool = False
    """True when a worker may freeze what each session start leaves behind (`gc.collect(1)` then `gc.freeze()`
    after every create, reset, restore and fork): a started session's objects then live outside the collector's
    generations, so no later collection walks them (young collections see only what was made since the last
    start, and no full collection walks every session's state while steps wait; design note 037). Only for kinds
    whose sessions leave no cyclic garbage when stepped or closed: frozen objects are freed by their reference
    counts alone."""
    concurrent_starts: bool = False
    """True when sessions may be started (`Session.start`, `reset`, `restore`, `fork`) on one thread while other
    sessions of the same kind instance step, answer admissible or expert actions and snapshot on another: the
    worker then applies starts on their own thread, off the step path (design note 031). Only for kinds whose
    shared state (caches, native libraries) is safe so; False applies one operation at a time."""

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Self:
        """An instance configured by `config` (keys from `config_keys`); ValueError naming a bad key or value.

        The default accepts no keys and calls `cls()`; kinds with settings override it, starting
        with `check_config_keys`.
        """
        cls.check_config_keys(config)
        return cls()

    @classmethod
    def check_config_keys(cls, config: Mapping[str, Any]) -> None:
        """ValueError naming the keys of `config` that are not in `config_keys`."""
        unknown = sorted(set(config) - set(cls.config_keys))
        if unknown:
            known = ", ".join(sorted(cls.config_keys)) or "none"
            raise ValueError(f"unknown configuration key(s) {unknown} for {cls.name}; known keys: {known}")

    def config(self) -> Mapping[str, str]:
        """The configuration this instance runs with, as text (shown in ListEnvironments); empty by default."""
        return {}

    @abc.abstractmethod
    def splits(self) -> list[str]:
        """Split names in canonical order."""

    @abc.abstractmethod
    def tasks(self, split: str) -> Sequence[TaskSpec]:
        """Tasks of one split, indexable by `TaskSpec.index`."""

    @abc.abstractmethod
    def create(self) -> Environment:
        """A new environment instance (reset before use)."""

    def task(self, task_id: str) -> TaskSpec:
        """The task with this id; raises KeyError if unknown.

        The default scans every split; kinds with large task sets override it.
        """
        for split in self.splits():
            for spec in self.tasks(split):
                if spec.task_id == task_id:
                    return spec
        raise KeyError(task_id)

    def validate_options(self, options: Mapping[str, str]) -> None:
        """Raise ValueError naming the bad option when `options` is not acceptable."""
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            known = ", ".join(sorted(self.options)) or "none"
            raise ValueError(f"unknown option(s) {unknown} for {self.name}; known options: {known}")

    def prepared(self, task: TaskSpec) -> bool:
        """Whether sessions on `task` can start without slow one-off work (`prepare`); cheap and thread-safe.

        The default: every task is ready.
        """
        return True

    def prepare(self, task: TaskSpec) -> None:  # noqa: B027 - optional hook
        """Do the slow one-off work a task needs before a session starts on it (e.g. generate its game).

        A server calls it in a helper process of the worker (a fresh instance of this kind, built
        from the same configuration), so that a session created on an unprepared task does not
        hold up the steps of other sessions; the result must be left where any process finds it
        (a cache on disk). Must be idempotent. The default does nothing.
        """

    def tasks_to_prepare(self) -> Sequence[TaskSpec]:
        """Tasks a server should prepare in the background from its start (the default: none)."""
        return ()

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release per-process resources (called when a worker stops)."""
