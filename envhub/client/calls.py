"""The typed client API, written once: each operation builds a `Call` that any transport can run.

A `Call[R]` is everything a transport needs to run one operation: the RPC and its request, how
to turn the response into the typed result `R`, and what the call does (`Effect`: reads,
creates, steps, resets, closes, forks, batches), from which follow whether a retry is safe
(`Retry`), what a pool routes it by (its session, or the environment of a new session), what a
failover transport tracks, and whether it travels on a SessionStream. Transports decide by these
fields, never by the RPC's name. The clients (`EnvhubClient`, `AsyncEnvhubClient`) expose these
builders as methods, so every signature below exists once (the model is dm_env_rpc's connection
+ adaptor: transports move messages, this module knows what they mean).

State-changing calls that may be retried carry a fresh `request_id` (see docs/protocol.md,
"Exactly-once steps"): every retry of one `step` call resends the same request, so the
server applies it once however many replies are lost; a call sent to another session
(`Call.addressed_to`, failover) keeps it too.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from google.protobuf.message import Message

from envhub.client import convert, types
from envhub.core.errors import EnvhubError
from envhub.v1 import envhub_pb2 as pb

R = TypeVar("R")
M = TypeVar("M", bound=Message)


class Retry(enum.Enum):
    """When a transport may send a call again."""

    NEVER = "never"
    """It creates or destroys something: a retry after a lost reply would leak or double it."""
    IDEMPOTENT = "idempotent"
    """Read-only: retried on UNAVAILABLE."""
    KEYED = "keyed"
    """Carries a request_id the session remembers: retried on UNAVAILABLE and DEADLINE_EXCEEDED."""


class Effect(enum.Enum):
    """What a call does to sessions."""

    READS = "reads"
    """Changes nothing: listings, expert actions, snapshots."""
    CREATES = "creates"
    """Places one new session on a replica of its `environment` (CreateSession, RestoreSnapshot)."""
    STEPS = "steps"
    """Steps its session once."""
    RESETS = "resets"
    """Restarts its session's episode."""
    CLOSES = "closes"
    """Ends its session."""
    FORKS = "forks"
    """New sessions from its session's state, on the same replica."""
    BATCHES = "batches"
    """Steps several sessions at once: its `parts`, one STEPS call each."""
    RESTORES = "restores"
    """Places several new sessions at once: its `parts`, one CREATES call (a RestoreSnapshot) each."""

    @property
    def retry(self) -> Retry:
        """When a call with this effect may be sent again."""
        return _RETRY[self]


_RETRY = {
    Effect.READS: Retry.IDEMPOTENT,
    Effect.CREATES: Retry.NEVER,
    Effect.STEPS: Retry.KEYED,
    Effect.RESETS: Retry.KEYED,
    Effect.CLOSES: Retry.NEVER,
    Effect.FORKS: Retry.NEVER,
    Effect.BATCHES: Retry.KEYED,
    Effect.RESTORES: Retry.NEVER,
}


@dataclass(frozen=True)
class Call(Generic[R]):
    """One operation, ready for a transport."""

    method: str
    """RPC name in envhub.v1.EnvHub, e.g. "Step": where a transport sends the request (what the call
    does is `effect`)."""
    request: Message
    decode: Callable[[Any], R]
    """Response message -> typed result."""
    effect: Effect
    timeout: float | None = None
    """Per attempt; None: the client's default."""
    session_id: str = ""
    """The session the call is about (a pool routes by its replica prefix)."""
    environment: str = ""
    """For calls creating a session: the environment (a pool places by it)."""
    readdress: Callable[[str], Message] | None = None
    """For a call about one session: its request sent to another session id (same request_id)."""
    created: Callable[[Any], list[str]] = field(default=lambda _: [])
    """Response message -> the ids of the sessions it created (creates and forks)."""
    parts: tuple[Call[Any], ...] = ()
    """For a batch: one call per entry, in order (a pool splits a step batch by the steps' sessions, a
    restore batch by where it places each new session)."""
    merge: Callable[[Sequence[Any]], Message] | None = None
    """For a read about the whole fleet: every replica's response -> the answer (a pool asks each)."""
    next_page: Callable[[Any, Any], Message | None] | None = None
    """For paged listings: (request, response) -> the request of the next page, or None."""

    @property
    def retry(self) -> Retry:
        """When a transport may send this call again (from its effect)."""
        return self.effect.retry

    def addressed_to(self, session_id: str) -> Call[R]:
        """This call about `session_id` instead (a failover transport's live copy of a session);
        the result decodes as before, for the session the caller knows."""
        if session_id == self.session_id:
            return self
        if self.readdress is None:
            raise ValueError(f"a {self.method} call is not about one session")
        return dataclasses.replace(self, request=self.readdress(session_id), session_id=session_id)

    def sessions_made(self, response: Message) -> int:
        """How many sessions the response created (negative: closed), for a pool's placement counts."""
        return len(self.created(response)) - (self.effect is Effect.CLOSES)


