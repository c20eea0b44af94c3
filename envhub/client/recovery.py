"""Moving many sessions at once, for `FailoverTransport`: rebuilt from held snapshots, or migrated.

A `Tracked` session is what a failover transport holds to rebuild one session elsewhere: its live
id, its latest snapshot and the steps since, with the views the caller saw. `rebuild` restores a
group of them on other replicas (placed by the pool) with up to `concurrency` restores in flight,
then replays their steps since the snapshot as batched rounds (round i: every session's i-th
step, one StepBatch per replica), checking each replayed view equals the recorded one. `migrate`
moves a draining replica's sessions by fresh snapshots taken there (no replay), also
`concurrency` at a time, returning the ones whose fresh snapshot was refused. Neither raises: a
session that cannot be rebuilt keeps its error in `broken`, raised by its next call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from google.protobuf.message import Message

from envhub.client import calls, types
from envhub.client.errors import from_status
from envhub.core import errors
from envhub.core.errors import EnvhubError
from envhub.v1 import envhub_pb2 as pb

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")
CONCURRENCY = 32
"""Restores (or migrations) in flight at once while moving a replica's sessions."""


@dataclass
class Tracked:
    """One session as a failover transport holds it."""

    live_id: str
    """The session id on the replica serving it now."""
    snapshot: types.Snapshot | None = None
    replay: list[tuple[calls.Call[types.EnvView], types.EnvView]] = field(default_factory=list)
    """Steps since `snapshot`, with the views the caller saw."""
    epoch: int = 0
    """How many times the session moved; a call that started in an older epoch is sent again."""
    moving: threading.Event | None = None
    """Set while a move of this session runs: its calls wait for it."""
    broken: EnvhubError | None = None
    """Why the session could not be moved (its calls raise it)."""
    episode: int = 0
    """Resets so far (a snapshot asked for before a reset is not kept)."""
    renewing: bool = False
    """A new snapshot of the session is being taken in the background."""
    moved_at_step: int | None = None
    """After a move by a fresh snapshot: the step index that snapshot was taken at (a step answered by
    the old copy meanwhile is in the new one when its index is not above it)."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def moved_to(self, live_id: str, snapshot: types.Snapshot | None = None) -> None:
        """Now served as `live_id` (from `snapshot` with no replay, when given)."""
        with self.lock:
            self.live_id = live_id
            self.epoch += 1
            self.moved_at_step = None if snapshot is None else snapshot.step_index
            if snapshot is not None:
                self.snapshot = snapshot
                self.replay.clear()


Send = Callable[[calls.Call[Any]], Message]
"""A pool's send (placement, routing, batch splitting)."""


