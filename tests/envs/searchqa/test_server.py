"""Search-QA over a real gRPC server: compliance, gold episodes, check_env, and a remote retriever."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from gymnasium.utils.env_checker import check_env

from envhub.client import EnvhubClient, EnvhubError
from envhub.compliance import ComplianceSpec, run_all
from envhub.envs.searchqa.data import RETRIEVER_ENV
from envhub.envs.searchqa.kind import SearchQAKind
from envhub.envs.searchqa.remote import RemoteRetriever, RetrieverServer
from envhub.envs.searchqa.retriever import open_index
from envhub.gym import EnvhubGymEnv
from envhub.server.background import BackgroundServer

MAX_SESSIONS = 8


@pytest.fixture(scope="module")
def client(data_dir: Path) -> Iterator[EnvhubClient]:
    with BackgroundServer.local("searchqa", max_sessions=MAX_SESSIONS) as server, EnvhubClient(server.target) as c:
        yield c


def _first(kind: SearchQAKind, family: str) -> str:
    return next(spec.task_id for spec in kind.tasks("test") if spec.family == family)


def test_compliance(client: EnvhubClient, kind: SearchQAKind) -> None:
    tasks = {
        _first(kind, "nq"): ["<search>capital city</search>", "no tags here", "<answer>Paris</answer>"],
        _first(kind, "hotpotqa"): ["<search>population</search>", "<search>currency</search>", "<answer>x</answer>"],
    }
    run_all(client, ComplianceSpec("searchqa", tasks, max_sessions=MAX_SESSIONS))


def test_gold_episodes_over_grpc_score_one_with_the_intended_searches(client: EnvhubClient, kind: SearchQAKind) -> None:
    for family, least in (("popqa", 1), ("2wikimultihopqa", 2), ("musique", 3), ("bamboogle", 2)):
        task_id = _first(kind, family)
        start = client.create_session("searchqa", task=task_id)
        gold = client.expert_actions(start.session_id)
        for action in gold:
            result = client.step(start.session_id, action)
        searches = [a for a in gold if a.startswith("<search>")]
        assert result.won and result.reward == 1.0 and result.terminated, task_id
        assert result.info["searches"] == len(searches) >= least
        client.close_session(start.session_id)


def test_gymnasium_adapter_passes_check_env(client: EnvhubClient, kind: SearchQAKind) -> None:
    task_id = next(s.task_id for s in kind.tasks("test") if s.description.isascii())
    env = EnvhubGymEnv(client, "searchqa", task_id, render_mode="ansi")
    check_env(env, skip_render_check=False)
    observation, info = env.reset(seed=1)
    assert observation.endswith("?") and info["task_id"] == task_id
    observation, reward, terminated, truncated, _ = env.step("<answer>nobody knows</answer>")
    assert reward == 0.0 and terminated and not truncated
    env.close()


def test_remote_retriever_gives_the_embedded_results(data_dir: Path, kind: SearchQAKind) -> None:
    embedded = open_index(data_dir)
    queries = [q for spec in kind.tasks("test") for q in kind.source.splits["test"][spec.index].gold_searches]
    with RetrieverServer(embedded, port=0) as server:
        remote = RemoteRetriever(server.url)
        for topk in (1, 3, 10):
            assert remote.search(queries, topk) == embedded.search(queries, topk)
        request = urllib.request.Request(
            server.url + "/retrieve", data=json.dumps({"queries": ["capital city"], "topk": 2}).encode()
        )
        with urllib.request.urlopen(request) as response:
            docs = json.loads(response.read())["result"][0]
        assert [set(doc) for doc in docs] == [{"id", "contents"}] * 2  # return_scores false: documents alone
        for bad in (b"not json", b'{"queries": "one"}', b'{"queries": ["a"], "topk": 0}'):
            with pytest.raises(urllib.error.HTTPError) as caught:
                urllib.request.urlopen(urllib.request.Request(server.url + "/retrieve", data=bad))
            assert caught.value.code == 400
        assert remote.search(["Warsaw"], 1)  # the server survives bad requests
        many = (queries * 600)[:600]  # more than one call holds: sent in two
        assert remote.search(many, 1) == embedded.search(many, 1)
        with pytest.raises(EnvhubError) as refused:
            remote.search(["Warsaw"], 0)
        assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT and refused.value.reason == "RETRIEVER_REFUSED"


def test_retriever_down_is_unavailable_and_the_session_survives(data_dir: Path, kind: SearchQAKind) -> None:
    retriever = RetrieverServer(open_index(data_dir), port=0).start()
    port = retriever.port
    os.environ[RETRIEVER_ENV] = retriever.url
    try:
        server = BackgroundServer.local("searchqa", max_sessions=4)
    finally:
        del os.environ[RETRIEVER_ENV]
    with server, EnvhubClient(server.target) as remote_client:
        task_id = _first(kind, "hotpotqa")
        session_id = remote_client.create_session("searchqa", task=task_id).session_id
        gold = remote_client.expert_actions(session_id)
        assert remote_client.step(session_id, gold[0]).text.startswith("<information>Doc 1")
        retriever.stop()
        with pytest.raises(EnvhubError) as caught:
            remote_client.step(session_id, gold[1])
        assert caught.value.code == grpc.StatusCode.UNAVAILABLE and caught.value.reason == "RETRIEVER_UNAVAILABLE"
        assert "unavailable" in caught.value.message and str(port) in caught.value.message
        with RetrieverServer(open_index(data_dir), port=port):  # back up: the same session goes on
            result = remote_client.step(session_id, gold[1])
            assert result.step_index == 2
            assert remote_client.step(session_id, gold[2]).won
