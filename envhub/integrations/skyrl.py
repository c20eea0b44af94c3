"""SkyRL-gym over envhub: `EnvhubTextEnv`, one envhub session as a SkyRL-gym `BaseTextEnv`, registered as "envhub".

Importing this module registers the environment the way SkyRL-gym registers its own (`skyrl_gym.register` with an
"module:Class" entry point), so SkyRL's trainers make it by name: `skyrl_gym.make("envhub", env_config=...,
extras=...)`, as SkyRL-train does with `environment.env_class=envhub` and a data set row's extras.

* `env_config` (SkyRL-train's `environment.skyrl_gym.envhub` section; a mapping or OmegaConf): `target`
  ("host:port", or a list of replicas), `environment` (alfworld, scienceworld, webshop, searchqa, ...),
  `max_turns` (default 50), `seed` (default 0).
* `extras` (a data set row's extras): `task_id` (else `split` and `index`), optionally `seed` and `max_turns`.

`init(prompt)` starts the session and returns `prompt` (e.g. a system message; may be empty) plus the first turn
as a user message, written with the environment's action format (`envhub.client.formats`: the same template the
envhub trainer shows). `step(reply)` parses the reply with that format, steps the session, and returns the next
turn as a user message, the step's reward, `done` (the episode ended, or `max_turns` replies), and metadata with
the session id, the action sent (None for an unparsable reply, which steps nothing), `won` and the score.
`snapshot()`, `restore()` and `fork()` reach envhub's own. Install `envhub[skyrl]`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType

from envhub.client import EnvView, SessionPort, Sessions, TaskRef
from envhub.client.formats import ActionFormat, action_format

ENV_ID = "envhub"
"""The SkyRL-gym id of envhub episodes (`environment.env_class` in SkyRL-train)."""
MAX_TURNS = 50
"""Replies per episode unless `env_config` or the row's extras say otherwise (ALFWorld's papers' limit)."""

_CONNECTIONS: dict[tuple[str, ...], SessionPort] = {}


def connect(target: str | Sequence[str], environment: str) -> SessionPort:
    """One connection per (targets, environment), shared by every episode of the process."""
    targets = [target] if isinstance(target, str) else list(target)
    key = (*targets, environment)
    if key not in _CONNECTIONS:
        _CONNECTIONS[key] = Sessions.connect(targets, environment)
    return _CONNECTIONS[key]


class EnvhubTextEnv(BaseTextEnv):
    """One envhub episode as a SkyRL-gym text environment (module docstring: configuration and messages)."""

    def __init__(self, env_config: Mapping[str, Any] | None = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        config, extras = dict(env_config or {}), dict(extras or {})
        if "target" not in config:
            raise ValueError("envhub's SkyRL env needs env_config.target: the envhub server's host:port")
        self.environment: str = config.get("environment", "alfworld")
        self.episodes = connect(config["target"], self.environment)
        self.format: ActionFormat = action_format(self.environment)
        self.max_turns = int(extras.get("max_turns", config.get("max_turns", MAX_TURNS)))
        self.seed = int(extras.get("seed", config.get("seed", 0)))
        if "task_id" in extras:
            self.task = TaskRef(str(extras["task_id"]))
        else:
            self.task = TaskRef(split=str(extras.get("split", "train")), index=int(extras.get("index", 0)))
        self.view: EnvView | None = None

    @classmethod
    def from_session(cls, env: EnvhubTextEnv, view: EnvView, turns: int) -> EnvhubTextEnv:
        """A copy of `env`'s settings playing the session of `view` from reply `turns` on."""
        copy = cls.__new__(cls)
        BaseTextEnv.__init__(copy)
        copy.environment, copy.episodes, copy.format = env.environment, env.episodes, env.format
        copy.max_turns, copy.seed, copy.task = env.max_turns, env.seed, env.task
        copy.view, copy.turns = view, turns
        return copy

    def init(self, prompt: ConversationType | None = None) -> tuple[ConversationType, dict[str, Any]]:
        """Start the episode: `prompt`'s messages, then its first turn as a user message."""
        self.close()
        self.view, self.turns = self.episodes.start(self.task, seed=self.seed), 0
        return [*(prompt or []), self._user(self.view)], self._metadata(self.view, action=None)

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Parse the reply with the environment's action format and play it (an unparsable reply steps nothing)."""
        view = self._current()
        self.turns += 1
        command = self.format.parse(action)
        if command is not None:
            view = self.view = self.episodes.step(view.session_id, command)
        done = view.done or self.turns >= self.max_turns
        if done:
            observations: ConversationType = []
        elif command is None:
            observations = [{"role": "user", "content": self.format.invalid_observation}]
        else:
            observations = [self._user(view)]
        reward = view.reward if command is not None else 0.0
        return BaseTextEnvStepOutput(
            observations=observations,
            reward=reward,
            done=done,
            metadata=self._metadata(view, action=command),
        )

    def get_metrics(self) -> dict[str, Any]:
        view = self.view
        return {"turns": self.turns, "won": float(view.won) if view else 0.0, "score": view.score if view else 0.0}

    def snapshot(self) -> bytes:
        """The episode's state, as signed bytes for `restore`."""
        return self.episodes.snapshot(self._current().session_id)

    def restore(self, snapshot: bytes) -> ConversationType:
        """Continue from `snapshot` in a new session (this one is closed); the restored turn as a user message."""
        view = self.episodes.restore(snapshot)
        turns = self.turns
        self.close()
        self.view, self.turns = view, turns
        return [self._user(view)]

    def fork(self, count: int = 1) -> list[EnvhubTextEnv]:
        """`count` independent copies of this episode at its current state (each its own envhub session)."""
        view = self._current()
        ids = self.episodes.fork(view.session_id, count)
        return [self.from_session(self, EnvView(**{**view.__dict__, "session_id": i}), self.turns) for i in ids]

    def close(self) -> None:
        """End the envhub session (the shared connection stays open for the process's other episodes)."""
        if self.view is not None:
            self.episodes.end(self.view.session_id)
            self.view = None

    def _current(self) -> EnvView:
        if self.view is None:
            raise RuntimeError("call init() before step(), snapshot() or fork()")
        return self.view

    def _user(self, view: EnvView) -> dict[str, str]:
        text = self.format.render(view.task_description, view.text, view.admissible or (), view.step_index)
        return {"role": "user", "content": text}

    def _metadata(self, view: EnvView, action: str | None) -> dict[str, Any]:
        return {
            "session_id": view.session_id,
            "task_id": self.task.task_id or f"{self.task.split}/{self.task.index}",
            "action": action,
            "won": view.won,
            "score": view.score,
            "step_index": view.step_index,
        }


if ENV_ID not in skyrl_gym.registry:
    skyrl_gym.register(id=ENV_ID, entry_point="envhub.integrations.skyrl:EnvhubTextEnv")

__all__ = ["ENV_ID", "EnvhubTextEnv", "connect"]
