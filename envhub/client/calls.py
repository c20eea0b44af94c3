"""The typed client API, written once: each operation builds a `Call` that any transport can run.

A `Call[R]` is everything a transport needs to run one operation: the RPC, the request, how
to turn the response into the typed result `R`, whether a retry is safe, and what a pool
routes by (the session id, or the environment of a new session). The clients
(`EnvhubClient`, `AsyncEnvhubClient`) expose these builders as methods with `blocking` and
`awaiting`, so every signature below exists once (the model is dm_env_rpc's connection +
adaptor: transports move messages, this module knows what they mean).

State-changing calls that may be retried carry a fresh `request_id` (see docs/protocol.md,
"Exactly-once steps"): every retry of one `step` call resends the same request, so the
server applies it once however many replies are lost.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar

from google.protobuf.message import Message

from envhub.client import convert, types
from envhub.core.errors import EnvhubError
from envhub.v1 import envhub_pb2 as pb

if TYPE_CHECKING:
    from envhub.client.aio import AsyncEnvhubClient
    from envhub.client.sync import EnvhubClient

P = ParamSpec("P")
R = TypeVar("R")


class Retry(enum.Enum):
    """When a transport may send a call again."""

    NEVER = "never"
    """It creates or destroys something: a retry after a lost reply would leak or double it."""
    IDEMPOTENT = "idempotent"
    """Read-only: retried on UNAVAILABLE."""
    KEYED = "keyed"
    """Carries a request_id the session remembers: retried on UNAVAILABLE and DEADLINE_EXCEEDED."""


@dataclass(frozen=True)
class Call(Generic[R]):
    """One operation, ready for a transport."""

    method: str
    """RPC name in envhub.v1.EnvHub, e.g. "Step"."""
    request: Message
    decode: Callable[[Any], R]
    """Response message -> typed result."""
    retry: Retry = Retry.NEVER
    timeout: float | None = None
    """Per attempt; None: the client's default."""
    session_id: str = ""
    """The session the call is about (a pool routes by its replica prefix)."""
    environment: str = ""
    """For calls creating a session: the environment (a pool places by it)."""
    new_sessions: Callable[[Any], int] = field(default=lambda _: 0)
    """How many sessions the response created (a pool keeps its placement counts with it)."""
    next_page: Callable[[Any, Any], Message | None] | None = None
    """For paged listings: (request, response) -> the request of the next page, or None."""


def _request_id() -> str:
    return uuid.uuid4().hex


def _task(task: types.TaskRef | types.TaskInfo | str) -> pb.TaskSelector:
    ref = types.TaskRef.of(task)
    if ref.task_id:
        return pb.TaskSelector(task_id=ref.task_id)
    return pb.TaskSelector(split_index=pb.SplitIndex(split=ref.split, index=ref.index))


# ---------------------------------------------------------------- discovery


def list_environments(*, timeout: float | None = None) -> Call[list[types.EnvironmentInfo]]:
    """The environments the server (every replica, for a pool) hosts."""
    return Call(
        "ListEnvironments",
        pb.ListEnvironmentsRequest(),
        lambda response: [convert.environment(info) for info in response.environments],
        Retry.IDEMPOTENT,
        timeout,
    )


def replica_id(*, timeout: float | None = None) -> Call[str]:
    """Id of the replica answering (the prefix of its session ids)."""
    return Call(
        "ListEnvironments",
        pb.ListEnvironmentsRequest(),
        lambda response: str(response.replica_id),
        Retry.IDEMPOTENT,
        timeout,
    )


def _next_task_page(request: pb.ListTasksRequest, response: pb.ListTasksResponse) -> Message | None:
    token = response.next_page_token
    if not token:
        return None
    following = pb.ListTasksRequest()
    following.CopyFrom(request)
    following.page_token = token
    return following


def list_tasks(environment: str, split: str = "", *, timeout: float | None = None) -> Call[list[types.TaskInfo]]:
    """Every task of `environment` (of one split when given), following pages."""
    return Call(
        "ListTasks",
        pb.ListTasksRequest(environment=environment, split=split),
        lambda response: [convert.task(info) for info in response.tasks],
        Retry.IDEMPOTENT,
        timeout,
        environment=environment,
        next_page=_next_task_page,
    )


# ---------------------------------------------------------------- sessions


def create_session(
    environment: str,
    task: types.TaskRef | types.TaskInfo | str,
    *,
    seed: int = 0,
    options: Mapping[str, str] | None = None,
    max_steps: int = 0,
    admissible: bool = False,
    timeout: float | None = None,
) -> Call[types.SessionStart]:
    """Start a session on `task` (a task id, a `TaskInfo`, or `TaskRef(split=..., index=...)`) with `seed`."""
    request = pb.CreateSessionRequest(
        environment=environment,
        task=_task(task),
        seed=seed,
        options=dict(options or {}),
        max_steps=max_steps,
        include_admissible_actions=admissible,
    )
    return Call(
        "CreateSession", request, convert.session_start, timeout=timeout, environment=environment, new_sessions=_one
    )


def reset_session(
    session_id: str,
    *,
    task: types.TaskRef | types.TaskInfo | str | None = None,
    seed: int | None = None,
    admissible: bool = False,
    timeout: float | None = None,
) -> Call[types.SessionStart]:
    """Restart the episode, on the same task and seed unless given. Retried safely (request_id)."""
    request = pb.ResetSessionRequest(
        session_id=session_id, include_admissible_actions=admissible, request_id=_request_id()
    )
    if task is not None:
        request.task.CopyFrom(_task(task))
    if seed is not None:
        request.seed = seed
    return Call(
        "ResetSession",
        request,
        lambda response: convert.reset_start(session_id, response),
        Retry.KEYED,
        timeout,
        session_id=session_id,
    )


