"""Typed results of the envhub client: frozen dataclasses mirroring the wire messages.

Why dataclasses and not the proto messages: they are plain Python values (tuples, dicts,
floats) that compare by value, pickle cheaply across Ray process boundaries, and keep
callers independent of the protobuf API; `info` is a dict rather than a `Struct`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from envhub.core.environment import TaskSpec


@dataclass(frozen=True)
class Capabilities:
    """What an environment declares it supports (see `EnvironmentInfo`)."""

    native_snapshot: bool
    deterministic_replay: bool
    expert: bool
    admissible_actions: bool


@dataclass(frozen=True)
class EnvironmentInfo:
    """An environment kind hosted by a server."""

    name: str
    version: str
    description: str
    splits: Mapping[str, int]
    """Split name -> number of tasks, in canonical order."""
    capabilities: Capabilities
    default_max_steps: int
    options: Mapping[str, str]
    config: Mapping[str, str] = field(default_factory=dict)
    """The server-side settings the environment runs with (`envhub serve --set NAME.KEY=VALUE`), as text."""


TaskInfo = TaskSpec
"""One playable task: the same frozen dataclass the environments declare (`envhub.core.environment`)."""


@dataclass(frozen=True)
class TaskRef:
    """Which task to play: `TaskRef("boil/3")` by id, or `TaskRef(split="train", index=3)` by position.

    Every client method taking a task accepts a `TaskRef` or a plain task id string.
    """

    task_id: str = ""
    split: str = ""
    index: int | None = None

    def __post_init__(self) -> None:
        by_position = bool(self.split) or self.index is not None
        if bool(self.task_id) == by_position or (by_position and (not self.split or self.index is None)):
            raise ValueError("a TaskRef names a task_id, or a split and an index, not both")

    @classmethod
    def of(cls, task: TaskRef | TaskSpec | str) -> TaskRef:
        """A reference to `task`: a TaskRef, a TaskInfo (by its id) or a task id."""
        if isinstance(task, TaskRef):
            return task
        return cls(task.task_id if isinstance(task, TaskSpec) else task)


@dataclass(frozen=True)
class Observation:
    """What the agent sees; `admissible_actions` is None unless it was requested."""

    text: str
    task_description: str = ""
    score: float = 0.0
    step_index: int = 0
    admissible_actions: tuple[str, ...] | None = None
    info: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StepResult:
    """The outcome of one step."""

    observation: Observation
    reward: float
    terminated: bool
    truncated: bool
    won: bool

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


@dataclass(frozen=True)
class SessionStart:
    """A new session (from CreateSession or RestoreSnapshot) and its first observation."""

    session_id: str
    task: TaskInfo
    observation: Observation


@dataclass(frozen=True)
class Snapshot:
    """A signed snapshot: opaque bytes for RestoreSnapshot, the step it was taken at, and its environment."""

    data: bytes
    step_index: int
    environment: str = ""
    environment_version: str = ""
