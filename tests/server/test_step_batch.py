"""StepBatch over a real server (the toy kind, two workers): per-step statuses, order, exactly-once, routing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from envhub.client import AsyncEnvhubClient, EnvhubClient, EnvhubError, EnvhubPool, RetryPolicy
from envhub.server.background import BackgroundServer
from envhub.server.service import MAX_BATCH_STEPS
from envhub.testing import REFERENCE
from envhub.v1 import envhub_pb2 as pb
from envhub.v1 import envhub_pb2_grpc as pb_grpc

TASK = "train-count/0"


@pytest.fixture(scope="module")
def server() -> Iterator[BackgroundServer]:
    with BackgroundServer.local(REFERENCE, workers=2, max_sessions=64) as s:
        yield s


@pytest.fixture(scope="module")
def client(server: BackgroundServer) -> Iterator[EnvhubClient]:
    with EnvhubClient(server.target) as c:
        yield c


def _sessions(client: EnvhubClient, count: int) -> list[str]:
    return [client.create_session("toy", TASK, max_steps=1000).session_id for _ in range(count)]


def test_a_batch_steps_sessions_on_every_worker_like_unary_steps(client: EnvhubClient) -> None:
    sessions = _sessions(client, 8)  # placed over both workers
    reference = _sessions(client, 1)[0]
    want = [client.step(reference, "inc") for _ in range(3)]
    for turn in range(3):
        results = client.step_many([(session_id, "inc") for session_id in sessions])
        assert [r.step_index for r in results] == [turn + 1] * 8
        assert [r.text.split(":")[-1] for r in results] == [want[turn].text.split(":")[-1]] * 8
    for session_id in (*sessions, reference):
        client.close_session(session_id)


def test_failed_steps_answer_in_their_place_and_the_batch_goes_on(client: EnvhubClient) -> None:
    sessions = _sessions(client, 3)
    closed = _sessions(client, 1)[0]
    client.close_session(closed)
    answers = client.step_many(
        [
            (sessions[0], "inc"),
            (closed, "inc"),
            (sessions[1], ""),
            (sessions[1], "x" * 5000),
            ("nosuch.x", "inc"),
            (sessions[2], "inc"),
            (sessions[2], "inc"),  # the same session twice: applied in request order
        ],
        return_errors=True,
    )
    reasons = [a.reason if isinstance(a, EnvhubError) else a.step_index for a in answers]
    assert reasons == [1, "SESSION_NOT_FOUND", "EMPTY_ACTION", "ACTION_TOO_LONG", "SESSION_NOT_FOUND", 1, 2]
    assert answers[1].code == grpc.StatusCode.NOT_FOUND
    with pytest.raises(EnvhubError) as caught:
        client.step_many([(sessions[0], "inc"), (sessions[0], "")])
    assert caught.value.reason == "EMPTY_ACTION"
    assert client.step(sessions[0], "inc").step_index == 3  # the good step of that batch ran
    for session_id in sessions:
        client.close_session(session_id)


def test_expected_step_index_and_request_ids_apply_per_step(server: BackgroundServer, client: EnvhubClient) -> None:
    first, second = _sessions(client, 2)
    steps = [
        pb.StepRequest(session_id=first, action="inc", request_id="a", expected_step_index=0),
        pb.StepRequest(session_id=second, action="inc", request_id="b", expected_step_index=5),
    ]
    with grpc.insecure_channel(server.target) as channel:
        stub = pb_grpc.EnvHubStub(channel)
        for _ in range(3):  # the same batch resent: step "a" is answered from memory, not applied again
            answer = stub.StepBatch(pb.StepBatchRequest(steps=steps))
            assert answer.results[0].result.observation.step_index == 1
            assert answer.results[1].error.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
        too_many = pb.StepBatchRequest(steps=[steps[0]] * (MAX_BATCH_STEPS + 1))
        with pytest.raises(grpc.RpcError) as caught:
            stub.StepBatch(too_many)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert client.step(first, "inc").step_index == 2
    for session_id in (first, second):
        client.close_session(session_id)


class _LostReply(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.DEADLINE_EXCEEDED

    def details(self) -> str:
        return "the reply was lost (injected)"

    def trailing_metadata(self) -> None:
        return None


class LoseEveryOtherBatchReply(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Lets each StepBatch reach the server, then drops the reply of every first attempt."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self.lost = 0

    def intercept_unary_unary(
        self, continuation: Callable[[Any, Any], Any], details: grpc.ClientCallDetails, request: Any
    ) -> Any:
        outcome = continuation(details, request)
        if not details.method.endswith("/StepBatch") or request.steps[0].request_id in self._seen:
            return outcome
        self._seen.add(request.steps[0].request_id)
        outcome.result()  # the server has applied the batch
        self.lost += 1
        raise _LostReply()


def test_a_batch_whose_reply_is_lost_is_resent_and_applied_once(server: BackgroundServer) -> None:
    losing = LoseEveryOtherBatchReply()
    with EnvhubClient(server.target, policy=RetryPolicy(attempts=3, base_s=0.0), interceptors=[losing]) as client:
        sessions = _sessions(client, 6)
        for turn in range(5):
            results = client.step_many([(session_id, "inc") for session_id in sessions])
            assert [r.step_index for r in results] == [turn + 1] * 6
        assert losing.lost == 5
        for session_id in sessions:
            client.close_session(session_id)


def test_the_pool_and_the_asyncio_client_route_batches(server: BackgroundServer, client: EnvhubClient) -> None:
    sessions = _sessions(client, 4)
    with BackgroundServer.local(REFERENCE) as other, EnvhubPool([server.target, other.target]) as pool:
        elsewhere = [pool.create_session("toy", TASK).session_id for _ in range(4)]
        mixed = [s for pair in zip(sessions, elsewhere, strict=True) for s in pair] + ["gone.1"]
        answers = pool.step_many([(session_id, "inc") for session_id in mixed], return_errors=True)
        assert [a.step_index for a in answers[:-1]] == [1] * 8
        assert isinstance(answers[-1], EnvhubError) and answers[-1].reason == "UNKNOWN_REPLICA"

    async def scenario() -> list[Any]:
        async with AsyncEnvhubClient(server.target) as aio:
            return list(await aio.step_many([(session_id, "inc") for session_id in sessions]))

    assert [r.step_index for r in asyncio.run(scenario())] == [2] * 4
    for session_id in sessions:
        client.close_session(session_id)
