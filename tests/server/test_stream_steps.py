"""Steps on a SessionStream over a real toy server: a step sent with no earlier call of its session unanswered
is sent to its worker as it is read (no task of its own); one behind an unanswered call waits for it. Either way
every session's calls apply in the order sent, errors answer in their place, and nothing stays in flight."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from envhub.client import AsyncEnvhubClient, EnvhubError
from envhub.client.types import EnvView, SessionStart
from envhub.server.background import BackgroundServer
from envhub.testing import REFERENCE

TASK = "train-count/0"


@pytest.fixture(scope="module")
def server() -> Iterator[BackgroundServer]:
    with BackgroundServer.local(REFERENCE, max_sessions=64) as s:
        yield s


def _index(answer: object) -> int | str:
    """A step's or a reset's step index, or a failed call's reason."""
    if isinstance(answer, EnvhubError):
        return answer.reason
    if isinstance(answer, SessionStart):
        return answer.view.step_index
    assert isinstance(answer, EnvView)
    return answer.step_index


def test_many_sessions_step_at_once_and_each_keeps_its_order(server: BackgroundServer) -> None:
    async def play() -> list[list[int]]:
        async with AsyncEnvhubClient(server.target) as client, client.stream() as stream:
            ids = [(await stream.create_session("toy", task=TASK)).session_id for _ in range(32)]

            async def steps(session_id: str) -> list[int]:
                return [(await stream.step(session_id, "inc")).step_index for _ in range(5)]

            indices = await asyncio.gather(*(steps(session_id) for session_id in ids))
            for session_id in ids:
                await stream.close_session(session_id)
            return indices

    assert asyncio.run(play()) == [[1, 2, 3, 4, 5]] * 32
    assert server.run(server.server.service.wait_idle(5.0))  # every call left the in-flight count


def test_calls_of_one_session_sent_together_apply_in_order(server: BackgroundServer) -> None:
    async def play() -> list[int | str]:
        async with AsyncEnvhubClient(server.target) as client, client.stream() as stream:
            session_id = (await stream.create_session("toy", task=TASK)).session_id
            await stream.step(session_id, "inc")
            # sent in one go: the first step has nothing unanswered before it, the rest wait for their predecessor
            calls = [
                stream.step(session_id, "inc"),
                stream.reset_session(session_id),
                stream.step(session_id, "inc"),
                stream.step(session_id, ""),
                stream.step(session_id, "inc"),
            ]
            answers = await asyncio.gather(*calls, return_exceptions=True)
            await stream.close_session(session_id)
        return [_index(answer) for answer in answers]

    assert asyncio.run(play()) == [2, 0, 1, "EMPTY_ACTION", 2]


def test_refused_steps_answer_at_once_with_the_unary_errors(server: BackgroundServer) -> None:
    async def play() -> list[str]:
        async with AsyncEnvhubClient(server.target) as client, client.stream() as stream:
            session_id = (await stream.create_session("toy", task=TASK)).session_id
            reasons = []
            for target, action in ((session_id, ""), (session_id, "x" * 5000), ("nosuch.x", "inc")):
                with pytest.raises(EnvhubError) as caught:
                    await stream.step(target, action)
                reasons.append(caught.value.reason)
            assert (await stream.step(session_id, "inc")).step_index == 1
            await stream.close_session(session_id)
            return reasons

    assert asyncio.run(play()) == ["EMPTY_ACTION", "ACTION_TOO_LONG", "SESSION_NOT_FOUND"]
    assert server.run(server.server.service.wait_idle(5.0))