def expect(message: Message, kind: type[M]) -> M:
    """`message` as the `kind` it must be (a transport's answer to a call of known RPC)."""
    if not isinstance(message, kind):
        raise TypeError(f"expected a {kind.__name__}, got a {type(message).__name__}")
    return message


def _request_id() -> str:
    return uuid.uuid4().hex


def _task(task: types.TaskRef | types.TaskInfo | str) -> pb.TaskSelector:
    ref = types.TaskRef.of(task)
    if ref.task_id:
        return pb.TaskSelector(task_id=ref.task_id)
    return pb.TaskSelector(split_index=pb.SplitIndex(split=ref.split, index=ref.index))


def _of_session(
    method: str,
    effect: Effect,
    session_id: str,
    request: Callable[[str], Message],
    decode: Callable[[Any], R],
    timeout: float | None,
    **more: Any,
) -> Call[R]:
    """A call about `session_id`, whose request `request(session_id)` makes (for any session)."""
    return Call(method, request(session_id), decode, effect, timeout, session_id, readdress=request, **more)


def _merge_environments(responses: Sequence[pb.ListEnvironmentsResponse]) -> pb.ListEnvironmentsResponse:
    """Every environment of `responses`, each once (the first replica's entry)."""
    merged = pb.ListEnvironmentsResponse()
    seen: set[str] = set()
    for response in responses:
        for info in response.environments:
            if info.name not in seen:
                seen.add(info.name)
                merged.environments.append(info)
    return merged


# ---------------------------------------------------------------- discovery


def list_environments(*, timeout: float | None = None) -> Call[list[types.EnvironmentInfo]]:
    """The environments the server (every replica, for a pool) hosts."""
    return Call(
        "ListEnvironments",
        pb.ListEnvironmentsRequest(),
        lambda response: [convert.environment(info) for info in response.environments],
        Effect.READS,
        timeout,
        merge=_merge_environments,
    )


def replica_id(*, timeout: float | None = None) -> Call[str]:
    """Id of the replica answering (the prefix of its session ids; for a pool, the replica it asks)."""
    return Call("ListEnvironments", pb.ListEnvironmentsRequest(), lambda r: str(r.replica_id), Effect.READS, timeout)


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
        Effect.READS,
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
    return _placing("CreateSession", request, environment, timeout)


def reset_session(
    session_id: str,
    *,
    task: types.TaskRef | types.TaskInfo | str | None = None,
    seed: int | None = None,
    admissible: bool = False,
    timeout: float | None = None,
) -> Call[types.SessionStart]:
    """Restart the episode, on the same task and seed unless given. Retried safely (request_id)."""
    selector = None if task is None else _task(task)
    request_id = _request_id()

    def request(to: str) -> pb.ResetSessionRequest:
        return pb.ResetSessionRequest(
            session_id=to, task=selector, seed=seed, include_admissible_actions=admissible, request_id=request_id
        )

    return _of_session(
        "ResetSession",
        Effect.RESETS,
        session_id,
        request,
        lambda response: convert.reset_start(session_id, response),
        timeout,
    )


def step(
    session_id: str,
    action: str,
    *,
    admissible: bool = False,
    expected_step_index: int | None = None,
    timeout: float | None = None,
) -> Call[types.EnvView]:
    """Send one action; the session's new view. Retried safely on UNAVAILABLE and DEADLINE_EXCEEDED: it is applied once.

    `expected_step_index`: apply only if the session has taken exactly this many steps
    (else FAILED_PRECONDITION, STEP_INDEX_MISMATCH).
    """
    request_id = _request_id()

    def request(to: str) -> pb.StepRequest:
        return pb.StepRequest(
            session_id=to,
            action=action,
            include_admissible_actions=admissible,
            expected_step_index=expected_step_index,
            request_id=request_id,
        )

    return _of_session(
        "Step",
        Effect.STEPS,
        session_id,
        request,
        lambda response: convert.step_view(session_id, response.result),
        timeout,
    )


def step_many(
    steps: Sequence[tuple[str, str]],
    *,
    admissible: bool = False,
    return_errors: bool = False,
    timeout: float | None = None,
) -> Call[list[Any]]:
    """Step many sessions at once, `[(session_id, action), ...]` -> their `EnvView`s in order.

    One StepBatch call per replica (a pool splits it by session id); on the server one message
    per worker. Each step carries its own request_id, so a batch whose reply was lost is resent
    whole and every step is still applied once. Then the first failed step's `EnvhubError` is
    raised, or with `return_errors` each failure takes its result's place.
    """
    parts = [step(session_id, action, admissible=admissible, timeout=timeout) for session_id, action in steps]
    return batch(parts, return_errors=return_errors, timeout=timeout)


