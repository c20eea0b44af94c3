"""ScienceWorld episodes through `Session`: rewards, expert, limits, snapshots, isolation."""

from __future__ import annotations

import dataclasses

import grpc
import pytest

from envhub.core.errors import EnvhubError
from envhub.core.session import Session
from envhub.envs.scienceworld.kind import ScienceWorldKind


@pytest.fixture(scope="module")
def boil_gold(kind: ScienceWorldKind) -> list[str]:
    session = Session.start(kind, kind.task("boil/0"))
    try:
        return session.expert_actions()
    finally:
        session.close()


def test_boil_gold_path_wins_with_rewards_as_score_deltas(kind: ScienceWorldKind, boil_gold: list[str]) -> None:
    session = Session.start(kind, kind.task("boil/0"), seed=7)
    assert session.observation.text.startswith("This room is called the hallway.")
    assert "boil water" in session.observation.task_description
    assert session.observation.score == 0
    previous, total = 0.0, 0.0
    for index, action in enumerate(boil_gold):
        assert session.expert_actions() == boil_gold[index:]
        step = session.step(action)
        score = step.result.observation.score
        assert step.result.reward == score - previous
        assert step.result.observation.info["moves"] >= 0
        previous, total = score, total + step.result.reward
        if step.done:
            break
    assert step.result.terminated and step.result.won and not step.truncated
    assert step.result.observation.score == 100 == total
    with pytest.raises(EnvhubError) as caught:
        session.step("look around")
    assert caught.value.reason == "EPISODE_OVER"
    session.close()


def test_failure_terminates_without_winning(kind: ScienceWorldKind) -> None:
    session = Session.start(kind, kind.task("boil/0"))
    step = session.step("focus on agent")
    assert step.result.terminated and not step.result.won
    assert step.result.observation.score < 0 and step.result.reward == step.result.observation.score
    session.close()


def test_off_path_expert_is_empty_and_admissible_actions_are_listed(
    kind: ScienceWorldKind, boil_gold: list[str]
) -> None:
    session = Session.start(kind, kind.task("boil/0"))
    session.step(boil_gold[0])
    assert session.expert_actions() == boil_gold[1:]
    session.step("inventory")
    assert session.expert_actions() == []
    admissible = session.admissible_actions()
    assert "look around" in admissible and "go to kitchen" in admissible
    one_by_one = [str(action) for action in session.env._simulator.getValidActionObjectCombinations()]  # type: ignore[attr-defined]
    assert admissible == one_by_one  # read joined in one call: same strings, same order
    session.close()


def test_java_strings_are_read_whole_even_with_newlines_inside(kind: ScienceWorldKind) -> None:
    jvm = kind._jvm
    assert jvm.strings(jvm.gateway.jvm.java.util.ArrayList()) == []
    for items in (["a"], ["", "b c", ""], ["two\nlines", "x"]):
        java_list = jvm.gateway.jvm.java.util.ArrayList()
        for item in items:
            java_list.add(item)
        assert jvm.strings(java_list) == items


def test_step_limit_truncates(kind: ScienceWorldKind) -> None:
    session = Session.start(kind, kind.task("boil/0"), max_steps=3)
    steps = [session.step("look around") for _ in range(3)]
    assert [step.truncated for step in steps] == [False, False, True]
    assert steps[-1].done and not steps[-1].result.terminated
    session.close()


def _play(session: Session, actions: list[str]) -> list[tuple[str, float, bool]]:
    out = []
    for action in actions:
        result = session.step(action).result
        out.append((result.observation.text, result.reward, result.terminated))
    return out


# identify-life-stages-2 and grow-fruit (after step ~59) draw from the JVM-global random while steps pass.
RESTORE_CASES = [("boil/0", 6), ("chemistry-mix/0", 6), ("identify-life-stages-2/0", 4), ("grow-fruit/0", 55)]
WALK = ["look around", "wait1", "inventory", "look around", "wait1", "look around"]


