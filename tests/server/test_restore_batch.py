"""RestoreSnapshotBatch over real servers (the toy kind): per-restore statuses in order, restores like the
unary call, the batch cap; a pool places a batch over its replicas and moves a failed replica's share."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message

from envhub.bench.procs import ServerProcess
from envhub.client import AsyncEnvhubClient, EnvhubClient, EnvhubError, EnvhubPool, SessionStart, calls, recovery
from envhub.server.background import BackgroundServer
from envhub.server.service import MAX_BATCH_STEPS
from envhub.testing import REFERENCE
from envhub.v1 import envhub_pb2 as pb
from envhub.v1 import envhub_pb2_grpc as pb_grpc

KEY = "restore-batch-test-key-shared-by-every-replica"


@pytest.fixture(scope="module")
def server() -> Iterator[BackgroundServer]:
    with BackgroundServer.local(REFERENCE, workers=2, max_sessions=64) as s:
        yield s


def _counted(client: EnvhubClient, task: str, steps: int) -> str:
    session = client.create_session("toy", task, max_steps=1000).session_id
    for _ in range(steps):
        client.step(session, "inc")
    return session


def test_a_batch_restores_like_unary_restores_and_answers_each_failure_in_its_place(server: BackgroundServer) -> None:
    with EnvhubClient(server.target) as client:
        sources = [_counted(client, f"train-count/{index}", index) for index in range(3)]
        snapshots = [client.snapshot(session) for session in sources]
        answers = client.restore_many(
            [snapshots[0], b"\xff\x00garbage", snapshots[1], b"", snapshots[2]], return_errors=True
        )
        reasons = [answer.reason if isinstance(answer, EnvhubError) else answer.view.step_index for answer in answers]
        assert reasons == [0, "SNAPSHOT_MALFORMED", 1, "SNAPSHOT_MALFORMED", 2]
        restored = [answer for answer in answers if isinstance(answer, SessionStart)]
        assert [start.view for start in restored] == [client.restore(s).view for s in snapshots]
        for source, start in zip(sources, restored, strict=True):  # each continues like its source
            assert client.step(start.session_id, "inc") == client.step(source, "inc")
        with pytest.raises(EnvhubError) as caught:  # without return_errors: every restore ran, the first failure raised
            client.restore_many([snapshots[0], b"", snapshots[1]])
        assert caught.value.reason == "SNAPSHOT_MALFORMED"

        async def through_asyncio() -> list[int]:
            async with AsyncEnvhubClient(server.target) as aio:
                return [start.view.step_index for start in await aio.restore_many(snapshots)]

        assert asyncio.run(through_asyncio()) == [0, 1, 2]
        with grpc.insecure_channel(server.target) as channel:
            too_many = pb.RestoreSnapshotBatchRequest(
                restores=[pb.RestoreSnapshotRequest(snapshot=b"")] * (MAX_BATCH_STEPS + 1)
            )
            with pytest.raises(grpc.RpcError) as refused:
                pb_grpc.EnvHubStub(channel).RestoreSnapshotBatch(too_many, timeout=30)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "BATCH_TOO_LARGE" in str(refused.value.trailing_metadata())


def test_a_move_restores_in_batches_of_at_most_batch_bytes_or_one_call_each(server: BackgroundServer) -> None:
    with EnvhubClient(server.target) as client:
        sources = [_counted(client, f"train-count/{index % 4}", index) for index in range(5)]
        snapshots = [client.snapshot(session) for session in sources]
        sent: collections.Counter[str] = collections.Counter()

        def send(call: calls.Call[Any]) -> Message:
            sent[call.method] += 1
            return client.transport.send(call)

        per_call = 2 * max(len(snapshot.data) for snapshot in snapshots)  # two snapshots per batch
        for batch_bytes, expected in ((per_call, {"RestoreSnapshotBatch": 3}), (0, {"RestoreSnapshot": 5})):
            sent.clear()
            starts = recovery.restore_all(send, snapshots, concurrency=2, batch_bytes=batch_bytes)
            assert sent == expected
            assert [start.view.step_index for start in starts if isinstance(start, SessionStart)] == list(range(5))


@contextlib.contextmanager
def _replicas(count: int) -> Iterator[list[ServerProcess]]:
    os.environ["ENVHUB_SNAPSHOT_KEY"] = KEY
    try:
        with contextlib.ExitStack() as stack:
            yield [stack.enter_context(ServerProcess(REFERENCE, workers=1)) for _ in range(count)]
    finally:
        del os.environ["ENVHUB_SNAPSHOT_KEY"]


def test_a_pool_spreads_a_restore_batch_and_moves_a_killed_replicas_share() -> None:
    with _replicas(2) as servers, EnvhubPool([server.target for server in servers]) as pool:
        sources = [_counted(pool, f"train-count/{index % 4}", 1) for index in range(4)]
        snapshots = [pool.snapshot(session) for session in sources] * 2
        starts = pool.restore_many(snapshots)
        owners = [start.session_id.split(".", 1)[0] for start in starts]
        assert sorted(owners.count(replica) for replica in pool.replicas) == [4, 4], "placed by load, on both replicas"
        killed = servers[0]
        gone = {t.target: name for name, t in pool.pool.replicas.items()}[killed.target]
        killed.process.kill()
        killed.process.wait(timeout=60)
        again = pool.restore_many(snapshots)  # the share placed on the dead replica goes to the other one
        assert {start.session_id.split(".", 1)[0] for start in again} == set(pool.replicas) - {gone}
        assert pool.pool.retired == {gone}
        assert [start.view for start in again] == [start.view for start in starts]
