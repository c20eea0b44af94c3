"""OpenEnv's own client code (EnvClient, SyncEnvClient, GenericEnvClient) driving real envhub ALFWorld episodes."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

pytest.importorskip("openenv")

import uvicorn
from openenv.core import GenericEnvClient

from envhub.integrations.openenv import EnvhubAction, EnvhubEnv, create_openenv_app

TASK = "train/00000"


def test_sync_client_plays_a_full_episode_to_a_win(alfworld_target: str) -> None:
    with EnvhubEnv(alfworld_target, "alfworld").sync() as env:
        result = env.reset(task_id=TASK)
        assert not result.done and result.observation.task_description
        assert result.observation.admissible_actions
        steps = 0
        while not result.done:
            result = env.step(EnvhubAction(command=env.expert_actions()[0]))
            steps += 1
        state = env.state()
    assert result.observation.won and result.reward == 1.0
    assert state.step_count == steps and state.won and state.task_id == TASK
    assert state.episode_id and state.environment == "alfworld"


def test_async_client_snapshot_fork_and_restore(alfworld_target: str) -> None:
    async def play() -> None:
        async with EnvhubEnv(alfworld_target, "alfworld", task_ids=[TASK]) as env:
            first = await env.reset()
            assert (await env.state()).task_id == TASK
            plan = []
            result = first
            while not result.done:
                plan.append((await env.expert_actions())[0])
                result = await env.step(plan[-1])
            # back to the start: the snapshot replays the same plan to the same win
            await env.reset()
            await env.step(plan[0])
            snapshot = await env.snapshot()
            children = await env.fork(2)
            for child in children:
                outcome = None
                for action in plan[1:]:
                    outcome = await child.step(action)
                assert outcome is not None and outcome.observation.won
                await child.close()
            restored = await env.restore(snapshot)
            assert restored.observation.step_index == 1
            assert (await env.step("examine the ceiling")).observation.step_index == 2

    asyncio.run(play())


@pytest.fixture
def openenv_server(alfworld_target: str) -> Iterator[str]:
    """OpenEnv's own FastAPI server over envhub, on a free loopback port."""
    server = uvicorn.Server(uvicorn.Config(create_openenv_app(alfworld_target, "alfworld"), port=0, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the OpenEnv server did not start")
        threading.Event().wait(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=30)


def test_openenv_websocket_client_plays_through_openenv_server(openenv_server: str) -> None:
    with GenericEnvClient(base_url=openenv_server).sync() as env:
        result = env.reset(task_id=TASK)
        assert result.observation["task_description"]
        steps = 0
        while not result.done and steps < 12:
            result = env.step({"command": result.observation["admissible_actions"][0]})
            steps += 1
        assert steps > 0 and env.state()["step_count"] == steps