def each(concurrency: int, work: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """`work` of every item, up to `concurrency` at once, results in order."""
    if len(items) <= 1 or concurrency <= 1:
        return [work(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(concurrency, len(items))) as threads:
        return list(threads.map(work, items))


def _attempt(send: Send, call: calls.Call[R]) -> R | EnvhubError:
    try:
        return call.decode(send(call))
    except EnvhubError as error:
        return error


Steps = list[tuple[calls.Call[types.EnvView], types.EnvView]]


@dataclass(frozen=True)
class Rebuilt:
    """What `rebuild` did, and how long its two phases took."""

    sessions: int
    """Sessions rebuilt (the others of the group are `broken`)."""
    restore_s: float
    """Restoring every held snapshot, `concurrency` in flight."""
    replay_s: float
    """Replaying the steps since, in batched rounds."""


def rebuild(send: Send, group: Sequence[tuple[str, Tracked]], cause: EnvhubError, concurrency: int) -> Rebuilt:
    """Restore every session of `group` ((caller's id, session)) from its held snapshot elsewhere and
    replay its steps since."""
    started = time.perf_counter()
    held: dict[str, tuple[types.Snapshot, Steps]] = {}
    for caller_id, session in group:
        with session.lock:  # the snapshot and the steps since it, as one
            if session.snapshot is not None:
                held[caller_id] = (session.snapshot, list(session.replay))
        if caller_id not in held:
            session.broken = errors.unavailable(
                f"the replica of session {caller_id!r} failed before a snapshot was taken", "NO_SNAPSHOT"
            )
    names = list(held)
    starts = each(concurrency, lambda name: _attempt(send, calls.restore(held[name][0])), names)
    sessions = dict(group)
    live: dict[str, str] = {}
    for caller_id, start in zip(names, starts, strict=True):
        if isinstance(start, EnvhubError):
            sessions[caller_id].broken = start
        else:
            live[caller_id] = start.session_id
    restored = time.perf_counter()
    steps = {caller_id: held[caller_id][1] for caller_id in live}
    for depth in range(max((len(replay) for replay in steps.values()), default=0)):
        _replay_round(send, sessions, steps, live, depth)
    for caller_id, live_id in live.items():
        sessions[caller_id].moved_to(live_id)
        log.info("session %s: its replica failed (%s); rebuilt as %s", caller_id, cause.reason, live_id)
    return Rebuilt(len(live), restored - started, time.perf_counter() - restored)


def _replay_round(
    send: Send, sessions: dict[str, Tracked], steps: dict[str, Steps], live: dict[str, str], depth: int
) -> None:
    """Step `depth` of every rebuilt session's replay in one batch; a session whose view differs from
    the recorded one (or whose step fails) is broken and dropped from `live`."""
    due = [(caller_id, *steps[caller_id][depth]) for caller_id in list(live) if depth < len(steps[caller_id])]
    parts = [step.addressed_to(live[caller_id]) for caller_id, step, _ in due]
    try:
        answer = calls.expect(send(calls.batch(parts)), pb.StepBatchResponse)
        entries: list[Any] = list(answer.results)
    except EnvhubError as error:
        entries = [error] * len(parts)
    for (caller_id, _, recorded), part, entry in zip(due, parts, entries, strict=True):
        if isinstance(entry, EnvhubError) or entry.HasField("error"):
            failure = entry if isinstance(entry, EnvhubError) else from_status(entry.error)
            sessions[caller_id].broken = failure
            del live[caller_id]
            continue
        replayed = part.decode(pb.StepResponse(result=entry.result))
        if replayed != recorded:
            sessions[caller_id].broken = errors.failed_precondition(
                f"session {caller_id!r}: a replayed step on {live[caller_id]!r} gave {replayed.text!r}, "
                f"not {recorded.text!r}",
                "REPLAY_DIVERGED",
            )
            del live[caller_id]


def migrate(send: Send, group: Sequence[tuple[str, Tracked]], concurrency: int) -> list[tuple[str, Tracked]]:
    """Move every session of `group` off its draining replica by a fresh snapshot taken there (restored
    elsewhere, the old one closed); returns those whose snapshot or restore failed (to rebuild)."""

    def move(item: tuple[str, Tracked]) -> bool:
        caller_id, session = item
        leaving = session.live_id
        snapshot = _attempt(send, calls.snapshot(leaving))
        if isinstance(snapshot, EnvhubError):  # gone since, or past its drain window
            log.warning("session %s: no fresh snapshot from its draining replica (%s)", caller_id, snapshot)
            return False
        start = _attempt(send, calls.restore(snapshot))
        if isinstance(start, EnvhubError):
            return False
        session.moved_to(start.session_id, snapshot)
        closed = _attempt(send, calls.close_session(leaving))  # lets the draining replica exit sooner
        if isinstance(closed, EnvhubError):
            log.info("session %s: closing %s on its draining replica failed (%s)", caller_id, leaving, closed)
        log.warning("session %s: its replica drains; moved from %s to %s", caller_id, leaving, start.session_id)
        return True

    moved = each(concurrency, move, group)
    return [item for item, done in zip(group, moved, strict=True) if not done]
