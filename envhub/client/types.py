"""Typed results of the envhub client: frozen dataclasses made from the wire messages.

Why dataclasses and not the proto messages: they are plain Python values (tuples, dicts,
floats) that compare by value, pickle cheaply across Ray process boundaries, and keep
callers independent of the protobuf API; `info` is a dict rather than a `Struct`. What a
session shows after any call (a start, a step, a reset, a restore) is one `EnvView`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from envhub.core.environment import Capabilities, TaskSpec

__all__ = ["Capabilities", "EnvView", "EnvironmentInfo", "SessionStart", "Snapshot", "TaskInfo", "TaskRef"]


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
class EnvView:
    """What a session shows after a start, a step, a reset or a restore: the client's step result.

    Two views are equal when they show the same (their session ids are not compared): a restored or
    forked session, or the same seed played twice, shows equal views.
    """

    session_id: str = field(compare=False)
    """The session, as the caller knows it."""
    text: str
    """Observation text."""
    task_description: str = ""
    admissible: tuple[str, ...] | None = None
    """The admissible actions of this state; None unless they were asked for (`admissible=True`)."""
    reward: float = 0.0
    """Reward of the step that led here (0 after a start, reset or restore)."""
    score: float = 0.0
    """Cumulative score as the environment defines it."""
    step_index: int = 0
    """Steps taken in the episode so far."""
    terminated: bool = False
    """The episode ended inside the environment (success or failure)."""
    truncated: bool = False
    """The episode hit its step limit."""
    won: bool = False
    info: Mapping[str, Any] = field(default_factory=dict)
    """JSON-compatible extra information from the environment."""

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


@dataclass(frozen=True)
class SessionStart:
    """A session just started (CreateSession, ResetSession, RestoreSnapshot): its task and first view."""

    task: TaskInfo
    view: EnvView

    @property
    def session_id(self) -> str:
        return self.view.session_id


@dataclass(frozen=True)
class Snapshot:
    """A signed snapshot: opaque bytes for RestoreSnapshot, the step it was taken at, and its environment."""

    data: bytes
    step_index: int
    environment: str = ""
    environment_version: str = ""
