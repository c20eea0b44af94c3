"""The server's table of live sessions: which worker owns each id, which tenant owns each session,
limits and quotas, idleness, and the tombstones of sessions lost with their worker."""

from __future__ import annotations

import secrets
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from envhub.core import errors
from envhub.server.tenants import DEFAULT, Tenant
from envhub.server.worker_handle import Worker


@dataclass
class SessionRecord:
    """Where a session lives, who owns it, and when it was last used."""

    session_id: str
    environment: str
    worker: Worker
    tenant: str = DEFAULT
    task_id: str = ""
    last_used: float = field(default_factory=time.monotonic)
    in_flight: int = 0


LOST_PER_SESSION = 4
"""Tombstones kept per session slot (`max_sessions`): the oldest go first beyond that many."""


class SessionTable:
    """Session ids -> records, with the max-sessions limit and per-tenant quotas.

    A session is visible only to the tenant that created it: to any other its id answers
    NOT_FOUND (SESSION_NOT_FOUND) exactly like an id that never existed. Ids of sessions lost
    with their worker answer UNAVAILABLE (SESSION_LOST) to their tenant for `lost_ttl_s`
    seconds (at most `LOST_PER_SESSION` x `max_sessions` of them), then NOT_FOUND.
    """

    def __init__(
        self, replica_id: str, max_sessions: int, lost_ttl_s: float = 600.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.replica_id = replica_id
        self.max_sessions = max_sessions
        self.lost_ttl_s = lost_ttl_s
        self._clock = clock
        self._records: dict[str, SessionRecord] = {}
        self._held: Counter[str] = Counter()
        """Tenant -> its live sessions."""
        self._lost: OrderedDict[str, tuple[float, str]] = OrderedDict()
        """Tombstones: id of a session lost with its worker -> (when, by the clock; its tenant), oldest first."""
        self.on_drop: Callable[[], None] = lambda: None
        """Called after sessions left the table (closed, reaped, or lost with their worker)."""

    def __len__(self) -> int:
        return len(self._records)

    def counts(self) -> Counter[tuple[str, str]]:
        """Live sessions by (environment, tenant)."""
        return Counter((record.environment, record.tenant) for record in self._records.values())

    def new_ids(self, count: int, tenant: Tenant) -> list[str]:
        """Fresh opaque ids "<replica_id>.<suffix>"; refuses past the server's limit or the tenant's quota."""
        if len(self._records) + count > self.max_sessions:
            raise errors.resource_exhausted(
                f"the server holds {len(self._records)} of at most {self.max_sessions} sessions; close some first",
                "TOO_MANY_SESSIONS",
                max_sessions=str(self.max_sessions),
            )
        held = self._held[tenant.name]
        if tenant.max_sessions is not None and held + count > tenant.max_sessions:
            raise errors.resource_exhausted(
                f"tenant {tenant.name!r} holds {held} of its quota of {tenant.max_sessions} sessions "
                f"(max_sessions in the tenants file); close some first",
                "TENANT_QUOTA",
                tenant=tenant.name,
                quota="max_sessions",
                max_sessions=str(tenant.max_sessions),
            )
        return [f"{self.replica_id}.{secrets.token_hex(8)}" for _ in range(count)]

    def add(self, session_id: str, environment: str, worker: Worker, tenant: str, task_id: str = "") -> SessionRecord:
        record = SessionRecord(session_id, environment, worker, tenant, task_id)
        self._records[session_id] = record
        self._held[tenant] += 1
        worker.sessions.add(session_id)
        worker.tasks[task_id] += 1
        return record

    def retask(self, record: SessionRecord, task_id: str) -> None:
        """The session now plays `task_id` (reset onto another task)."""
        _release(record)
        record.worker.tasks[task_id] += 1
        record.task_id = task_id

    def get(self, session_id: str, tenant: str) -> SessionRecord:
        """The record of a live session of `tenant`; UNAVAILABLE (SESSION_LOST) for its tombstone,
        else NOT_FOUND (SESSION_NOT_FOUND), also for another tenant's session."""
        record = self._records.get(session_id)
        if record is not None and record.tenant == tenant:
            return record
        if record is None and self.lost(session_id, tenant):
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

    def _forget(self, session_id: str) -> SessionRecord | None:
        record = self._records.pop(session_id, None)
        if record is not None:
            self._held[record.tenant] -= 1
            if not self._held[record.tenant]:
                del self._held[record.tenant]
        return record

    def drop(self, session_id: str) -> None:
        """Forget a session (closed, reaped, or never created), and its tombstone if it had one."""
        record = self._forget(session_id)
        if record is not None:
            record.worker.sessions.discard(session_id)
            _release(record)
        self._lost.pop(session_id, None)
        self.on_drop()

    def drop_worker(self, worker: Worker) -> None:
        """Forget every session of a dead worker, leaving a tombstone for each (SESSION_LOST)."""
        now = self._clock()
        for session_id in list(worker.sessions):
            record = self._forget(session_id)
            if record is not None:
                self._lost[session_id] = (now, record.tenant)
        worker.sessions.clear()
        worker.tasks.clear()
        self._expire(now)
        self.on_drop()

    def lost(self, session_id: str, tenant: str) -> bool:
        """Whether `session_id` names a session of `tenant` lost with its worker less than `lost_ttl_s` ago."""
        self._expire(self._clock())
        tombstone = self._lost.get(session_id)
        return tombstone is not None and tombstone[1] == tenant

    def _expire(self, now: float) -> None:
        cutoff, most = now - self.lost_ttl_s, LOST_PER_SESSION * self.max_sessions
        while self._lost and (len(self._lost) > most or next(iter(self._lost.values()))[0] <= cutoff):
            self._lost.popitem(last=False)

    def idle(self, timeout: float, now: float) -> list[SessionRecord]:
        """Sessions with no call in flight and none for `timeout` seconds before monotonic time `now`."""
        cutoff = now - timeout
        return [r for r in self._records.values() if r.in_flight == 0 and r.last_used < cutoff]


def _release(record: SessionRecord) -> None:
    """One session fewer of its task in its worker (a task none holds any more is forgotten)."""
    tasks = record.worker.tasks
    tasks[record.task_id] -= 1
    if tasks[record.task_id] <= 0:
        del tasks[record.task_id]
