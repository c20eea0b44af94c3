"""verifiers' v1 Env and Taskset over a real envhub ALFWorld server, played by a scripted player.

verifiers' own agent side (a harness program launched through `uv`, talking to an
OpenAI-compatible model endpoint) cannot run offline here, so the player is a script with
verifiers' interaction surface (`interaction(task)` -> `turn(text)` -> `vf.Segment`) and a
real `vf.Trace`; everything else (`vf.resolve_env_config` and `vf.load_environment`, which resolve the
plugin id to envhub's config, taskset and env classes, the taskset, `Env.run`,
reward recording, the envhub calls) is the real code.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

pytest.importorskip("verifiers")

import verifiers.v1 as vf
from verifiers.v1.trace import AgentInfo, TraceTask
from verifiers.v1.types import AssistantMessage

from envhub.client import Sessions
from envhub.integrations.verifiers import EnvhubEnvConfig, EnvhubTasksetConfig, EnvhubVerifiersEnv


def _plan(target: str, task_id: str) -> list[str]:
    """The environment expert's winning actions for `task_id` (seed 0), played on its own session."""
    episodes = Sessions.connect(target, "alfworld")
    turn = episodes.start(task_id)
    plan = []
    while not turn.done:
        plan.append(episodes.expert(turn.session_id)[0])
        turn = episodes.step(turn.session_id, plan[-1])
    episodes.end(turn.session_id)
    episodes.close()
    return plan


class _Interaction:
    def __init__(self, task: Any, replies: list[str]) -> None:
        self.trace = vf.Trace(
            task=TraceTask(type="EnvhubTask", data=task.data), agent=AgentInfo(config=vf.AgentConfig())
        )
        self.seen: list[str] = []
        self._replies = iter(replies)

    async def turn(self, message: str | None = None) -> vf.Segment:
        self.seen.append(message or "")
        reply = next(self._replies, None)
        if reply is None:
            return vf.Segment(messages=[], terminated=True)
        return vf.Segment(messages=[AssistantMessage(content=f"I will do it. <action>{reply}</action>")])


class _ScriptedPlayer:
    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.interactions: list[_Interaction] = []

    @asynccontextmanager
    async def interaction(self, task: Any) -> AsyncIterator[_Interaction]:
        self.interactions.append(_Interaction(task, self.replies))
        yield self.interactions[-1]


class _Agents:
    def __init__(self, player: _ScriptedPlayer) -> None:
        self.player = player


def test_env_plays_envhub_episodes_resolved_by_plugin_id(alfworld_target: str) -> None:
    # verifiers' own entry: raw config (as from TOML or the CLI) narrowed by the taskset id, then loaded
    config = vf.resolve_env_config({"taskset": {"id": "envhub-verifiers", "target": alfworld_target}})
    assert isinstance(config, EnvhubEnvConfig) and isinstance(config.taskset, EnvhubTasksetConfig)
    env = vf.load_environment(config)
    assert type(env) is EnvhubVerifiersEnv
    tasks = list(env.taskset.take(2))
    assert [t.data.name for t in tasks] == ["train/00000", "train/00001"]
    plans = [_plan(alfworld_target, t.data.name) for t in tasks]
    winner, loser = _ScriptedPlayer(plans[0]), _ScriptedPlayer(["look", "inventory", "look"])

    async def play() -> None:
        await asyncio.gather(env.run(tasks[0], _Agents(winner)), env.run(tasks[1], _Agents(loser)))

    asyncio.run(play())
    won, lost = winner.interactions[0], loser.interactions[0]
    assert won.trace.rewards["envhub_reward"].score == 1.0 and won.trace.info["won"] is True
    assert lost.trace.rewards["envhub_reward"].score == 0.0 and lost.trace.info["won"] is False
    assert "Task:" in won.seen[0] and len(won.seen) == len(plans[0])
