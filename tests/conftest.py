"""The test process's exit: decided by the session, not by the interpreter's teardown.

One process hosts torch (OpenMP, gloo), gRPC's C core, Ray's and py4j's clients for the whole session; finalizing
the interpreter after the last test destroys their native objects while their own threads may still run, which
crashed a CI run that had passed every test (`make: *** test Segmentation fault`, 1087 passed). The session's exit
status is recorded when it finishes; at interpreter exit, after every Python-level exit handler registered since the
session started (Ray's, py4j's, torch's), the process leaves with that status without the native teardown.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys

import pytest

_session_status: list[int] = []


def _leave_with_the_session_status() -> None:
    if not _session_status:  # the session never finished (an internal error): the interpreter's own exit
        return
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_session_status[0])


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    atexit.register(_leave_with_the_session_status)  # runs after the handlers registered later (LIFO)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _session_status[:] = [int(exitstatus)]
