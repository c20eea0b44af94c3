"""A `gymnasium.Env` over one envhub session: text observations, text actions.

    from envhub.client import EnvhubClient
    from envhub.gym import EnvhubGymEnv

    env = EnvhubGymEnv(EnvhubClient("localhost:50051"), "scienceworld", "boil/0")
    observation, info = env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step("look around")
    observation, info = env.reset(options={"task": TaskRef(split="dev", index=2)})

The session is created on the first `reset` and reset in place afterwards; `close()` closes it.
`reset(options={"task": ...})` (a task id or a `TaskRef`) plays that task from then on.
Both spaces are `gymnasium.spaces.Text` over printable ASCII (`string.printable`).
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any

import gymnasium
from gymnasium import spaces

from envhub.client import types
from envhub.client.sync import EnvhubClient

CHARSET = frozenset(string.printable)
"""Characters of observations and actions (printable ASCII, including whitespace)."""


class EnvhubGymEnv(gymnasium.Env[str, str]):
    """One envhub session as a gymnasium environment (reward, terminated and truncated from the server)."""

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 1}  # noqa: RUF012 - gymnasium declares it so

    def __init__(
        self,
        client: EnvhubClient,
        environment: str,
        task: types.TaskRef | str,
        *,
        env_options: Mapping[str, str] | None = None,
        max_steps: int = 0,
        admissible: bool = False,
        max_observation_length: int = 16384,
        max_action_length: int = 256,
        render_mode: str | None = None,
    ) -> None:
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', not {render_mode!r}")
        self._client = client
        self._environment = environment
        self._task = types.TaskRef.of(task)
        self._current_task = ""
        self._env_options = dict(env_options or {})
        self._max_steps = max_steps
        self._admissible = admissible
        self._session_id: str | None = None
        self._last_text = ""
        self.render_mode = render_mode
        self.observation_space = spaces.Text(max_length=max_observation_length, min_length=0, charset=CHARSET)
        self.action_space = spaces.Text(max_length=max_action_length, min_length=1, charset=CHARSET)

    @property
    def session_id(self) -> str | None:
        """The server session behind this environment (None before the first reset)."""
        return self._session_id

    def _info(self, view: types.EnvView, task_id: str) -> dict[str, Any]:
        info: dict[str, Any] = dict(view.info)
        info.update(
            task_id=task_id,
            task_description=view.task_description,
            score=view.score,
            step_index=view.step_index,
            won=view.won,
        )
        if view.admissible is not None:
            info["admissible_actions"] = list(view.admissible)
        return info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Reset; `options={"task": ...}` (a task id or `TaskRef`) plays that task now and on later resets.

        Any other option key raises ValueError (session options go to the constructor's `env_options`).
        """
        super().reset(seed=seed)
        unknown = sorted(set(options or {}) - {"task"})
        if unknown:
            raise ValueError(f"unknown reset option(s) {unknown}; the only one is 'task'")
        if options and "task" in options:
            self._task = types.TaskRef.of(options["task"])
        server_seed = seed if seed is not None else int(self.np_random.integers(2**31))
        if self._session_id is None:
            start = self._client.create_session(
                self._environment,
                self._task,
                seed=server_seed,
                options=self._env_options,
                max_steps=self._max_steps,
                admissible=self._admissible,
            )
            self._session_id = start.session_id
        else:
            start = self._client.reset_session(
                self._session_id, task=self._task, seed=server_seed, admissible=self._admissible
            )
        self._last_text = start.view.text
        self._current_task = start.task.task_id
        return start.view.text, self._info(start.view, start.task.task_id)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._session_id is None:
            raise RuntimeError("call reset() before step()")
        view = self._client.step(self._session_id, action, admissible=self._admissible)
        self._last_text = view.text
        return view.text, view.reward, view.terminated, view.truncated, self._info(view, self._current_task)

    def render(self) -> str | None:
        return self._last_text if self.render_mode == "ansi" else None

    def close(self) -> None:
        """Close the server session (safe to call twice)."""
        if self._session_id is not None:
            session_id, self._session_id = self._session_id, None
            self._client.close_session(session_id)
