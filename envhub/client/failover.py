"""`FailoverTransport`: sessions that survive a replica draining or dying, over a `PoolTransport`.

Opt-in crash recovery for one client over several replicas sharing a snapshot key. For every
session it holds, the transport keeps the latest snapshot (taken every `snapshot_every` steps,
after creation and after each reset) and the steps taken since, with their results. When a call
of a session is refused as DRAINING, the transport stops placing sessions on that replica, takes
a fresh snapshot there (a draining server still admits CreateSnapshot and CloseSession), restores
it on another replica, closes the old session and sends the call again: no replay. When a call
fails with UNAVAILABLE or CANCELLED and its replica then fails a read-only probe (gone: SIGKILL,
node loss), or the fresh snapshot is refused, the transport restores the held snapshot on another
replica, replays the steps since, checks each replayed result equals the recorded one, and sends
the call again there. The caller keeps using the
session id it was given; the transport maps it to the live session. A replay that does not
reproduce raises FAILED_PRECONDITION (REPLAY_DIVERGED) instead of continuing a different episode.

Costs: one CreateSnapshot per `snapshot_every` steps (ALFWorld snapshots are a few KB), and the
steps since the last snapshot kept in memory.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from google.protobuf.message import Message

from envhub.client import calls, types
from envhub.client.endpoints import REFRESH_S
from envhub.client.errors import from_status
from envhub.client.pool_transport import FAILED, PoolTransport
from envhub.client.transport import Settings
from envhub.core import errors
from envhub.core.errors import EnvhubError
from envhub.core.status import to_rpc_status
from envhub.v1 import envhub_pb2 as pb

log = logging.getLogger(__name__)
R = TypeVar("R")


@dataclass
class _Session:
    """What the transport needs to rebuild one session elsewhere."""

    live_id: str
    """The session id on the replica serving it now."""
    snapshot: types.Snapshot | None = None
    replay: list[tuple[calls.Call[types.EnvView], types.EnvView]] = field(default_factory=list)
    """Steps since `snapshot`, with the results the caller saw."""


class FailoverTransport:
    """A blocking transport over a `PoolTransport` that moves sessions off replicas that fail.

    `EnvhubClient(FailoverTransport.over(["dns:///envhub-alfworld:50051"], snapshot_every=2))`.
    """

    def __init__(self, pool: PoolTransport, snapshot_every: int = 1) -> None:
        if snapshot_every < 1:
            raise ValueError("snapshot_every must be at least 1 (a snapshot every k steps)")
        self.pool = pool
        self.snapshot_every = snapshot_every
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self.recoveries = 0
        """Sessions moved to another replica so far."""
        self.migrations = 0
        """Of `recoveries`, those moved by a fresh snapshot taken on their draining replica (no replay)."""

    @classmethod
    def over(
        cls,
        targets: Sequence[str],
        snapshot_every: int = 1,
        settings: Settings | None = None,
        refresh_s: float = REFRESH_S,
    ) -> FailoverTransport:
        """`PoolTransport.over(targets, settings, refresh_s)` ("dns:///name:port" stands for every
        address, looked up again every `refresh_s` seconds and after a replica fails), with failover."""
        return cls(PoolTransport.over(targets, settings, refresh_s), snapshot_every)

    def send(self, call: calls.Call[Any]) -> Message:
        if call.effect is calls.Effect.BATCHES:
            return self._batch(call)
        session = self._sessions.get(call.session_id) if call.session_id else None
        if session is None:
            return self._untracked(call)
        try:
            response = self.pool.send(call.addressed_to(session.live_id))
        except EnvhubError as error:
            if not self.pool.failed(self.pool.owner(session.live_id), error):
                raise
            if call.effect is calls.Effect.CLOSES:  # its replica is gone or leaving: nothing left to close
                self._sessions.pop(call.session_id, None)
                return pb.CloseSessionResponse()
            self._recover(call.session_id, session, error)
            response = self.pool.send(call.addressed_to(session.live_id))
        self._after(call, response)
        return response

    def _untracked(self, call: calls.Call[Any]) -> Message:
        """A call of no tracked session; a new session whose replica fails before its first snapshot
        (which `_after` takes) is placed again, on another replica."""
        while True:
            response = self.pool.send(call)
            try:
                self._after(call, response)
            except EnvhubError as error:
                if call.effect is not calls.Effect.CREATES:
                    raise
                replica = self.pool.owner(call.created(response)[0])
                if not self.pool.failed(replica, error):
                    raise
                log.warning("a new session's replica %s failed before its first snapshot (%s)", replica, error)
                self.pool.retire(replica)
                continue
            return response

    def _batch(self, call: calls.Call[Any]) -> Message:
        """The batch sent with each tracked session's live id; a step failing with its replica is sent
        again on its own (recovering the session); every step that went through is recorded."""
        live = calls.batch([self._live(part) for part in call.parts], timeout=call.timeout)
        response = calls.expect(self.pool.send(live), pb.StepBatchResponse)
        entries = []
        for part, entry in zip(call.parts, response.results, strict=True):
            lost = entry.HasField("error") and from_status(entry.error).code in FAILED
            if lost and part.session_id in self._sessions:
                try:
                    entry = pb.StepBatchEntry(result=calls.expect(self.send(part), pb.StepResponse).result)
                except EnvhubError as error:
                    entry = pb.StepBatchEntry(error=to_rpc_status(error))
            elif entry.HasField("result"):
                self._stepped(part, part.decode(pb.StepResponse(result=entry.result)))
            entries.append(entry)
        return pb.StepBatchResponse(results=entries)

    def _live(self, call: calls.Call[R]) -> calls.Call[R]:
        session = self._sessions.get(call.session_id)
        return call if session is None else call.addressed_to(session.live_id)

    def close(self) -> None:
        self.pool.close()

    def _run(self, call: calls.Call[R]) -> R:
        return call.decode(self.pool.send(call))

    # ------------------------------------------------------------ bookkeeping

    def _after(self, call: calls.Call[Any], response: Message) -> None:
        """Track sessions the call created, changed or closed."""
        for session_id in call.created(response):
            self._track(session_id)
        if call.effect is calls.Effect.RESETS:
            self._checkpoint(self._sessions[call.session_id])
        elif call.effect is calls.Effect.STEPS:
            self._stepped(call, call.decode(response))
        elif call.effect is calls.Effect.CLOSES:
            self._sessions.pop(call.session_id, None)

    def _track(self, session_id: str) -> None:
        session = _Session(session_id)
        self._checkpoint(session)
        with self._lock:
            self._sessions[session_id] = session

    def _stepped(self, call: calls.Call[types.EnvView], result: types.EnvView) -> None:
        session = self._sessions.get(call.session_id)
        if session is None:
            return
        session.replay.append((call, result))
        if len(session.replay) >= self.snapshot_every:
            try:
                self._checkpoint(session)
            except EnvhubError as error:  # the replica is failing: keep the older snapshot and the replay
                if error.code not in FAILED:
                    raise

    def _checkpoint(self, session: _Session) -> None:
        session.snapshot = self._run(calls.snapshot(session.live_id))
        session.replay.clear()

    # ------------------------------------------------------------ recovery

    def _recover(self, session_id: str, session: _Session, cause: EnvhubError) -> None:
        """Move `session` to another replica: by a fresh snapshot when its replica refused the call as
        DRAINING (so the call was not applied there, and a draining replica still admits CreateSnapshot
        and CloseSession); else, or when that snapshot fails, from the held snapshot and the steps since."""
        lost = self.pool.owner(session.live_id)
        self.pool.retire(lost)
        if cause.reason == "DRAINING" and self._migrate(session_id, session):
            return
        if session.snapshot is None:
            raise errors.unavailable(
                f"replica {lost!r} of session {session_id!r} failed before a snapshot was taken", "NO_SNAPSHOT"
            ) from cause
        start = self._run(calls.restore(session.snapshot))
        log.warning(
            "session %s: replica %s failed (%s); restored on %s", session_id, lost, cause.reason, start.session_id
        )
        for step, recorded in session.replay:
            replayed = self._run(step.addressed_to(start.session_id))
            if replayed != recorded:
                raise errors.failed_precondition(
                    f"session {session_id!r}: a replayed step on {start.session_id!r} "
                    f"gave {replayed.text!r}, not {recorded.text!r}",
                    "REPLAY_DIVERGED",
                )
        session.live_id = start.session_id
        self.recoveries += 1

    def _migrate(self, session_id: str, session: _Session) -> bool:
        """Snapshot `session` on its draining replica, restore it on another and close it there;
        False (nothing changed) when the draining replica does not give the snapshot."""
        leaving = session.live_id
        try:
            snapshot = self._run(calls.snapshot(leaving))
        except EnvhubError as error:  # gone since, or past its drain window: use the held snapshot
            log.warning("session %s: no fresh snapshot from its draining replica (%s)", session_id, error)
            return False
        start = self._run(calls.restore(snapshot))
        session.live_id, session.snapshot = start.session_id, snapshot
        session.replay.clear()
        try:  # lets the draining replica exit as soon as its sessions are gone
            self._run(calls.close_session(leaving))
        except EnvhubError as error:
            log.info("session %s: closing %s on its draining replica failed (%s)", session_id, leaving, error)
        log.warning("session %s: its replica drains; moved from %s to %s", session_id, leaving, start.session_id)
        self.recoveries += 1
        self.migrations += 1
        return True
