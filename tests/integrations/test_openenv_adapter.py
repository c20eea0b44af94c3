"""OpenEnv's own code over real envhub ALFWorld episodes: its FastAPI server around `EnvhubEnvironment`, its
clients (`EnvhubEnv`, `GenericEnvClient`, `.sync()`), `AutoEnv` discovery of the openenv-envhub_env package,
and envhub's snapshots and forks on the environment itself."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

pytest.importorskip("openenv")

import uvicorn
from openenv.core import GenericEnvClient

from envhub.client import Sessions
from envhub.integrations.openenv import EnvhubAction, EnvhubEnv, EnvhubEnvironment, create_openenv_app

TASK = "train/00000"  # the conftest's EXPERT_TASK: expert_plan wins it


@pytest.fixture(scope="module")
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


def test_the_envhub_client_plays_a_full_episode_to_a_win(
    alfworld_target: str, openenv_server: str, expert_plan: list[str]
) -> None:
    plan = expert_plan
    with EnvhubEnv(base_url=openenv_server).sync() as env:
        result = env.reset(task_id=TASK)
        assert not result.done and result.observation.task_description
        assert result.observation.admissible_actions
        for action in plan:
            result = env.step(EnvhubAction(command=action))
        state = env.state()
    assert result.done and result.observation.won and result.reward == 1.0
    assert state.step_count == len(plan) and state.won and state.task_id == TASK
    assert state.episode_id and state.environment == "alfworld"


def test_autoenv_discovers_envhub_and_connects_to_the_server(openenv_server: str) -> None:
    pytest.importorskip("envhub_env", reason="the openenv-envhub_env package is not installed (make setup installs it)")
    from openenv import AutoEnv
    from openenv.auto._discovery import get_discovery

    get_discovery().discover(use_cache=False)  # OpenEnv caches discovery in a temporary file: look afresh
    env = AutoEnv.from_env("envhub", base_url=openenv_server)
    assert type(env) is EnvhubEnv
    with env.sync() as client:
        result = client.reset(task_id=TASK)
        result = client.step("look")  # a plain string is a command
        assert not result.done and client.state().step_count == 1


def test_openenvs_generic_client_plays_through_the_same_server(openenv_server: str) -> None:
    with GenericEnvClient(base_url=openenv_server).sync() as env:
        result = env.reset(task_id=TASK)
        assert result.observation["task_description"]
        steps = 0
        while not result.done and steps < 12:
            result = env.step({"command": result.observation["admissible_actions"][0]})
            steps += 1
        assert steps > 0 and env.state()["step_count"] == steps


def test_the_environment_snapshots_forks_and_restores(alfworld_target: str, expert_plan: list[str]) -> None:
    plan = expert_plan
    sessions = Sessions.connect(alfworld_target, "alfworld")
    environment = EnvhubEnvironment(sessions, task_ids=[TASK])
    environment.reset()
    environment.step(EnvhubAction(command=plan[0]))
    snapshot = environment.snapshot()
    for child in environment.fork(2):
        observation = None
        for action in plan[1:]:
            observation = child.step(EnvhubAction(command=action))
        assert observation is not None and observation.won and observation.done
        child.close()
    restored = environment.restore(snapshot)
    assert restored.step_index == 1 and environment.state.task_id == TASK
    assert environment.step(EnvhubAction(command="examine the ceiling")).step_index == 2
    assert environment.expert_actions()
    environment.close()
    sessions.close()
