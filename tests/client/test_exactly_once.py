"""Steps whose replies are lost are retried and applied once; the gym adapter's task option; against the toy kind."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from envhub.client import EnvhubClient, EnvhubError, RetryPolicy, TaskRef
from envhub.gym import EnvhubGymEnv
from envhub.server.background import BackgroundServer
from envhub.testing import REFERENCE
from envhub.v1 import envhub_pb2 as pb
from envhub.v1 import envhub_pb2_grpc as pb_grpc

STEPS = 200


@pytest.fixture(scope="module")
def server() -> Iterator[BackgroundServer]:
    with BackgroundServer.local(REFERENCE) as s:
        yield s


class _LostReply(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    """What a client sees when a call's deadline passes after the server applied it."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.DEADLINE_EXCEEDED

    def details(self) -> str:
        return "the reply was lost (injected)"

    def trailing_metadata(self) -> None:
        return None


class LoseFirstReplies(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Lets each Step reach the server, then drops the reply of a random half of first attempts."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)
        self._seen: set[str] = set()
        self.lost = 0

    def intercept_unary_unary(
        self, continuation: Callable[[Any, Any], Any], details: grpc.ClientCallDetails, request: Any
    ) -> Any:
        outcome = continuation(details, request)
        if not details.method.endswith("/Step") or request.request_id in self._seen:
            return outcome
        self._seen.add(request.request_id)
        outcome.result()  # the server has answered: the step was applied
        if self._random.random() < 0.5:
            self.lost += 1
            raise _LostReply()
        return outcome


def test_a_step_whose_reply_is_lost_is_retried_and_applied_once(server: BackgroundServer) -> None:
    losing = LoseFirstReplies(seed=7)
    policy = RetryPolicy(attempts=3, base_s=0.0)
    with EnvhubClient(server.target, policy=policy, interceptors=[losing]) as client:
        start = client.create_session("toy", "train-count/0", max_steps=10 * STEPS)
        for index in range(STEPS):
            result = client.step(start.session_id, "inc")
            assert result.step_index == index + 1  # each step applied exactly once
        assert result.text == f"train-count/0 seed 0: {STEPS}"
        assert losing.lost > STEPS // 4  # the retries really happened
        client.close_session(start.session_id)


def test_without_a_request_id_a_resent_step_is_applied_twice(server: BackgroundServer) -> None:
    """The control: what the request_id prevents."""
    with grpc.insecure_channel(server.target) as channel:
        stub = pb_grpc.EnvHubStub(channel)
        task = pb.TaskSelector(task_id="train-count/0")
        session = stub.CreateSession(pb.CreateSessionRequest(environment="toy", task=task), timeout=30).session_id
        request = pb.StepRequest(session_id=session, action="inc")
        stub.Step(request, timeout=30)
        assert stub.Step(request, timeout=30).result.observation.step_index == 2


def test_expected_step_index_from_the_client(server: BackgroundServer) -> None:
    with EnvhubClient(server.target) as client:
        start = client.create_session("toy", TaskRef(split="test", index=1))
        assert start.task.task_id == "test-count/1"
        client.step(start.session_id, "inc", expected_step_index=0)
        with pytest.raises(EnvhubError) as caught:
            client.step(start.session_id, "inc", expected_step_index=0)
        assert caught.value.reason == "STEP_INDEX_MISMATCH" and caught.value.metadata == {"step_index": "1"}
        client.close_session(start.session_id)


def test_gym_reset_task_option_switches_the_task(server: BackgroundServer) -> None:
    with EnvhubClient(server.target) as client:
        env = EnvhubGymEnv(client, "toy", "train-count/0")
        observation, info = env.reset(seed=3)
        assert (observation, info["task_id"]) == ("train-count/0 seed 3: 0", "train-count/0")
        env.step("inc")
        observation, info = env.reset(seed=3, options={"task": TaskRef(split="test", index=2)})
        assert (observation, info["task_id"]) == ("test-count/2 seed 3: 0", "test-count/2")
        assert env.reset(seed=4)[1]["task_id"] == "test-count/2"  # kept for later resets
        with pytest.raises(ValueError, match="unknown reset option"):
            env.reset(options={"difficulty": "hard"})
        env.close()