def step(
    session_id: str,
    action: str,
    *,
    admissible: bool = False,
    expected_step_index: int | None = None,
    timeout: float | None = None,
) -> Call[types.StepResult]:
    """Send one action. Retried safely on UNAVAILABLE and DEADLINE_EXCEEDED: it is applied once.

    `expected_step_index`: apply only if the session has taken exactly this many steps
    (else FAILED_PRECONDITION, STEP_INDEX_MISMATCH).
    """
    request = pb.StepRequest(
        session_id=session_id, action=action, include_admissible_actions=admissible, request_id=_request_id()
    )
    if expected_step_index is not None:
        request.expected_step_index = expected_step_index
    return step_request(request, timeout)


def step_request(request: pb.StepRequest, timeout: float | None = None) -> Call[types.StepResult]:
    """The Step call sending `request` as it is (e.g. one step of a StepBatch, sent on its own)."""
    return Call("Step", request, convert.step, Retry.KEYED, timeout, session_id=request.session_id)


def step_many(
    steps: Sequence[tuple[str, str]],
    *,
    admissible: bool = False,
    return_errors: bool = False,
    timeout: float | None = None,
) -> Call[list[Any]]:
    """Step many sessions at once, `[(session_id, action), ...]` -> their `StepResult`s in order.

    One StepBatch call per replica (a pool splits it by session id); on the server one message
    per worker. Each step carries its own request_id, so a batch whose reply was lost is resent
    whole and every step is still applied once. Then the first failed step's `EnvhubError` is
    raised, or with `return_errors` each failure takes its result's place.
    """
    request = pb.StepBatchRequest(
        steps=[
            pb.StepRequest(
                session_id=session_id, action=action, include_admissible_actions=admissible, request_id=_request_id()
            )
            for session_id, action in steps
        ]
    )

    def decode(answer: pb.StepBatchResponse) -> list[Any]:
        return step_results(convert.step_batch(answer), return_errors)

    return Call("StepBatch", request, decode, Retry.KEYED, timeout)


def close_session(session_id: str, *, timeout: float | None = None) -> Call[None]:
    """Close a session (a second close answers NOT_FOUND)."""
    return Call(
        "CloseSession",
        pb.CloseSessionRequest(session_id=session_id),
        lambda _: None,
        timeout=timeout,
        session_id=session_id,
        new_sessions=lambda _: -1,
    )


def expert_actions(session_id: str, *, timeout: float | None = None) -> Call[list[str]]:
    """The expert's next action(s) from the session's state, next first."""
    return Call(
        "GetExpertActions",
        pb.GetExpertActionsRequest(session_id=session_id),
        lambda response: list(response.actions),
        Retry.IDEMPOTENT,
        timeout,
        session_id=session_id,
    )


# ---------------------------------------------------------------- snapshots


def snapshot(session_id: str, *, timeout: float | None = None) -> Call[types.Snapshot]:
    """A signed snapshot of the session (opaque bytes, its environment and step index)."""
    return Call(
        "CreateSnapshot",
        pb.CreateSnapshotRequest(session_id=session_id),
        convert.snapshot,
        Retry.IDEMPOTENT,
        timeout,
        session_id=session_id,
    )


def restore(
    snapshot: types.Snapshot | bytes, *, admissible: bool = False, timeout: float | None = None
) -> Call[types.SessionStart]:
    """A new session at the snapshot's state (on any replica with the same key and version).

    Pass the `Snapshot` (not its bare bytes) to a pool, so it places the session by environment.
    """
    data, environment = (
        (snapshot.data, snapshot.environment) if isinstance(snapshot, types.Snapshot) else (snapshot, "")
    )
    request = pb.RestoreSnapshotRequest(snapshot=data, include_admissible_actions=admissible)
    return Call(
        "RestoreSnapshot",
        request,
        convert.session_start,
        timeout=timeout,
        environment=environment,
        new_sessions=_one,
    )


def fork(session_id: str, count: int = 1, *, timeout: float | None = None) -> Call[list[str]]:
    """`count` new sessions continuing independently from this one's state."""
    return Call(
        "ForkSession",
        pb.ForkSessionRequest(session_id=session_id, count=count),
        lambda response: list(response.session_ids),
        timeout=timeout,
        session_id=session_id,
        new_sessions=lambda response: len(response.session_ids),
    )


def _one(_: Any) -> int:
    return 1


# ---------------------------------------------------------------- binding to clients


def blocking(build: Callable[P, Call[R]]) -> Callable[Concatenate[EnvhubClient, P], R]:
    """A blocking client method running the `Call` that `build` makes."""

    def method(self: EnvhubClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.run(build(*args, **kwargs))

    method.__name__, method.__doc__ = build.__name__, build.__doc__
    return method


def awaiting(build: Callable[P, Call[R]]) -> Callable[Concatenate[AsyncEnvhubClient, P], Awaitable[R]]:
    """An asyncio client method running the `Call` that `build` makes."""

    async def method(self: AsyncEnvhubClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self.run(build(*args, **kwargs))

    method.__name__, method.__doc__ = build.__name__, build.__doc__
    return method


def step_results(answers: list[types.StepResult | EnvhubError], return_errors: bool) -> list[Any]:
    """`step_many`'s answer: the first error raised, or (with `return_errors`) each error in its place."""
    if not return_errors:
        for answer in answers:
            if isinstance(answer, EnvhubError):
                raise answer
    return answers
