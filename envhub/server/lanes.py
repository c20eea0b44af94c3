"""A worker's inbox with two lanes, so that steps do not wait behind session starts.

Creating, resetting, restoring or forking a session costs tens to hundreds of milliseconds (a
game or simulator loads); a step costs about one. In one first-in-first-out inbox, every step that
arrives behind a few of those waits for all of them: the p99 step latency under session churn is
then many times its median. `Lanes` keeps the slow operations in their own lane.

Served by one thread (`get`), the quick lane goes first, so a step waits for at most the one slow
operation already running; so that a steady stream of steps cannot starve session starts, the
oldest slow operation goes next once `slow_after` steps were served while it waited. A quick
operation that finds both lanes empty and nothing being applied is applied by the reading thread
itself (`take_now`), with no hand-off to the serving thread (two thread switches per step, a third
of a trivial step's worker CPU; design note 025); the serving thread takes nothing meanwhile.

With a start thread (a kind with `EnvironmentKind.concurrent_starts`; design note 031), only the
slow lane is used (`put_slow`, `get_slow`): the reading thread applies every quick operation itself
as it arrives, before it reads the next, so a step waits for no session start at all, only for its
share of the interpreter.

Order per session is kept either way: an operation that concerns a session with a slow operation
queued or being applied goes into the slow lane behind it (a Step never overtakes the Reset of its
own session); `done(item)` says an item taken was applied. Across sessions, a quick operation may
overtake a slow one that arrived earlier.
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


def _forget(counts: Counter[str], sessions: tuple[str, ...]) -> None:
    counts.subtract(sessions)
    for session_id in sessions:
        if counts[session_id] <= 0:
            del counts[session_id]


class Lanes:
    """Thread-safe inbox of `(call_id, op)` items: `put` (or `put_slow`) from any thread; `get` (or `get_slow`)
    from one serving thread; `done` once each item taken was applied."""

    def __init__(self, slow_after: int = SLOW_AFTER) -> None:
        self._slow_after = slow_after
        self._passed = 0
        """Steps served from the quick lane while the slow lane waited."""
        self._quick: deque[Item] = deque()
        self._slow: deque[Item] = deque()
        self._slow_calls: set[int] = set()
        """Call ids of the items put in the slow lane, until done."""
        self._unfinished_slow: Counter[str] = Counter()
        """Per session: slow-lane items queued or being applied."""
        self._closed = False
        self._taken = 0
        """Items taken (`get`, `get_slow`, `take_now`) and not `done` yet."""
        self._inline = False
        """The reading thread applies an item it took with `take_now`: `get` waits for its `done`."""
        self._ready = threading.Condition()

    def put(self, item: Item) -> None:
        """Queue one operation in the lane its kind and its sessions' unfinished operations call for."""
        with self._ready:
            if not self._put_slow(item):
                self._quick.append(item)
                self._ready.notify_all()

    def put_slow(self, item: Item) -> bool:
        """Queue `item` in the slow lane if it is slow or one of its sessions has a slow item unfinished; False
        (nothing queued) if the caller may apply it at once."""
        with self._ready:
            return self._put_slow(item)

    def _put_slow(self, item: Item) -> bool:
        sessions = sessions_of(item[1])
        if not (isinstance(item[1], SLOW_OPS) or any(self._unfinished_slow[s] for s in sessions)):
            return False
        self._slow.append(item)
        self._slow_calls.add(item[0])
        self._unfinished_slow.update(sessions)
        self._ready.notify_all()
        return True

    def take_now(self, item: Item) -> bool:
        """Whether the reading thread may apply quick `item` itself now: both lanes are empty and nothing is being
        applied (so it keeps arrival order). If so, `get` gives nothing until `done(item)`. Not with a start thread
        (which applies slow items beside the quick ones)."""
        with self._ready:
            if self._taken or self._quick or self._slow or self._closed or isinstance(item[1], SLOW_OPS):
                return False
            self._taken, self._inline = 1, True
            return True

    def done(self, item: Item) -> None:
        """`item` (taken with `get`, `get_slow` or `take_now`) was applied: operations of its sessions may now be
        taken past it."""
        with self._ready:
            self._taken = max(0, self._taken - 1)
            if self._inline:
                self._inline = False
                if self._quick or self._slow or self._closed:  # else no getter has anything to wake for
                    self._ready.notify_all()
            if item[0] in self._slow_calls:
                self._slow_calls.discard(item[0])
                _forget(self._unfinished_slow, sessions_of(item[1]))

    def close(self) -> None:
        """No more items: the getters return None once their lanes are empty."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()

    def get(self) -> Item | None:
        """The next item of either lane (quick lane first, see `slow_after`), blocking; None once closed and empty.

        For one serving thread only: a slow item's sessions may still have quick items being applied elsewhere.
        """
        with self._ready:
            while self._inline or not (self._quick or self._slow or self._closed):
                self._ready.wait()
            if self._quick and not (self._slow and self._passed >= self._slow_after):
                item = self._quick.popleft()
                if self._slow:
                    self._passed += len(sessions_of(item[1])) or 1
            elif not self._slow:
                return None
            else:
                self._passed = 0
                item = self._slow.popleft()
            self._taken += 1
            return item

    def get_slow(self) -> Item | None:
        """The oldest slow item, blocking; None once closed and the slow lane is empty (the start thread)."""
        with self._ready:
            while not (self._slow or self._closed):
                self._ready.wait()
            if not self._slow:
                return None
            self._taken += 1
            return self._slow.popleft()
