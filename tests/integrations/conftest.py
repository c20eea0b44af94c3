"""One real envhub ALFWorld server (a child process on a free loopback port) for every adapter test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from trainer.rollout.local_server import LocalServer


@pytest.fixture(scope="session")
def alfworld_target() -> Iterator[str]:
    pytest.importorskip("alfworld")
    with LocalServer("alfworld") as server:
        yield server.address
