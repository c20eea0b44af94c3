"""`StepBatcher` on a real ALFWorld server: steps parked together go in one round; a failure stays its own."""

from __future__ import annotations

import asyncio

import pytest

from envhub.client import EnvhubError, Sessions
from envhub.integrations.batching import StepBatcher


@pytest.fixture
def episodes(alfworld_target: str) -> Sessions:
    return Sessions.connect(alfworld_target, "alfworld")


def test_steps_parked_in_one_loop_pass_share_one_round(episodes: Sessions) -> None:
    sessions = [episodes.start(f"train/{i:05d}").session_id for i in range(3)]
    batcher = StepBatcher(episodes)

    async def play() -> list[object]:
        first = await asyncio.gather(*(batcher.step(s, "look") for s in sessions))
        second = await asyncio.gather(
            batcher.step(sessions[0], "inventory"), batcher.step("nobody.here", "look"), return_exceptions=True
        )
        return [*first, *second]

    *turns, good, bad = asyncio.run(play())
    assert [t.session_id for t in turns] == sessions and all(t.step_index == 1 for t in turns)
    assert batcher.rounds == 2
    assert good.step_index == 2 and isinstance(bad, EnvhubError)
    for session_id in sessions:
        episodes.end(session_id)
    episodes.close()
