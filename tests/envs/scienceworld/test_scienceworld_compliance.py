"""A real ScienceWorld server on loopback: the compliance checks and gRPC equals in-process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from envhub.client import EnvhubClient
from envhub.compliance import ComplianceSpec, run_all
from envhub.core.session import Session
from envhub.envs.scienceworld.kind import ScienceWorldKind
from envhub.server.background import BackgroundServer

MAX_SESSIONS = 4


@pytest.fixture(scope="module")
def client() -> Iterator[EnvhubClient]:
    with (
        BackgroundServer.local("scienceworld", max_sessions=MAX_SESSIONS, workers=1) as server,
        EnvhubClient(server.target) as c,
    ):
        yield c


def test_compliance(client: EnvhubClient) -> None:
    tasks = {
        "boil/0": ["open door to kitchen", "go to kitchen", "look around", "pick up thermometer"],
        "chemistry-mix/0": ["look around", "inventory", "wait1"],
    }
    run_all(client, ComplianceSpec("scienceworld", tasks, max_sessions=MAX_SESSIONS))


def test_gold_episode_over_grpc_equals_in_process(client: EnvhubClient, kind: ScienceWorldKind) -> None:
    task = kind.task("boil/2")
    local = Session.start(kind, task, seed=4)
    remote = client.create_session("scienceworld", task=task.task_id, seed=4)
    assert remote.view.text == local.observation.text
    assert remote.view.task_description == local.observation.task_description
    gold = local.expert_actions()
    assert client.expert_actions(remote.session_id) == gold
    for action in gold:
        want = local.step(action)
        got = client.step(remote.session_id, action)
        assert got.text == want.result.observation.text
        assert (got.reward, got.terminated, got.won) == (want.result.reward, want.result.terminated, want.result.won)
        if want.done:
            break
    assert want.result.won
    local.close()
