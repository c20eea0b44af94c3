"""The messages between the server process and its worker processes: one frozen dataclass per operation.

The server (`envhub.server.worker_handle`) sends an `Op`; the worker (`envhub.server.worker_process`)
answers with a `Reply` holding the operation's typed result or the `EnvhubError` it raised. Both
ends are our own processes, so the pipe pickles these; bytes from the wire never get here unparsed.
`Op[R]` says which result type `R` the operation answers with, so `Worker.call(op)` is typed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from envhub.core.environment import Observation
from envhub.core.errors import EnvhubError
from envhub.core.session import SessionState, SessionStep

R = TypeVar("R")


@dataclass(frozen=True)
class View:
    """A session's current observation as the server returns it."""

    task_id: str
    observation: Observation
    step_index: int
    admissible: tuple[str, ...] | None


@dataclass(frozen=True)
class StepOutcome:
    """The result of one step and, when asked for, the admissible actions of the new state."""

    step: SessionStep
    admissible: tuple[str, ...] | None


@dataclass(frozen=True)
class Op(Generic[R]):
    """Base of every operation; `R` is the type of its result."""


@dataclass(frozen=True)
class Create(Op[View]):
    """Start session `session_id` on a task and reset it."""

    session_id: str
    task_id: str
    seed: int
    options: Mapping[str, str]
    max_steps: int
    admissible: bool


@dataclass(frozen=True)
class Reset(Op[View]):
    """Reset a session, on another task or seed when given; `request_id` makes a retry safe."""

    session_id: str
    task_id: str | None
    seed: int | None
    admissible: bool
    request_id: str = ""


@dataclass(frozen=True)
class Step(Op[StepOutcome]):
    """Apply one action; refused unless the session is at `expected_step_index` (when set)."""

    session_id: str
    action: str
    admissible: bool
    expected_step_index: int | None = None
    request_id: str = ""


@dataclass(frozen=True)
class StepMany(Op["tuple[Reply, ...]"]):
    """Apply each `Step` in order; each answers with its own `Reply` (a failed step fails only itself)."""

    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Close(Op[None]):
    """Close a session."""

    session_id: str


@dataclass(frozen=True)
class ExpertActions(Op[tuple[str, ...]]):
    """The expert's next action(s) for a session."""

    session_id: str


@dataclass(frozen=True)
class TakeSnapshot(Op[SessionState]):
    """A session's state, to be signed by the server."""

    session_id: str


@dataclass(frozen=True)
class Restore(Op[View]):
    """Start session `session_id` from a verified snapshot state."""

    session_id: str
    state: SessionState
    admissible: bool
    other_versions: bool = False
    """Restore a snapshot of another version of the kind by verified replay (`ServerConfig.cross_version_restore`)."""


@dataclass(frozen=True)
class Fork(Op[None]):
    """Copy a session into the new sessions `new_ids`."""

    session_id: str
    new_ids: tuple[str, ...]


@dataclass(frozen=True)
class Stop(Op[None]):
    """Close every session and exit (no reply)."""


@dataclass(frozen=True)
class Reply:
    """A worker's answer to one `Op`, in request order: its result, or the error it raised."""

    value: Any = None
    error: EnvhubError | None = None