def batch(
    parts: Sequence[Call[types.EnvView]], *, return_errors: bool = False, timeout: float | None = None
) -> Call[list[Any]]:
    """The steps `parts` (each a `step` call) as one StepBatch call; see `step_many`."""

    def decode(answer: pb.StepBatchResponse) -> list[Any]:
        return results(convert.step_batch(answer, session_ids), return_errors)

    session_ids = [part.session_id for part in parts]
    request = pb.StepBatchRequest(steps=[expect(part.request, pb.StepRequest) for part in parts])
    return Call("StepBatch", request, decode, Effect.BATCHES, timeout, parts=tuple(parts))


def close_session(session_id: str, *, timeout: float | None = None) -> Call[None]:
    """Close a session (a second close answers NOT_FOUND)."""
    return _of_session(
        "CloseSession", Effect.CLOSES, session_id, lambda to: pb.CloseSessionRequest(session_id=to), _none, timeout
    )


def expert_actions(session_id: str, *, timeout: float | None = None) -> Call[list[str]]:
    """The expert's next action(s) from the session's state, next first."""
    return _of_session(
        "GetExpertActions",
        Effect.READS,
        session_id,
        lambda to: pb.GetExpertActionsRequest(session_id=to),
        lambda response: list(response.actions),
        timeout,
    )


# ---------------------------------------------------------------- snapshots


def snapshot(session_id: str, *, timeout: float | None = None) -> Call[types.Snapshot]:
    """A signed snapshot of the session (opaque bytes, its environment and step index)."""
    return _of_session(
        "CreateSnapshot",
        Effect.READS,
        session_id,
        lambda to: pb.CreateSnapshotRequest(session_id=to),
        convert.snapshot,
        timeout,
    )


def restore(
    snapshot: types.Snapshot | bytes, *, admissible: bool = False, timeout: float | None = None
) -> Call[types.SessionStart]:
    """A new session at the snapshot's state (on any replica with the same key; of another environment
    version when the snapshot's replay verifies there).

    Pass the `Snapshot` (not its bare bytes) to a pool, so it places the session by environment.
    """
    data, environment = (
        (snapshot.data, snapshot.environment) if isinstance(snapshot, types.Snapshot) else (snapshot, "")
    )
    request = pb.RestoreSnapshotRequest(snapshot=data, include_admissible_actions=admissible)
    return _placing("RestoreSnapshot", request, environment, timeout)


def restore_many(
    snapshots: Sequence[types.Snapshot | bytes],
    *,
    admissible: bool = False,
    return_errors: bool = False,
    timeout: float | None = None,
) -> Call[list[Any]]:
    """New sessions at many snapshots' states in one RestoreSnapshotBatch call, their `SessionStart`s in order.

    A pool places each as `restore` would and sends one batch per replica, in parallel. Every restore
    runs; then the first failure's `EnvhubError` is raised, or with `return_errors` each failure takes
    its result's place. Not retried (it creates sessions). The batch travels as one message: keep its
    snapshots under the 16 MiB message cap (a failover transport sends `recovery.BATCH_RESTORES` at a time).
    """
    return restore_batch(
        [restore(s, admissible=admissible, timeout=timeout) for s in snapshots], return_errors, timeout
    )


def restore_batch(
    parts: Sequence[Call[types.SessionStart]], return_errors: bool = False, timeout: float | None = None
) -> Call[list[Any]]:
    """The restores `parts` (each a `restore` call) as one RestoreSnapshotBatch call; see `restore_many`."""
    request = pb.RestoreSnapshotBatchRequest(
        restores=[expect(part.request, pb.RestoreSnapshotRequest) for part in parts]
    )
    return Call(
        "RestoreSnapshotBatch",
        request,
        lambda answer: results(convert.restore_batch(answer), return_errors),
        Effect.RESTORES,
        timeout,
        created=_restored,
        parts=tuple(parts),
    )


def fork(session_id: str, count: int = 1, *, timeout: float | None = None) -> Call[list[str]]:
    """`count` new sessions continuing independently from this one's state."""
    return _of_session(
        "ForkSession",
        Effect.FORKS,
        session_id,
        lambda to: pb.ForkSessionRequest(session_id=to, count=count),
        _forked,
        timeout,
        created=_forked,
    )


def _placing(method: str, request: Message, environment: str, timeout: float | None) -> Call[types.SessionStart]:
    """A call creating one session of `environment` (a pool places it by the environment)."""
    return Call(
        method, request, convert.session_start, Effect.CREATES, timeout, environment=environment, created=_new_session
    )


def _new_session(response: pb.CreateSessionResponse | pb.RestoreSnapshotResponse) -> list[str]:
    return [response.session_id]


def _restored(response: pb.RestoreSnapshotBatchResponse) -> list[str]:
    return [entry.session.session_id for entry in response.results if entry.HasField("session")]


def _forked(response: pb.ForkSessionResponse) -> list[str]:
    return list(response.session_ids)


def _none(_: Message) -> None:
    return None


def results(answers: Sequence[Any], return_errors: bool) -> list[Any]:
    """A batch's answer (`step_many`, `restore_many`): the first error raised, or (with `return_errors`)
    each error in its place."""
    if not return_errors:
        for answer in answers:
            if isinstance(answer, EnvhubError):
                raise answer
    return list(answers)
