"""Sessions lost with their worker answer UNAVAILABLE (SESSION_LOST) on every call for a bounded time,
so a client holding a snapshot knows to restore them (a mistyped id still answers NOT_FOUND)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator

import grpc
import pytest

from envhub.client import AsyncEnvhubClient, EnvhubClient, EnvhubError
from envhub.client.retry import NO_RETRY
from envhub.server.background import BackgroundServer
from envhub.server.sessions import LOST_PER_SESSION, SessionTable
from envhub.server.tenants import DEFAULT, Tenant
from envhub.server.worker_handle import Worker
from envhub.testing import REFERENCE

TASK = "train-count/0"


@pytest.fixture()
def server() -> Iterator[BackgroundServer]:
    with BackgroundServer.local(REFERENCE, workers=2) as s:
        yield s


def _on_worker(server: BackgroundServer, client: EnvhubClient, index: int) -> str:
    """A new session placed on worker `index` (placement takes the least-loaded worker)."""
    while True:
        session_id = client.create_session("toy", task=TASK).session_id
        if session_id in server.server.pool.workers()[index].sessions:
            return session_id


def _reason(call: object) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(EnvhubError) as caught:
        call()  # type: ignore[operator]
    return caught.value.code, caught.value.reason


def test_every_call_on_a_lost_session_answers_session_lost(server: BackgroundServer) -> None:
    lost_code = (grpc.StatusCode.UNAVAILABLE, "SESSION_LOST")
    with EnvhubClient(server.target, policy=NO_RETRY) as client:
        doomed, bystander = _on_worker(server, client, 0), _on_worker(server, client, 1)
        client.step(doomed, "inc")
        pid = server.server.pool.workers()[0].pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        # the first call may be the one in flight when the death is noticed (WORKER_LOST)
        assert _reason(lambda: client.step(doomed, "inc")) in (lost_code, (grpc.StatusCode.UNAVAILABLE, "WORKER_LOST"))
        assert _reason(lambda: client.step(doomed, "inc")) == lost_code
        assert _reason(lambda: client.reset_session(doomed)) == lost_code
        assert _reason(lambda: client.expert_actions(doomed)) == lost_code
        assert _reason(lambda: client.snapshot(doomed)) == lost_code
        assert _reason(lambda: client.fork(doomed, 2)) == lost_code
        [lost_step, good_step] = client.step_many([(doomed, "inc"), (bystander, "inc")], return_errors=True)
        assert isinstance(lost_step, EnvhubError) and (lost_step.code, lost_step.reason) == lost_code
        assert not isinstance(good_step, EnvhubError) and good_step.step_index == 1
        assert _reason(lambda: client.step(f"{server.replica_id}.0000", "inc")) == (
            grpc.StatusCode.NOT_FOUND,
            "SESSION_NOT_FOUND",
        )

        async def on_a_stream() -> tuple[grpc.StatusCode, str]:
            async with AsyncEnvhubClient(server.target, policy=NO_RETRY) as aio, aio.stream() as stream:
                try:
                    await stream.step(doomed, "inc")
                except EnvhubError as error:
                    return error.code, error.reason
            raise AssertionError("a step of a lost session went through")

        assert asyncio.run(on_a_stream()) == lost_code
        client.close_session(doomed)  # acknowledged: the tombstone goes, then it is unknown like any closed id
        assert _reason(lambda: client.step(doomed, "inc")) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")
        assert client.step(bystander, "inc").step_index == 2
        client.close_session(bystander)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _dead_worker_with(table: SessionTable, count: int) -> tuple[Worker, list[str]]:
    worker = Worker("toy", 0, lambda _: None)
    ids = table.new_ids(count, Tenant(DEFAULT))
    for session_id in ids:
        table.add(session_id, "toy", worker, DEFAULT)
    table.drop_worker(worker)
    return worker, ids


def test_tombstones_expire_after_their_ttl_and_beyond_their_count() -> None:
    clock = _Clock()
    table = SessionTable("r1", max_sessions=2, lost_ttl_s=10.0, clock=clock)
    _, first = _dead_worker_with(table, 2)
    clock.now = 9.0
    assert all(table.lost(session_id, DEFAULT) for session_id in first) and len(table) == 0
    assert not table.lost(first[0], "another-tenant")
    with pytest.raises(EnvhubError) as caught:
        table.get(first[0], DEFAULT)
    assert (caught.value.code, caught.value.reason) == (grpc.StatusCode.UNAVAILABLE, "SESSION_LOST")
    clock.now = 10.0
    assert not any(table.lost(session_id, DEFAULT) for session_id in first)
    with pytest.raises(EnvhubError) as caught:
        table.get(first[0], DEFAULT)
    assert caught.value.reason == "SESSION_NOT_FOUND"
    lost = [session_id for _ in range(LOST_PER_SESSION + 1) for session_id in _dead_worker_with(table, 2)[1]]
    assert [table.lost(session_id, DEFAULT) for session_id in lost] == [False] * 2 + [True] * (2 * LOST_PER_SESSION)
