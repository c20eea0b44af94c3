"""The ALFWorld environment kind in-process (real TextWorld/fast-downward engine, generated games)."""

from __future__ import annotations

import dataclasses

import grpc
import pytest

from envhub.core.errors import EnvhubError
from envhub.core.session import Session, SessionStep
from envhub.envs.alfworld.engine import forget_exported_states
from envhub.envs.alfworld.generator.splits import task_types
from envhub.envs.alfworld.generator.tasks import TASK_TYPES
from envhub.envs.alfworld.kind import AlfWorldKind


@pytest.fixture(scope="module")
def first_of_type() -> dict[str, int]:
    """The first train index of every task type."""
    order = task_types("train", 0)
    return {task_type: order.index(task_type) for task_type in TASK_TYPES}


def play_expert(session: Session) -> list[SessionStep]:
    """Follow the session's expert until the episode ends."""
    steps = []
    while not session.done:
        actions = session.expert_actions()
        if not actions:
            break
        steps.append(session.step(actions[0]))
    return steps


def trace(session: Session, actions: list[str]) -> list[tuple[object, ...]]:
    """Observation, reward, won, admissible and expert hint after each action."""
    out: list[tuple[object, ...]] = []
    for action in actions:
        step = session.step(action)
        obs = step.result.observation
        out.append((obs.text, obs.score, step.result.reward, step.result.won, step.done, session.admissible_actions()))
        if step.done:
            break
    return out


def planner_plan(kind: AlfWorldKind, task_index: int) -> list[str]:
    session = Session.start(kind, kind.tasks("train")[task_index], options={"expert": "planner"})
    play_expert(session)
    session.close()
    return list(session.actions)


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_planner_expert_solves_every_task_type(
    kind: AlfWorldKind, first_of_type: dict[str, int], task_type: str
) -> None:
    task = kind.tasks("train")[first_of_type[task_type]]
    assert task.family == task_type
    session = Session.start(kind, task, options={"expert": "planner"})
    steps = play_expert(session)
    assert steps[-1].result.won and steps[-1].result.terminated, session.actions
    assert [s.result.reward for s in steps] == [0.0] * (len(steps) - 1) + [1.0]
    assert session.step_index <= kind.default_max_steps
    session.close()


def test_observed_expert_solves_most_games(kind: AlfWorldKind, first_of_type: dict[str, int]) -> None:
    won = {}
    for task_type, index in first_of_type.items():
        session = Session.start(kind, kind.tasks("train")[index])
        steps = play_expert(session)
        won[task_type] = bool(steps) and steps[-1].result.won
        session.close()
    assert sum(won.values()) >= 5, won


def test_success_reward_option_and_bad_action(kind: AlfWorldKind, first_of_type: dict[str, int]) -> None:
    task = kind.tasks("train")[first_of_type["pick_and_place_simple"]]
    session = Session.start(kind, task, options={"expert": "planner", "success_reward": "10"})
    bad = session.step("fly to the moon")
    assert bad.result.observation.text == "Nothing happens."
    assert (bad.result.reward, bad.result.terminated, bad.done) == (0.0, False, False)
    steps = play_expert(session)
    assert steps[-1].result.reward == 10.0 and steps[-1].result.observation.score == 10.0
    with pytest.raises(EnvhubError) as over:
        session.step("look")
    assert over.value.reason == "EPISODE_OVER"
    session.close()


def test_step_limit_truncates(kind: AlfWorldKind, first_of_type: dict[str, int]) -> None:
    task = kind.tasks("train")[first_of_type["pick_two_obj_and_place"]]
    session = Session.start(kind, task, max_steps=3)
    steps = [session.step("look") for _ in range(3)]
    assert [s.truncated for s in steps] == [False, False, True] and session.done
    session.close()


@pytest.mark.parametrize(
    "options",
    [
        {"expert": "oracle"},
        {"expert_order": "random"},
        {"success_reward": "ten"},
        {"success_reward": "1e309"},
        {"success_reward": "nan"},
        {"colour": "red"},
    ],
)
def test_bad_options_are_invalid_argument(kind: AlfWorldKind, options: dict[str, str]) -> None:
    with pytest.raises(EnvhubError) as bad:
        Session.start(kind, kind.tasks("train")[0], options=options)
    assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT and bad.value.reason == "BAD_OPTION"


def test_task_lookup(kind: AlfWorldKind) -> None:
    assert kind.splits() == ["train", "valid_seen", "valid_unseen"]
    assert [len(kind.tasks(s)) for s in kind.splits()] == [3553, 140, 134]
    assert kind.task("valid_unseen/00003") == kind.tasks("valid_unseen")[3]
    for unknown in ("train/99999", "nosuch/00001", "train/abc"):
        with pytest.raises(KeyError):
            kind.task(unknown)


