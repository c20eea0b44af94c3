"""`JvmTurns`: one turn at a time; when a step and a start both wait, the kind without the last turn goes."""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager

import pytest

from envhub.envs.scienceworld.turns import JvmTurns


def _until_waiting(turns: JvmTurns, count: int) -> None:
    while sum(turns.waiting) != count:
        threading.Event().wait(0.001)


@pytest.mark.parametrize(("holder", "first"), [("start", "step"), ("step", "start")])
def test_a_step_and_a_start_waiting_alternate(holder: str, first: str) -> None:
    turns, order = JvmTurns(), []
    holding, release = threading.Event(), threading.Event()

    def turn(kind: str) -> AbstractContextManager[None]:
        return turns.step() if kind == "step" else turns.start()

    def hold() -> None:
        with turn(holder):
            holding.set()
            release.wait()

    def take(kind: str) -> None:
        with turn(kind):
            order.append(kind)

    threads = [threading.Thread(target=hold)]
    threads[0].start()
    holding.wait()
    other = "start" if first == "step" else "step"
    for kind, waiting in ((other, 1), (first, 2)):  # the one that should go first waits last
        threads.append(threading.Thread(target=take, args=(kind,)))
        threads[-1].start()
        _until_waiting(turns, waiting)
    assert order == []  # both wait while the turn is held
    release.set()
    for thread in threads:
        thread.join()
    assert order == [first, other]
    assert turns.waiting == (0, 0)


def test_a_turn_is_given_back_when_its_call_raises() -> None:
    turns = JvmTurns()
    with pytest.raises(ValueError, match="the call failed"), turns.step():
        raise ValueError("the call failed")
    with turns.start():  # would wait forever if the failed turn were still held
        pass
