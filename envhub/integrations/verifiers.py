"""verifiers (prime-rl) over envhub: a v1 `Taskset` of envhub tasks and the `Env` that plays them.

The taskset id is this module: `--env.taskset.id envhub-verifiers` (the `envhub_verifiers` module) with
`--env.taskset.target host:port` (or a list of replicas) and `--env.taskset.environment`.
As in verifiers' own TextArena and OpenEnv tasksets, the environment plays the user: `run()`
opens the model's interaction, each reply is parsed into an action and stepped on the envhub
session, the next observation is the next user turn, and the episode's summed reward is
recorded as `envhub_reward` (`won` in the trace's info). Steps of concurrent episodes share
envhub rounds (`StepBatcher`). Install `envhub[verifiers]`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf

from envhub.client import SessionPort, Sessions
from envhub.integrations.batching import StepBatcher
from envhub.integrations.text import parse_action, render_turn

SYSTEM_PROMPT = (
    "You are playing a text environment. Read the task and the observation, then reply with one "
    "command as <action>...</action>, chosen from the admissible actions when they are listed."
)


class EnvhubTasksetConfig(vf.TasksetConfig):
    target: str | list[str] = "localhost:50051"
    """The envhub server ("host:port"), or several replicas of it."""
    environment: str = "alfworld"
    split: str = "train"
    seed: int = 0
    """The environment seed of every task."""
    max_steps: int = 0
    """Per-episode step limit (0: the environment's default)."""


class EnvhubData(vf.TaskData):
    info: dict[str, Any]
    """The envhub task id and seed."""


class EnvhubTask(vf.Task[EnvhubData, vf.State, vf.TaskConfig]):
    pass


class EnvhubTaskset(vf.Taskset[EnvhubTask, EnvhubTasksetConfig]):
    """One task per envhub task of the configured split, in the server's order."""

    def load(self) -> Iterator[EnvhubTask]:
        config = self.config
        for task_id in _episodes(config).task_ids(config.split):
            yield EnvhubTask(
                EnvhubData(
                    name=task_id,
                    prompt=None,
                    system_prompt=SYSTEM_PROMPT,
                    info={"task_id": task_id, "seed": config.seed},
                ),
                config.task,
            )


class EnvhubEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


class EnvhubVerifiersEnv(vf.Env[EnvhubEnvConfig]):
    """Plays one envhub episode per task with the `player` agent."""

    _batcher: StepBatcher | None = None

    async def run(self, task: Any, agents: Any) -> None:
        config = self.config.taskset
        assert isinstance(config, EnvhubTasksetConfig)
        episodes = _episodes(config)
        if self._batcher is None:
            self._batcher = StepBatcher(episodes)
        info = task.data.info
        turn = await asyncio.to_thread(episodes.start, info["task_id"], seed=info["seed"])
        total = 0.0
        try:
            async with agents.player.interaction(task) as interaction:
                segment = await interaction.turn(render_turn(turn))
                while not segment.terminated:
                    turn = await self._batcher.step(turn.session_id, parse_action(segment.last_reply))
                    total += turn.reward
                    if turn.done:
                        break
                    segment = await interaction.turn(render_turn(turn))
        finally:
            await asyncio.to_thread(episodes.end, turn.session_id)
        interaction.trace.record_reward("envhub_reward", total)
        interaction.trace.info["won"] = turn.won


_CONNECTIONS: dict[tuple[str, ...], SessionPort] = {}


def _episodes(config: EnvhubTasksetConfig) -> SessionPort:
    """One connection per (targets, environment, max_steps), shared by the taskset and every episode."""
    targets = [config.target] if isinstance(config.target, str) else list(config.target)
    key = (*targets, config.environment, str(config.max_steps))
    if key not in _CONNECTIONS:
        _CONNECTIONS[key] = Sessions.connect(targets, config.environment, max_steps=config.max_steps)
    return _CONNECTIONS[key]


__all__ = ["EnvhubEnvConfig", "EnvhubTaskset", "EnvhubTasksetConfig", "EnvhubVerifiersEnv"]
