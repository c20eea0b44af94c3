"""A worker's inbox with two lanes, so that steps do not wait behind session starts.

Creating, resetting, restoring or forking a session costs tens to hundreds of milliseconds (a
game or simulator loads); a step costs about one. In one first-in-first-out inbox, every step that
arrives behind a few of those waits for all of them: the p99 step latency under session churn is
then many times its median. `Lanes` keeps the slow operations in their own lane and serves the
quick lane first, so a step waits for at most the one slow operation already running. So that a
steady stream of steps cannot starve session starts, the oldest slow operation goes next once
`slow_after` steps were served while it waited.

Order per session is kept: an operation that concerns a session with a slow operation still
queued goes into the slow lane behind it (a Step never overtakes the Reset of its own session).
Across sessions, a quick operation may overtake a slow one that arrived earlier.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from typing import Any

from envhub.server import worker_ops as ops

SLOW_AFTER = 64
"""Default: steps served ahead of a waiting slow operation before it goes next (about 0.1 s of ALFWorld steps)."""

SLOW_OPS: tuple[type[ops.Op[Any]], ...] = (ops.Create, ops.Reset, ops.Restore, ops.Fork)
"""Operations that start (or restart) a session: served after every queued quick operation."""

Item = tuple[int, ops.Op[Any]]


def sessions_of(op: ops.Op[Any]) -> tuple[str, ...]:
    """Every session id an operation reads or starts."""
    if isinstance(op, ops.StepMany):
        return tuple(step.session_id for step in op.steps)
    if isinstance(op, ops.Fork):
        return (op.session_id, *op.new_ids)
    session_id = getattr(op, "session_id", None)
    return (session_id,) if isinstance(session_id, str) else ()


class Lanes:
    """Thread-safe inbox of `(call_id, op)` items: `put` from any thread, `get` from the serving thread."""

    def __init__(self, slow_after: int = SLOW_AFTER) -> None:
        self._slow_after = slow_after
        self._passed = 0
        """Steps served from the quick lane while the slow lane waited."""
        self._quick: deque[Item] = deque()
        self._slow: deque[Item] = deque()
        self._queued_slow: Counter[str] = Counter()
        """Per session: items waiting in the slow lane."""
        self._closed = False
        self._ready = threading.Condition()

    def put(self, item: Item) -> None:
        """Queue one operation in the lane its kind and its sessions' queued operations call for."""
        sessions = sessions_of(item[1])
        with self._ready:
            if isinstance(item[1], SLOW_OPS) or any(self._queued_slow[s] for s in sessions):
                self._slow.append(item)
                self._queued_slow.update(sessions)
            else:
                self._quick.append(item)
            self._ready.notify()

    def close(self) -> None:
        """No more items: `get` returns None once both lanes are empty."""
        with self._ready:
            self._closed = True
            self._ready.notify()

    def get(self) -> Item | None:
        """The next item (quick lane first, see `slow_after`), blocking; None once closed and empty."""
        with self._ready:
            while not (self._quick or self._slow or self._closed):
                self._ready.wait()
            if self._quick and not (self._slow and self._passed >= self._slow_after):
                item = self._quick.popleft()
                if self._slow:
                    self._passed += len(sessions_of(item[1])) or 1
                return item
            if not self._slow:
                return None
            self._passed = 0
            item = self._slow.popleft()
            self._queued_slow.subtract(sessions_of(item[1]))
            self._queued_slow += Counter()  # drop sessions whose count reached zero
            return item