def test_reset_is_deterministic_and_handcoded_expert_is_seeded(
    kind: AlfWorldKind, first_of_type: dict[str, int]
) -> None:
    task = kind.tasks("train")[first_of_type["pick_clean_then_place_in_recep"]]
    runs = []
    for _ in range(2):
        session = Session.start(kind, task, seed=3, options={"expert": "handcoded"})
        first = (session.observation, session.admissible_actions())
        play_expert(session)
        runs.append((first, list(session.actions)))
        session.close()
    assert runs[0] == runs[1]
    assert runs[0][0][0].text.startswith("-= Welcome to TextWorld, ALFRED! =-")
    goal = kind.taskset.game(task.split, task.index).goal
    assert runs[0][0][0].task_description == goal and f"Your task is to: {goal}" in runs[0][0][0].text


@pytest.mark.parametrize("path", ["rebuild", "copy"])
@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_native_snapshot_restore_continues_identically(
    kind: AlfWorldKind, first_of_type: dict[str, int], task_type: str, path: str
) -> None:
    """Restore from the plain data alone (another replica), or from this process's copy (a fork)."""
    index = first_of_type[task_type]
    plan = planner_plan(kind, index)
    half = len(plan) // 2
    original = Session.start(kind, kind.tasks("train")[index])
    for action in ["look", *plan[:half]]:
        original.step(action)
    state = original.state()
    assert state.native_state, "the observed expert's sessions snapshot natively"
    if path == "rebuild":
        forget_exported_states()
    restored = Session.restore(kind, state)
    assert (restored.step_index, restored.observation) == (original.step_index, original.observation)
    assert restored.admissible_actions() == original.admissible_actions()
    assert restored.expert_actions() == original.expert_actions()
    rest = plan[half:]
    expected = trace(original, rest)
    assert trace(restored, rest) == expected
    assert expected[-1][3] is True  # the continuation wins
    for session in (original, restored):
        session.close()


def test_replay_fallback_equals_native_restore(kind: AlfWorldKind, first_of_type: dict[str, int]) -> None:
    index = first_of_type["pick_heat_then_place_in_recep"]
    plan = planner_plan(kind, index)
    original = Session.start(kind, kind.tasks("train")[index], options={"expert": "planner"})
    for action in plan[:3]:
        original.step(action)
    state = original.state()
    forget_exported_states()
    native = Session.restore(kind, state)
    replayed = Session.restore(kind, dataclasses.replace(state, native_state=""))
    assert trace(native, plan[3:]) == trace(replayed, plan[3:])
    for session in (original, native, replayed):
        session.close()


def test_handcoded_sessions_snapshot_by_replay(kind: AlfWorldKind, first_of_type: dict[str, int]) -> None:
    task = kind.tasks("train")[first_of_type["pick_and_place_simple"]]
    session = Session.start(kind, task, seed=5, options={"expert": "handcoded"})
    for _ in range(3):
        session.step(session.expert_actions()[0])
    state = session.state()
    assert state.native_state == ""
    restored = Session.restore(kind, state)
    assert restored.expert_actions() == session.expert_actions()
    assert trace(restored, ["look", "inventory"]) == trace(session, ["look", "inventory"])


def test_fork_copies_are_independent_and_interleave(kind: AlfWorldKind, first_of_type: dict[str, int]) -> None:
    index = first_of_type["pick_cool_then_place_in_recep"]
    plan = planner_plan(kind, index)
    parent = Session.start(kind, kind.tasks("train")[index], options={"expert": "planner"})
    for action in plan[:2]:
        parent.step(action)
    children = [parent.fork() for _ in range(3)]
    # Interleave: every session shares the worker's one fast-downward library.
    wandering = ["look", "inventory", *plan[2:]]
    traces: dict[int, list[tuple[object, ...]]] = {i: [] for i in range(4)}
    sessions = [parent, *children]
    for step_index in range(len(plan) - 2):
        for i, session in enumerate(sessions):
            actions = wandering if i == 1 else plan[2:]
            if step_index < len(actions) and not session.done:
                traces[i] += trace(session, [actions[step_index]])
    assert traces[0] == traces[2] == traces[3]
    assert traces[0][-1][3] is True and not traces[1][-1][3]
    for session in sessions:
        session.close()


def test_bad_native_state_is_invalid_argument(kind: AlfWorldKind, first_of_type: dict[str, int]) -> None:
    session = Session.start(kind, kind.tasks("train")[first_of_type["look_at_obj_in_light"]])
    session.step("look")
    state = session.state()
    forget_exported_states()
    for bad in ("not json", '{"format": 1}', state.native_state.replace('"added"', '"addd"')):
        with pytest.raises(EnvhubError) as error:
            Session.restore(kind, dataclasses.replace(state, native_state=bad))
        assert error.value.code == grpc.StatusCode.INVALID_ARGUMENT and error.value.reason == "BAD_NATIVE_STATE"
    other = dataclasses.replace(state, task_id=kind.tasks("train")[first_of_type["pick_and_place_simple"]].task_id)
    with pytest.raises(EnvhubError) as error:
        Session.restore(kind, other)
    assert error.value.reason == "BAD_NATIVE_STATE"
    session.close()
