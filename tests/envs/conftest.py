"""Fixtures shared by the environments' tests."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest


@contextmanager
def _starts_beside(start: Callable[[int], None]) -> Iterator[list[Exception]]:
    """Calls `start(turn)` for turn 0, 1, ... on a second thread until the block ends, at the interpreter switch
    interval a worker with a start thread sets; yields the list its exceptions are put in."""
    stop, failures = threading.Event(), list[Exception]()

    def start_sessions() -> None:
        turn = 0
        while not stop.is_set():
            try:
                start(turn)
            except Exception as error:
                failures.append(error)
            turn += 1

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.001)  # as a worker with a start thread runs (envhub.server.worker_process)
    starter = threading.Thread(target=start_sessions)
    starter.start()
    try:
        yield failures
    finally:
        stop.set()
        starter.join()
        sys.setswitchinterval(interval)


@pytest.fixture
def starts_beside() -> Callable[[Callable[[int], None]], AbstractContextManager[list[Exception]]]:
    """`with starts_beside(start) as failures:` runs session starts on another thread while the block plays."""
    return _starts_beside
