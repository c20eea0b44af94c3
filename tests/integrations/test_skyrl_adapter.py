"""SkyRL-gym's own registry and `make` over real envhub ALFWorld episodes: a multi-turn episode to a win with the
environment's action format, an unparsable reply, the turn limit, and envhub's snapshots and forks."""

from __future__ import annotations

import pytest

pytest.importorskip("skyrl_gym")

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv

import envhub.integrations.skyrl as adapter
from envhub.client.formats import action_format

TASK = "train/00000"  # the conftest's EXPERT_TASK: expert_plan wins it
SYSTEM = {"role": "system", "content": "Play the game."}


def _make(target: str, **extras: object) -> adapter.EnvhubTextEnv:
    env = skyrl_gym.make("envhub", env_config={"target": target, "environment": "alfworld"}, extras=extras)
    assert isinstance(env, adapter.EnvhubTextEnv) and isinstance(env, BaseTextEnv)
    return env


def test_the_adapter_registers_envhub_in_skyrl_gyms_registry() -> None:
    spec = skyrl_gym.spec("envhub")
    assert spec.entry_point == "envhub.integrations.skyrl:EnvhubTextEnv"
    with pytest.raises(ValueError, match=r"env_config\.target"):
        skyrl_gym.make("envhub", env_config={}, extras={"task_id": TASK})


def test_a_multi_turn_episode_to_a_win_in_the_environments_action_format(
    alfworld_target: str, expert_plan: list[str]
) -> None:
    plan = expert_plan
    env = _make(alfworld_target, task_id=TASK)
    messages, metadata = env.init([SYSTEM])
    assert messages[0] == SYSTEM and messages[1]["role"] == "user" and len(messages) == 2
    first = messages[1]["content"]
    assert first.startswith("You are an expert agent operating in the ALFRED") and "<action></action>" in first
    assert "You are now at step 1 " in first and metadata["task_id"] == TASK and metadata["session_id"]
    rewards = []
    for turn, action in enumerate(plan, start=1):
        out = env.step(f"<think>the plan says so</think><action>{action}</action>")
        rewards.append(out["reward"])
        assert out["metadata"]["action"] == action and out["metadata"]["step_index"] == turn
        if not out["done"]:
            [message] = out["observations"]
            assert message["role"] == "user" and f"You are now at step {turn + 1} " in message["content"]
    assert out["done"] and out["observations"] == [] and out["metadata"]["won"] and sum(rewards) == 1.0
    assert env.get_metrics() == {"turns": len(plan), "won": 1.0, "score": out["metadata"]["score"]}
    env.close()


def test_an_unparsable_reply_steps_nothing_and_the_turn_limit_ends_the_episode(alfworld_target: str) -> None:
    env = _make(alfworld_target, task_id=TASK, max_turns=2)
    env.init([])
    out = env.step("I would like to go to the fridge")
    invalid = action_format("alfworld").invalid_observation
    assert out["observations"] == [{"role": "user", "content": invalid}] and not out["done"]
    assert out["metadata"]["action"] is None and out["metadata"]["step_index"] == 0 and out["reward"] == 0.0
    out = env.step("<action>look</action>")
    assert out["done"] and out["metadata"]["step_index"] == 1 and out["observations"] == []
    env.close()


def test_snapshot_restore_and_fork_reach_envhubs_own(alfworld_target: str, expert_plan: list[str]) -> None:
    plan = expert_plan
    env = _make(alfworld_target, split="train", index=0)
    env.init()
    env.step(f"<action>{plan[0]}</action>")
    snapshot = env.snapshot()
    [child] = env.fork(1)
    assert child.view and env.view and child.view.session_id != env.view.session_id
    for action in plan[1:]:
        out = child.step(f"<action>{action}</action>")
    assert out["done"] and out["metadata"]["won"] and child.turns == len(plan)
    [message] = env.restore(snapshot)
    assert "You are now at step 2 " in message["content"] and env.turns == 1
    for action in plan[1:]:
        out = env.step(f"<action>{action}</action>")
    assert out["done"] and out["metadata"]["won"]
    child.close()
    env.close()
