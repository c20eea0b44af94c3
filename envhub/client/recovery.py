"""Moving many sessions at once, for `FailoverTransport`: rebuilt from held snapshots, or migrated.

A `Tracked` session is what a failover transport holds to rebuild one session elsewhere: its live
id, its latest snapshot and the steps since, with the views the caller saw. `rebuild` restores a
group of them on other replicas (placed by the pool) in RestoreSnapshotBatch calls of up to
`batch_bytes` of snapshots each (the pool sends one per replica), up to `concurrency` in flight,
then replays their steps since the snapshot as batched rounds (round i: every session's i-th
step, one StepBatch per replica), checking each replayed view equals the recorded one. `migrate`
moves a draining replica's sessions by fresh snapshots taken there (`concurrency` at a time),
restored in batches the same way (no replay), and returns the ones whose fresh snapshot or restore
failed. With `batch_bytes` 0 each restore is its own RestoreSnapshot call (`concurrency` in flight),
for servers older than RestoreSnapshotBatch. Neither raises: a session that cannot be rebuilt keeps
its error in `broken`, raised by its next call.
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
"""Calls in flight at once while moving a replica's sessions (restore batches, fresh snapshots)."""
BATCH_BYTES = 4 * 1024 * 1024
"""Most snapshot bytes one RestoreSnapshotBatch of a move carries: a quarter of the 16 MiB message cap."""
BATCH_RESTORES = 16
"""Most restores one RestoreSnapshotBatch of a move carries, `concurrency` batches in flight: one batch of
all 256 of a killed replica's sessions restored 1.8x slower mid-turn (cold) than 32 single calls in flight,
batches of 16 1.1x (docs/design/021-batched-restore-and-liveness.md)."""


@dataclass
class Tracked:
    """One session as a failover transport holds it."""

    live_id: str
    """The session id on the replica serving it now."""
    snapshot: types.Snapshot | None = None
    replay: list[tuple[calls.Call[types.EnvView], pb.StepResult]] = field(default_factory=list)
    """Steps since `snapshot`, with the results the caller was answered (kept as received: a replayed
    result must equal its message, which holds no session id)."""
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


def _batches(snapshots: Sequence[types.Snapshot], batch_bytes: int) -> list[list[int]]:
    """Positions of `snapshots` in consecutive batches of at most `batch_bytes` of snapshot data (a
    bigger snapshot alone) and `BATCH_RESTORES` restores."""
    batches: list[list[int]] = []
    size = 0
    for position, snapshot in enumerate(snapshots):
        if not batches or size + len(snapshot.data) > batch_bytes or len(batches[-1]) >= BATCH_RESTORES:
            batches.append([])
            size = 0
        batches[-1].append(position)
        size += len(snapshot.data)
    return batches


def restore_all(
    send: Send, snapshots: Sequence[types.Snapshot], concurrency: int, batch_bytes: int = BATCH_BYTES
) -> list[types.SessionStart | EnvhubError]:
    """Every snapshot restored (each placed by the pool), in RestoreSnapshotBatch calls of at most
    `batch_bytes` of snapshots, `concurrency` in flight (`batch_bytes` 0: one RestoreSnapshot each);
    each new session's start, or its restore's error, in order."""
    if batch_bytes <= 0:
        return each(concurrency, lambda snapshot: _attempt(send, calls.restore(snapshot)), snapshots)

    def restore_batch(positions: list[int]) -> list[types.SessionStart | EnvhubError]:
        call = calls.restore_many([snapshots[position] for position in positions], return_errors=True)
        answer = _attempt(send, call)
        return [answer] * len(positions) if isinstance(answer, EnvhubError) else answer

    batches = _batches(snapshots, batch_bytes)
    starts: dict[int, types.SessionStart | EnvhubError] = {}
    for positions, answers in zip(batches, each(concurrency, restore_batch, batches), strict=True):
        starts.update(zip(positions, answers, strict=True))
    return [starts[position] for position in range(len(snapshots))]


def _attempt(send: Send, call: calls.Call[R]) -> R | EnvhubError:
    try:
        return call.decode(send(call))
    except EnvhubError as error:
        return error


Steps = list[tuple[calls.Call[types.EnvView], pb.StepResult]]


@dataclass(frozen=True)
class Rebuilt:
    """What `rebuild` did, and how long its two phases took."""

    sessions: int
    """Sessions rebuilt (the others of the group are `broken`)."""
    restore_s: float
    """Restoring every held snapshot, `concurrency` in flight."""
    replay_s: float
    """Replaying the steps since, in batched rounds."""


def rebuild(
    send: Send,
    group: Sequence[tuple[str, Tracked]],
    cause: EnvhubError,
    concurrency: int,
    batch_bytes: int = BATCH_BYTES,
) -> Rebuilt:
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
    starts = restore_all(send, [held[name][0] for name in names], concurrency, batch_bytes)
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
    for (caller_id, _, recorded), entry in zip(due, entries, strict=True):
        if isinstance(entry, EnvhubError) or entry.HasField("error"):
            failure = entry if isinstance(entry, EnvhubError) else from_status(entry.error)
            sessions[caller_id].broken = failure
            del live[caller_id]
            continue
        replayed = entry.result
        if replayed != recorded:
            sessions[caller_id].broken = errors.failed_precondition(
                f"session {caller_id!r}: a replayed step on {live[caller_id]!r} gave {replayed.observation.text!r}, "
                f"not {recorded.observation.text!r} (or another reward, end or info)",
                "REPLAY_DIVERGED",
            )
            del live[caller_id]


def migrate(
    send: Send, group: Sequence[tuple[str, Tracked]], concurrency: int, batch_bytes: int = BATCH_BYTES
) -> list[tuple[str, Tracked]]:
    """Move every session of `group` off its draining replica by a fresh snapshot taken there (`concurrency`
    at a time), restored elsewhere in batches (`restore_all`), the old one closed; returns those whose
    snapshot or restore failed (to rebuild)."""

    def fresh(item: tuple[str, Tracked]) -> types.Snapshot | EnvhubError:
        snapshot = _attempt(send, calls.snapshot(item[1].live_id))
        if isinstance(snapshot, EnvhubError):  # gone since, or past its drain window
            log.warning("session %s: no fresh snapshot from its draining replica (%s)", item[0], snapshot)
        return snapshot

    snapshots = each(concurrency, fresh, group)
    taken = [
        (item, snapshot)
        for item, snapshot in zip(group, snapshots, strict=True)
        if isinstance(snapshot, types.Snapshot)
    ]
    starts = restore_all(send, [snapshot for _, snapshot in taken], concurrency, batch_bytes)
    left = [item for item, snapshot in zip(group, snapshots, strict=True) if isinstance(snapshot, EnvhubError)]
    leaving: list[str] = []
    for ((caller_id, session), snapshot), start in zip(taken, starts, strict=True):
        if isinstance(start, EnvhubError):
            left.append((caller_id, session))
            continue
        leaving.append(session.live_id)
        log.info("session %s: its replica drains; moved from %s to %s", caller_id, session.live_id, start.session_id)
        session.moved_to(start.session_id, snapshot)

    def close(session_id: str) -> None:  # lets the draining replica exit sooner
        closed = _attempt(send, calls.close_session(session_id))
        if isinstance(closed, EnvhubError):
            log.info("closing %s on its draining replica failed (%s)", session_id, closed)

    each(concurrency, close, leaving)
    return left