@pytest.mark.parametrize(("task_id", "cut"), RESTORE_CASES)
def test_snapshot_restore_continues_identically(kind: ScienceWorldKind, task_id: str, cut: int) -> None:
    spec = kind.task(task_id)
    assert spec.deterministic
    original = Session.start(kind, spec, seed=3)
    gold = original.expert_actions()
    _play(original, gold[:cut])
    restored = Session.restore(kind, original.state())
    forked = original.fork()
    assert restored.observation == original.observation and restored.step_index == cut
    assert restored.expert_actions() == gold[cut:]
    rest = gold[cut : cut + 8] + WALK
    expected = _play(original, rest)
    assert _play(restored, rest) == expected
    assert _play(forked, rest) == expected
    for session in (original, restored, forked):
        session.close()


def test_tampered_digest_raises_replay_diverged(kind: ScienceWorldKind, boil_gold: list[str]) -> None:
    session = Session.start(kind, kind.task("boil/0"))
    _play(session, boil_gold[:4])
    state = session.state()
    digests = list(state.digests)
    digests[2] = bytes(16)
    with pytest.raises(EnvhubError) as caught:
        Session.restore(kind, dataclasses.replace(state, digests=tuple(digests)))
    assert (caught.value.code, caught.value.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "REPLAY_DIVERGED")
    assert caught.value.metadata["step"] == "3"
    other_seed = dataclasses.replace(state, reset_digest=bytes(16))
    with pytest.raises(EnvhubError, match="REPLAY_DIVERGED"):
        Session.restore(kind, other_seed)
    session.close()


RANDOM_TASK = "grow-fruit/0"
"""Its gold path reaches pollination at step ~60, which draws from the JVM-global random."""


@pytest.fixture(scope="module")
def random_walk(kind: ScienceWorldKind) -> list[str]:
    session = Session.start(kind, kind.task(RANDOM_TASK))
    try:
        return session.expert_actions()[:66]
    finally:
        session.close()


def _texts(session: Session, actions: list[str]) -> list[str]:
    return [session.observation.text] + [text for text, _, _ in _play(session, actions)]


def test_seed_changes_only_the_random_dynamics(kind: ScienceWorldKind, random_walk: list[str]) -> None:
    runs = []
    for seed in (1, 1, 2):
        session = Session.start(kind, kind.task(RANDOM_TASK), seed=seed)
        runs.append(_texts(session, random_walk))
        session.close()
    assert runs[0] == runs[1]
    first_difference = next(i for i, (a, b) in enumerate(zip(runs[0], runs[2], strict=True)) if a != b)
    assert first_difference > 50  # the world and the early steps do not depend on the seed


def test_interleaved_sessions_do_not_affect_each_other(kind: ScienceWorldKind, random_walk: list[str]) -> None:
    spec = kind.task(RANDOM_TASK)
    alone = Session.start(kind, spec, seed=5)
    expected = _texts(alone, random_walk)
    alone.close()
    first, second, other = (Session.start(kind, spec, seed=seed) for seed in (5, 5, 9))
    traces = [[first.observation.text], [second.observation.text]]
    for index, action in enumerate(random_walk):
        for session, trace in zip((first, second), traces, strict=True):
            trace.append(session.step(action).result.observation.text)
        other.step(action)  # draws from the same JVM-global random and moves the object-id counter
        if index % 8 == 0:
            other.admissible_actions()
            other.reset()  # a load sets the JVM-global object-id counter back to 0
    assert traces == [expected, expected]
    for session in (first, second, other):
        session.close()


def test_replay_under_another_seed_diverges_where_the_engine_does(
    kind: ScienceWorldKind, random_walk: list[str]
) -> None:
    session = Session.start(kind, kind.task(RANDOM_TASK), seed=1)
    texts = _texts(session, random_walk)
    state = session.state()
    session.close()
    other = Session.start(kind, kind.task(RANDOM_TASK), seed=2)
    first_difference = next(i for i, (a, b) in enumerate(zip(texts, _texts(other, random_walk), strict=True)) if a != b)
    other.close()
    with pytest.raises(EnvhubError) as caught:
        Session.restore(kind, dataclasses.replace(state, seed=2))
    assert caught.value.reason == "REPLAY_DIVERGED"
    assert caught.value.metadata["step"] == str(first_difference)


def test_closed_environment_refuses_calls(kind: ScienceWorldKind) -> None:
    env = kind.create()
    env.reset(kind.task("boil/1"), seed=0, options={})
    env.close()
    env.close()
    with pytest.raises(EnvhubError) as caught:
        env.step("look around")
    assert caught.value.code == grpc.StatusCode.FAILED_PRECONDITION
