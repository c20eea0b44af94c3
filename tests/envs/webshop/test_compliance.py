"""A real WebShop server on loopback: compliance checks, check_env, the oracle through the wire."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from gymnasium.utils.env_checker import check_env

from envhub.client import EnvhubClient, EnvhubError, TaskRef
from envhub.compliance import ComplianceSpec, run_all
from envhub.core.session import Session
from envhub.envs.webshop.kind import WebShopKind
from envhub.gym import EnvhubGymEnv
from envhub.server.background import BackgroundServer

MAX_SESSIONS = 8


@pytest.fixture(scope="module")
def kind(webshop_cache: str) -> WebShopKind:
    return WebShopKind()


@pytest.fixture(scope="module")
def client(webshop_cache: str) -> Iterator[EnvhubClient]:
    with BackgroundServer.local("webshop", max_sessions=MAX_SESSIONS) as server, EnvhubClient(server.target) as c:
        yield c


def _oracle_plan(kind: WebShopKind, task_id: str) -> list[str]:
    session = Session.start(kind, kind.task(task_id))
    while not session.done:
        session.step(session.expert_actions()[0])
    return list(session.actions)


def test_compliance(client: EnvhubClient, kind: WebShopKind) -> None:
    tasks = {task_id: _oracle_plan(kind, task_id) for task_id in ("test/00000", "train/00007")}
    run_all(client, ComplianceSpec("webshop", tasks, max_sessions=MAX_SESSIONS))


def test_oracle_episode_over_grpc_scores_one(client: EnvhubClient, kind: WebShopKind) -> None:
    task = kind.tasks("test")[11]
    local = Session.start(kind, task)
    remote = client.create_session("webshop", task=task.task_id, admissible=True)
    assert remote.view.text == local.observation.text
    assert remote.view.task_description == kind.catalog.goals["test"][11].instruction
    while True:
        hint = client.expert_actions(remote.session_id)
        assert hint == local.expert_actions()
        got = client.step(remote.session_id, hint[0], admissible=True)
        want = local.step(hint[0]).result
        assert got.text == want.observation.text and got.reward == want.reward
        assert list(got.admissible or ()) == local.admissible_actions()
        if got.done:
            break
    assert got.terminated and got.won and got.reward == 1.0
    client.close_session(remote.session_id)


def test_malformed_actions_never_break_a_session(client: EnvhubClient) -> None:
    start = client.create_session("webshop", task="test/00003", max_steps=50)
    for action in ("click[]", "click[no such thing]", "search[" + "q" * 3000 + "]", "[]", "]["):
        result = client.step(start.session_id, action)
        assert result.text.startswith("Invalid action: ") and not result.done
    with pytest.raises(EnvhubError) as error:  # past the server's own limit: a status code
        client.step(start.session_id, "search[" + "q" * 5000 + "]")
    assert error.value.code == grpc.StatusCode.INVALID_ARGUMENT
    result = client.step(start.session_id, "search[" + "red shirt " * 150 + "]")
    assert "Total results" in result.text
    client.close_session(start.session_id)


def test_gymnasium_adapter_passes_check_env(client: EnvhubClient) -> None:
    env = EnvhubGymEnv(client, "webshop", TaskRef(split="test", index=0), admissible=True, render_mode="ansi")
    check_env(env, skip_render_check=False)
    observation, info = env.reset(seed=1)
    assert observation.startswith("WebShop [SEP] Instruction:") and info["admissible_actions"] == [
        "search[<your query>]"
    ]
    observation, reward, terminated, truncated, _ = env.step("click[buy now]")
    assert observation.startswith("Invalid action: ") and reward == 0.0 and not terminated and not truncated
    env.close()
