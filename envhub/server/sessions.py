"""The server's table of live sessions: which worker owns each id, limits, idleness, and the
tombstones of sessions lost with their worker."""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from envhub.core import errors
from envhub.server.worker_handle import Worker


@dataclass
class SessionRecord:
    """Where a session lives and when it was last used."""

    session_id: str
    environment: str
    worker: Worker
    last_used: float = field(default_factory=time.monotonic)
    in_flight: int = 0


LOST_PER_SESSION = 4
"""Tombstones kept per session slot (`max_sessions`): the oldest go first beyond that many."""


class SessionTable:
    """Session ids -> records, with the max-sessions limit; ids of sessions lost with their worker
    answer UNAVAILABLE (SESSION_LOST) for `lost_ttl_s` seconds (at most `LOST_PER_SESSION` x
    `max_sessions` of them), then NOT_FOUND like any unknown id."""

    def __init__(
        self, replica_id: str, max_sessions: int, lost_ttl_s: float = 600.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.replica_id = replica_id
        self.max_sessions = max_sessions
        self.lost_ttl_s = lost_ttl_s
        self._clock = clock
        self._records: dict[str, SessionRecord] = {}
        self._lost: OrderedDict[str, float] = OrderedDict()
        """Tombstones: id of a session lost with its worker -> when (clock), oldest first."""
        self.on_drop: Callable[[], None] = lambda: None
        """Called after sessions left the table (closed, reaped, or lost with their worker)."""

    def __len__(self) -> int:
        return len(self._records)

    def count(self, environment: str) -> int:
        return sum(1 for record in self._records.values() if record.environment == environment)

    def new_ids(self, count: int) -> list[str]:
        """Fresh opaque ids "<replica_id>.<suffix>"; refuses past the limit."""
        if len(self._records) + count > self.max_sessions:
            raise errors.resource_exhausted(
                f"the server holds {len(self._records)} of at most {self.max_sessions} sessions; close some first",
                "TOO_MANY_SESSIONS",
                max_sessions=str(self.max_sessions),
            )
        return [f"{self.replica_id}.{secrets.token_hex(8)}" for _ in range(count)]

    def add(self, session_id: str, environment: str, worker: Worker) -> SessionRecord:
        record = SessionRecord(session_id, environment, worker)
        self._records[session_id] = record
        worker.sessions.add(session_id)
        return record

    def get(self, session_id: str) -> SessionRecord:
        """The record of a live session; UNAVAILABLE (SESSION_LOST) for a tombstone, else NOT_FOUND
        (SESSION_NOT_FOUND)."""
        record = self._records.get(session_id)
        if record is None:
            if self.lost(session_id):
                raise errors.unavailable(
                    f"session {session_id!r} was lost with its worker process (restore it from a snapshot)",
                    "SESSION_LOST",
                    session_id=session_id,
                )
            owner = session_id.split(".", 1)[0]
            hint = "" if owner == self.replica_id else f" (it names replica {owner!r}, this is {self.replica_id!r})"
            raise errors.not_found(
                f"session {session_id!r} is unknown, closed or expired{hint}",
                "SESSION_NOT_FOUND",
                session_id=session_id,
            )
        return record

    def drop(self, session_id: str) -> None:
        """Forget a session (closed, reaped, or never created), and its tombstone if it had one."""
        record = self._records.pop(session_id, None)
        if record is not None:
            record.worker.sessions.discard(session_id)
        self._lost.pop(session_id, None)
        self.on_drop()

    def drop_worker(self, worker: Worker) -> None:
        """Forget every session of a dead worker, leaving a tombstone for each (SESSION_LOST)."""
        now = self._clock()
        for session_id in list(worker.sessions):
            if self._records.pop(session_id, None) is not None:
                self._lost[session_id] = now
        worker.sessions.clear()
        self._expire(now)
        self.on_drop()

    def lost(self, session_id: str) -> bool:
        """Whether `session_id` names a session lost with its worker less than `lost_ttl_s` ago."""
        self._expire(self._clock())
        return session_id in self._lost

    def _expire(self, now: float) -> None:
        cutoff, most = now - self.lost_ttl_s, LOST_PER_SESSION * self.max_sessions
        while self._lost and (len(self._lost) > most or next(iter(self._lost.values())) <= cutoff):
            self._lost.popitem(last=False)

    def idle(self, timeout: float, now: float) -> list[SessionRecord]:
        """Sessions with no call in flight and none for `timeout` seconds before monotonic time `now`."""
        cutoff = now - timeout
        return [r for r in self._records.values() if r.in_flight == 0 and r.last_used < cutoff]
