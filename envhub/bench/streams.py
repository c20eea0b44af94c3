"""Steps/s with N concurrent sessions from one asyncio client: unary `Step` calls versus one SessionStream.

Both modes step the same live sessions (each session one step at a time, all sessions at
once) on the same channel, alternating round by round so that both see the same load; the
ratio is the median of the per-round ratios (the load of a shared machine drifts between rounds).
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from envhub.client import AsyncEnvhubClient

StepCall = Callable[[str, str], Awaitable[object]]


async def _drive(step: StepCall, sessions: Sequence[str], actions: Sequence[str], seconds: float) -> float:
    """Steps/s while every session steps back to back for `seconds`."""
    loop = asyncio.get_running_loop()
    counts = [0] * len(sessions)
    started = loop.time()
    deadline = started + seconds

    async def play(index: int) -> None:
        while loop.time() < deadline:
            await step(sessions[index], actions[counts[index] % len(actions)])
            counts[index] += 1

    await asyncio.gather(*(play(index) for index in range(len(sessions))))
    return sum(counts) / (loop.time() - started)


async def _compare(
    target: str, environment: str, task_id: str, actions: Sequence[str], sessions: int, seconds: float, rounds: int
) -> dict[str, Any]:
    async with AsyncEnvhubClient(target) as client, client.stream() as stream:
        starts = await asyncio.gather(
            *(client.create_session(environment, task=task_id, seed=seed, max_steps=10**6) for seed in range(sessions))
        )
        ids = [start.session_id for start in starts]
        modes: dict[str, StepCall] = {"unary": client.step, "stream": stream.step}
        rates: dict[str, list[float]] = {name: [] for name in modes}
        for step in modes.values():  # warm-up, not counted
            await _drive(step, ids, actions, seconds / 3)
        for _ in range(rounds):
            for name, step in modes.items():
                rates[name].append(await _drive(step, ids, actions, seconds))
                print(f"  {sessions} sessions, {name}: {rates[name][-1]:.0f} steps/s", flush=True)
        await asyncio.gather(*(stream.close_session(session_id) for session_id in ids))
    pairs = [stream / unary for unary, stream in zip(rates["unary"], rates["stream"], strict=True)]
    return {
        "sessions": sessions,
        "unary_steps_per_s": statistics.median(rates["unary"]),
        "stream_steps_per_s": statistics.median(rates["stream"]),
        "ratio_stream_to_unary": statistics.median(pairs),
        "rounds": rates,
    }


def unary_vs_stream(
    target: str,
    environment: str,
    task_id: str,
    actions: Sequence[str],
    sessions: int,
    seconds: float,
    rounds: int = 5,
) -> dict[str, Any]:
    """Median steps/s of `sessions` concurrent sessions stepped by unary calls and over one SessionStream."""
    return asyncio.run(_compare(target, environment, task_id, actions, sessions, seconds, rounds))
