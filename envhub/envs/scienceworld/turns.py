"""`JvmTurns`: one simulator call at a time in a JVM, steps and starts taking turns.

Scala's global `scala.util.Random` and the object-id counter `util.UniqueIdentifier` are process-global
in the JVM (`envhub.envs.scienceworld.jvm`): every simulator call sets them and may draw from or advance
them (a load sets the counter back to 0), so two calls running at once, from two threads, would mix two
episodes' draws and ids. Each such call therefore runs in a turn, one turn at a time. A worker applies
starts (create, reset, restore, fork) on a thread of their own (design notes 031 and 034): a start takes
a turn per simulator call (the load, then each replayed action), and when a step and a start both wait,
the turn goes to the kind that did not have the last one. So a step waits for at most one call of a
start, never for the whole start (a fork of seven copies is seven loads), and steps arriving back to
back do not starve starts (strict priority for steps did: design note 008).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class JvmTurns:
    """Mutual exclusion over a JVM's global simulator state, steps and starts alternating when both wait.

    Not re-entrant."""

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._held = False
        self._waiting = {True: 0, False: 0}
        """Turns waited for, by whether they are steps'."""
        self._last_was_step: bool | None = None

    @contextmanager
    def step(self) -> Iterator[None]:
        """A turn for a step's calls (a step, admissible or expert actions, a close)."""
        with self._turn(step=True):
            yield

    @contextmanager
    def start(self) -> Iterator[None]:
        """A turn for one call of a start (a new simulator, a load, a replayed action)."""
        with self._turn(step=False):
            yield

    @property
    def waiting(self) -> tuple[int, int]:
        """Steps and starts waiting for a turn now (for tests)."""
        return self._waiting[True], self._waiting[False]

    @contextmanager
    def _turn(self, step: bool) -> Iterator[None]:
        with self._changed:
            self._waiting[step] += 1
            try:
                self._changed.wait_for(lambda: not self._held and not self._yields(step))
            finally:
                self._waiting[step] -= 1
            self._held = True
        try:
            yield
        finally:
            with self._changed:
                self._held = False
                self._last_was_step = step
                self._changed.notify_all()

    def _yields(self, step: bool) -> bool:
        """Whether a turn of this kind waits for the other kind's: it had the last turn and the other waits."""
        return self._last_was_step is step and self._waiting[not step] > 0
