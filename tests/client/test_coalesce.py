"""`AsyncEnvhubClient.coalesced()`: one loop turn's independent steps as one StepBatch, each answered as its
unary Step would be, against a real toy server on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message

from envhub.client import AsyncEnvhubClient, EnvhubError, RetryPolicy
from envhub.client.calls import Call
from envhub.client.coalesce import CoalescingTransport
from envhub.client.transport import AsyncTransport
from envhub.core.status import to_rpc_status
from envhub.server.background import BackgroundServer
from envhub.testing import REFERENCE
from envhub.v1 import envhub_pb2 as pb

TASK = "train-count/0"


@pytest.fixture(scope="module")
def server() -> Iterator[BackgroundServer]:
    with BackgroundServer.local(REFERENCE, max_sessions=64) as s:
        yield s


class Recording:
    """A real transport that records the RPCs sent through it and, for the first `lose` StepBatch calls,
    turns the first entry's answer into DEADLINE_EXCEEDED after the server applied it (a lost answer)."""

    def __init__(self, inner: AsyncTransport, lose: int = 0) -> None:
        self.inner, self.lose, self.methods = inner, lose, list[str]()
        self.batches: list[list[str]] = []
        """The session of each step of each StepBatch sent."""

    async def send(self, call: Call[Any]) -> Message:
        self.methods.append(call.method)
        if isinstance(call.request, pb.StepBatchRequest):
            self.batches.append([step.session_id for step in call.request.steps])
        response = await self.inner.send(call)
        if isinstance(response, pb.StepBatchResponse) and self.lose > 0:
            self.lose -= 1
            lost = EnvhubError(grpc.StatusCode.DEADLINE_EXCEEDED, "the answer was lost (injected)", "DEADLINE_EXCEEDED")
            response.results[0].error.CopyFrom(to_rpc_status(lost))
        return response

    async def open(self) -> None:
        await self.inner.open()

    async def aclose(self, cancel: bool = False) -> None:
        await self.inner.aclose(cancel)


async def _sessions(client: AsyncEnvhubClient, count: int) -> list[str]:
    starts = await asyncio.gather(*(client.create_session("toy", TASK, seed=n, max_steps=100) for n in range(count)))
    return [start.session_id for start in starts]


def test_one_turns_steps_go_as_one_batch_and_answer_as_unary_steps(server: BackgroundServer) -> None:
    async def scenario() -> None:
        async with AsyncEnvhubClient(server.target) as client:
            recording = Recording(client.transport)
            async with AsyncEnvhubClient(CoalescingTransport(recording)) as coalesced:
                ids = await _sessions(client, 8)
                for _ in range(3):
                    got = await asyncio.gather(*(coalesced.step(session_id, "inc") for session_id in ids))
                plain = await _sessions(client, 8)
                for _ in range(3):
                    want = [await client.step(session_id, "inc") for session_id in plain]
                assert [(v.text, v.step_index, v.reward) for v in got] == [
                    (w.text, w.step_index, w.reward) for w in want
                ]
                assert [view.session_id for view in got] == ids
                assert recording.methods == ["StepBatch"] * 3  # 24 steps, three calls
                assert await coalesced.list_environments() == await client.list_environments()  # passed through

    asyncio.run(scenario())


def test_steps_of_one_session_in_one_turn_apply_in_order(server: BackgroundServer) -> None:
    async def scenario() -> None:
        async with AsyncEnvhubClient(server.target) as client, client.coalesced() as coalesced:
            [session_id] = await _sessions(client, 1)
            views = await asyncio.gather(*(coalesced.step(session_id, "inc") for _ in range(5)))
            assert [view.step_index for view in views] == [1, 2, 3, 4, 5]

    asyncio.run(scenario())


def test_an_entrys_error_reaches_only_its_caller_as_the_unary_error(server: BackgroundServer) -> None:
    async def scenario() -> None:
        async with AsyncEnvhubClient(server.target) as client, client.coalesced() as coalesced:
            [good, other] = await _sessions(client, 2)
            bad = [("nosuch.x", "inc"), (other, ""), (other, "x" * 5000)]
            unary = await asyncio.gather(*(client.step(s, a) for s, a in bad), return_exceptions=True)
            got = await asyncio.gather(
                coalesced.step(good, "inc"), *(coalesced.step(s, a) for s, a in bad), return_exceptions=True
            )
            assert not isinstance(got[0], BaseException) and got[0].step_index == 1
            for mine, theirs in zip(got[1:], unary, strict=True):
                assert isinstance(mine, EnvhubError) and isinstance(theirs, EnvhubError)
                assert (mine.code, mine.reason) == (theirs.code, theirs.reason)
            assert (await client.step(other, "inc")).step_index == 1  # the failed steps were not applied

    asyncio.run(scenario())


