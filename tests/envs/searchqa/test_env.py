"""Search-QA episodes in-process: gold episodes, invalid turns, the turn limit, snapshots, huge inputs."""

from __future__ import annotations

import json

import pytest

from envhub.core.errors import EnvhubError
from envhub.core.session import Session
from envhub.envs.searchqa.env import SearchQAEnv
from envhub.envs.searchqa.kind import SearchQAKind
from envhub.envs.searchqa.protocol import EMPTY_QUERY_OBSERVATION, INVALID_OBSERVATION
from envhub.envs.searchqa.questions import DATASETS, MULTI_HOP


def test_every_dataset_has_train_and_test_questions(kind: SearchQAKind) -> None:
    assert kind.splits() == ["train", "test"]
    for split in kind.splits():
        assert {spec.family for spec in kind.tasks(split)} == set(DATASETS)


def test_expert_episodes_score_one_with_the_gold_searches(kind: SearchQAKind) -> None:
    for spec in kind.tasks("test"):
        question = kind.source.splits["test"][spec.index]
        session = Session.start(kind, spec)
        assert session.observation.text == question.question
        while not session.done:
            step = session.step(session.expert_actions()[0])
        assert step.result.won and step.result.reward == 1.0 and step.result.terminated, spec.task_id
        info = step.result.observation.info
        assert info["em"] == 1.0 and info["f1"] == 1.0
        assert info["searches"] == len(question.gold_searches) == session.step_index - 1
        assert len(question.gold_searches) >= (2 if spec.family in MULTI_HOP else 1)
        session.close()


def test_search_returns_topk_passages_in_information(kind: SearchQAKind) -> None:
    spec = kind.tasks("test")[0]
    for topk in (1, 3, 5):
        session = Session.start(kind, spec, options={"topk": str(topk)})
        text = session.step(session.expert_actions()[0]).result.observation.text
        assert text.startswith("<information>Doc 1(Title: ") and text.endswith("</information>")
        assert text.count("\nDoc ") == topk - 1
    with pytest.raises(EnvhubError, match="topk"):
        Session.start(kind, spec, options={"topk": "0"})


def test_invalid_turns_explain_and_count_toward_the_limit(kind: SearchQAKind) -> None:
    session = Session.start(kind, kind.tasks("test")[0])
    first = session.step("Paris, I think")
    assert first.result.observation.text == INVALID_OBSERVATION and first.result.observation.info["valid"] is False
    assert session.step("<search>   </search>").result.observation.text == EMPTY_QUERY_OBSERVATION
    assert session.step("<search>nothingmatcheszzz</search>").result.observation.text == (
        "<information>No results found.</information>"
    )
    last = session.step("<search>capital</search>")
    assert last.truncated and not last.result.terminated and session.done and last.result.reward == 0.0


def test_wrong_answer_ends_with_zero_reward_and_f1(kind: SearchQAKind) -> None:
    spec = next(s for s in kind.tasks("test") if s.family == "nq" and "currency" in s.description)
    session = Session.start(kind, spec)
    answer = kind.source.splits["test"][spec.index].golden_answers[0]
    step = session.step(f"<answer>the {answer} coin</answer>")
    assert step.result.terminated and not step.result.won and step.result.reward == 0.0
    assert 0.0 < step.result.observation.info["f1"] < 1.0
    assert session.expert_actions() == []


def test_huge_inputs_are_normal_turns(kind: SearchQAKind) -> None:
    session = Session.start(kind, kind.tasks("test")[0], max_steps=10)
    long_query = "<search>" + "capital city of the country " * 40_000 + "</search>"
    assert session.step(long_query).result.observation.text.startswith("<information>")
    assert session.step("x" * 1_000_000).result.observation.text == INVALID_OBSERVATION
    step = session.step("<answer>" + "y" * 1_000_000 + "</answer>")
    assert step.result.terminated and step.result.reward == 0.0 and len(step.result.observation.text) < 300


class _NoSearch:
    def search(self, queries: object, topk: int) -> list[list[object]]:
        raise AssertionError("a native restore must not search")


def test_native_snapshot_is_the_history_and_restores_without_searching(kind: SearchQAKind) -> None:
    spec = next(s for s in kind.tasks("test") if s.family == "hotpotqa")
    session = Session.start(kind, spec)
    session.step(session.expert_actions()[0])
    session.step("not an action")  # an invalid turn: 2 of the 4 turns left for one search and the answer
    state = session.state()
    history = json.loads(state.native_state)
    assert [turn[0] for turn in history["turns"]] == ["search", "invalid"] and len(history["turns"][0][2]) == 3
    restored = Session.restore(kind, state, env=SearchQAEnv(kind._questions, _NoSearch()))
    assert restored.observation == session.observation and restored.step_index == 2
    assert restored.expert_actions() == session.expert_actions()
    fork = session.fork()
    for live in (session, fork):
        while not live.done:
            last = live.step(live.expert_actions()[0])
        assert last.result.won
    with pytest.raises(EnvhubError, match="native state"):
        Session.restore(kind, type(state)(**{**vars(state), "native_state": '{"format": 1}'}))
