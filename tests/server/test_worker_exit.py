"""How a worker process ends: on a Stop it closes every session and then its kind; when its server goes away
without one (the server killed: its end of the pipe closes) it closes only its kind (what lives outside the
process, e.g. ScienceWorld's JVM) and exits at once, so a machine whose other replicas take the sessions over
does not also pay for tearing them down (design note 035)."""

from __future__ import annotations

import multiprocessing
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

import pytest

from envhub.server import worker_ops as ops
from envhub.server.worker_process import worker_main
from envhub.testing import REFERENCE

SESSIONS = 3


def _worker_with_sessions(closes: Path, concurrent_starts: bool) -> tuple[BaseProcess, Connection]:
    """A worker process of the toy kind (its closes recorded in `closes`) holding `SESSIONS` sessions, and the
    server's end of its pipe."""
    context = multiprocessing.get_context("spawn")
    server_end, worker_end = context.Pipe()
    config = {"closes": str(closes), "concurrent_starts": "1" if concurrent_starts else "0"}
    process = context.Process(target=worker_main, args=(REFERENCE, config, worker_end), daemon=True)
    process.start()
    worker_end.close()
    assert server_end.recv().error is None, "the worker announced its catalog"
    for index in range(SESSIONS):
        server_end.send((index, ops.Create(f"r.{index}", "train-count/0", 0, {}, 20, False)))
        call_id, reply = server_end.recv()
        assert (call_id, reply.error) == (index, None)
    return process, server_end


@pytest.mark.parametrize("concurrent_starts", [False, True], ids=["inline starts", "start thread"])
def test_a_stopped_worker_closes_every_session_then_its_kind(tmp_path: Path, concurrent_starts: bool) -> None:
    closes = tmp_path / "closes"
    process, server_end = _worker_with_sessions(closes, concurrent_starts)
    server_end.send((SESSIONS, ops.Stop()))
    process.join(timeout=30)
    assert process.exitcode == 0
    assert closes.read_text().split() == ["session"] * SESSIONS + ["kind"]


@pytest.mark.parametrize("concurrent_starts", [False, True], ids=["inline starts", "start thread"])
def test_a_worker_whose_server_went_away_closes_its_kind_only(tmp_path: Path, concurrent_starts: bool) -> None:
    closes = tmp_path / "closes"
    process, server_end = _worker_with_sessions(closes, concurrent_starts)
    server_end.close()  # what the worker sees of its server's death
    process.join(timeout=30)
    assert process.exitcode == 0
    assert closes.read_text().split() == ["kind"]
