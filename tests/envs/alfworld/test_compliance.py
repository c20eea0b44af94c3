"""A real ALFWorld server on loopback: compliance checks, gRPC equals in-process, the planner through the wire."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from gymnasium.utils.env_checker import check_env

from envhub.client import EnvhubClient, TaskRef
from envhub.compliance import ComplianceSpec, run_all
from envhub.core.session import Session
from envhub.envs.alfworld.generator.splits import task_types
from envhub.envs.alfworld.generator.tasks import TASK_TYPES
from envhub.envs.alfworld.kind import AlfWorldKind
from envhub.gym import EnvhubGymEnv
from envhub.server.background import BackgroundServer

MAX_SESSIONS = 8


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One game cache for this module's server workers and in-process kinds (workers inherit the variable)."""
    path = str(tmp_path_factory.mktemp("envhub-cache"))
    before = os.environ.get("ENVHUB_CACHE")
    os.environ["ENVHUB_CACHE"] = path
    yield path
    if before is None:
        del os.environ["ENVHUB_CACHE"]
    else:
        os.environ["ENVHUB_CACHE"] = before


@pytest.fixture(scope="module")
def kind(cache_dir: str) -> Iterator[AlfWorldKind]:
    alfworld = AlfWorldKind(rooms="small")  # short games keep CI fast; whole rooms are the served default
    yield alfworld
    alfworld.close()


@pytest.fixture(scope="module")
def client(cache_dir: str) -> Iterator[EnvhubClient]:
    small = {"alfworld": {"rooms": "small"}}
    with (
        BackgroundServer.local("alfworld", max_sessions=MAX_SESSIONS, environment_config=small) as server,
        EnvhubClient(server.target) as c,
    ):
        yield c


@pytest.fixture(scope="module")
def plans(kind: AlfWorldKind) -> dict[str, list[str]]:
    """The planner's solution of the first train game of every task type, played in-process."""
    order = task_types("train", 0)
    out = {}
    for task_type in TASK_TYPES:
        session = Session.start(kind, kind.tasks("train")[order.index(task_type)], options={"expert": "planner"})
        while not session.done:
            session.step(session.expert_actions()[0])
        out[session.task.task_id] = list(session.actions)
        session.close()
    return out


def test_compliance(client: EnvhubClient, plans: dict[str, list[str]]) -> None:
    tasks = dict(list(plans.items())[:2])
    run_all(client, ComplianceSpec("alfworld", tasks, max_sessions=MAX_SESSIONS))


def test_episode_over_grpc_equals_in_process(client: EnvhubClient, kind: AlfWorldKind) -> None:
    task = kind.tasks("valid_unseen")[5]
    local = Session.start(kind, task, seed=1)
    remote = client.create_session("alfworld", task=task.task_id, seed=1, admissible=True)
    assert remote.view.text == local.observation.text
    assert remote.view.task_description == local.observation.task_description
    assert list(remote.view.admissible or ()) == local.admissible_actions()
    while not local.done:
        hint = local.expert_actions()
        assert client.expert_actions(remote.session_id) == hint
        action = hint[0] if local.step_index % 3 else "examine the ceiling"
        want = local.step(action)
        got = client.step(remote.session_id, action, admissible=True)
        assert got.text == want.result.observation.text
        assert (got.reward, got.terminated, got.truncated, got.won) == (
            want.result.reward,
            want.result.terminated,
            want.truncated,
            want.result.won,
        )
        assert list(got.admissible or ()) == local.admissible_actions()
    assert got.won
    client.close_session(remote.session_id)
    local.close()


def test_planner_solves_every_task_type_through_the_server(client: EnvhubClient, plans: dict[str, list[str]]) -> None:
    for task_id, plan in plans.items():
        start = client.create_session("alfworld", task=task_id, options={"expert": "planner", "success_reward": "10"})
        actions = []
        result = None
        while result is None or not result.done:
            actions.append(client.expert_actions(start.session_id)[0])
            result = client.step(start.session_id, actions[-1])
        assert result.won and result.reward == 10.0 and actions == plan, task_id
        client.close_session(start.session_id)


def test_gymnasium_adapter_passes_check_env(client: EnvhubClient) -> None:
    env = EnvhubGymEnv(client, "alfworld", TaskRef(split="valid_seen", index=0), admissible=True, render_mode="ansi")
    check_env(env, skip_render_check=False)
    observation, info = env.reset(seed=1)
    assert "Your task is to:" in observation and info["admissible_actions"]
    observation, reward, terminated, truncated, info = env.step("jump over the moon")
    assert observation == "Nothing happens." and reward == 0.0 and not terminated and not truncated
    env.close()