def test_an_entry_whose_answer_was_lost_is_resent_alone_and_applied_once(server: BackgroundServer) -> None:
    async def scenario() -> None:
        async with AsyncEnvhubClient(server.target) as client:
            recording = Recording(client.transport, lose=2)
            policy = RetryPolicy(attempts=3, base_s=0.0)
            async with AsyncEnvhubClient(CoalescingTransport(recording, policy)) as coalesced:
                ids = await _sessions(client, 4)
                for index in range(3):
                    views = await asyncio.gather(*(coalesced.step(session_id, "inc") for session_id in ids))
                    assert [view.step_index for view in views] == [index + 1] * 4  # each applied exactly once
            assert recording.methods == ["StepBatch", "Step", "StepBatch", "Step", "StepBatch"]

    asyncio.run(scenario())


def test_a_cancelled_callers_step_is_not_sent(server: BackgroundServer) -> None:
    async def scenario() -> None:
        async with AsyncEnvhubClient(server.target) as client:
            recording = Recording(client.transport)
            async with AsyncEnvhubClient(CoalescingTransport(recording)) as coalesced:
                [session_id] = await _sessions(client, 1)
                waiting = asyncio.ensure_future(coalesced.step(session_id, "inc"))
                await asyncio.sleep(0)  # the step is queued for the next turn
                waiting.cancel()
                await asyncio.sleep(0.05)
            assert recording.methods == []
            assert (await client.step(session_id, "inc")).step_index == 1

    asyncio.run(scenario())


def test_closing_sends_the_waiting_steps_and_waits_for_their_answers(server: BackgroundServer) -> None:
    async def scenario() -> None:
        async with AsyncEnvhubClient(server.target) as client:
            [session_id] = await _sessions(client, 1)
            coalesced = client.coalesced()
            waiting = asyncio.ensure_future(coalesced.step(session_id, "inc"))
            await asyncio.sleep(0)  # queued, not sent yet
            await coalesced.close()
            assert waiting.done() and waiting.result().step_index == 1
            dropped = asyncio.ensure_future(coalesced.step(session_id, "inc"))
            await asyncio.sleep(0)
            await coalesced.close(cancel=True)
            with pytest.raises(asyncio.CancelledError):
                await dropped
            assert (await client.step(session_id, "inc")).step_index == 2  # the dropped step was never sent

    asyncio.run(scenario())


def test_with_depth_two_a_turns_steps_go_as_two_batches_in_flight_and_stay_so(server: BackgroundServer) -> None:
    async def scenario() -> tuple[str, list[list[str]]]:
        async with AsyncEnvhubClient(server.target) as client:
            recording = Recording(client.transport)
            async with AsyncEnvhubClient(CoalescingTransport(recording, depth=2)) as coalesced:
                ids = await _sessions(client, 8)
                one = ids[0]  # three steps of one session in one turn: they stay in one batch, applied in order
                views = await asyncio.gather(*(coalesced.step(session_id, "inc") for session_id in [one, *ids, one]))
                assert [view.step_index for view in views] == [1, 2, 1, 1, 1, 1, 1, 1, 1, 3]

                async def play(session_id: str) -> list[int]:
                    return [(await coalesced.step(session_id, "inc")).step_index for _ in range(6)]

                played = await asyncio.gather(*(play(session_id) for session_id in ids))
                assert played == [[4, 5, 6, 7, 8, 9]] + [[2, 3, 4, 5, 6, 7]] * 7
                return one, recording.batches

    one, batches = asyncio.run(scenario())
    assert [batch.count(one) for batch in batches[:2]] == [3, 0] and [len(batch) for batch in batches[:2]] == [6, 4]
    assert [len(batch) for batch in batches[2:]] == [4] * 12  # halves of the 8 sessions in flight, never smaller
