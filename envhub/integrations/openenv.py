"""OpenEnv over envhub: `EnvhubEnvironment` (an OpenEnv `Environment`), its server and its client `EnvhubEnv`.

* `EnvhubEnvironment` is OpenEnv's server-side environment interface (`reset` / `step` /
  `state`) over one envhub session at a time, plus what envhub adds: `snapshot()`, `restore()`,
  `fork()` and `expert_actions()`. Used directly, it is an in-process OpenEnv environment.
* `create_openenv_app(target, environment)` serves it with OpenEnv's own FastAPI server (one
  environment per OpenEnv session); `python -m envhub.integrations.openenv --target ... --env ...`
  runs that server with uvicorn.
* `EnvhubEnv` is its OpenEnv client (an `EnvClient` with OpenEnv's own transport). The
  `openenv-envhub_env` package (deploy/openenv) makes it discoverable:
  `AutoEnv.from_env("envhub", base_url=...)`; `GenericEnvClient` works too.

Install with `pip install 'envhub[openenv]'` (and `./deploy/openenv` for AutoEnv).
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Sequence
from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

from envhub.client import EnvView, SessionPort, Sessions, TaskRef


class EnvhubAction(Action):
    """One text command (e.g. ALFWorld's "go to fridge 1")."""

    command: str = Field(description="The text command to play")


class EnvhubObservation(Observation):
    """An envhub observation; `reward` and `done` are OpenEnv's, the rest mirrors envhub's."""

    text: str = ""
    task_description: str = ""
    admissible_actions: list[str] = Field(default_factory=list)
    score: float = 0.0
    step_index: int = 0
    won: bool = False
    truncated: bool = False


class EnvhubState(State):
    """`episode_id` is the envhub session id."""

    environment: str = ""
    task_id: str = ""
    done: bool = False
    won: bool = False
    score: float = 0.0


def _observation(turn: EnvView) -> EnvhubObservation:
    return EnvhubObservation(
        text=turn.text,
        task_description=turn.task_description,
        admissible_actions=list(turn.admissible or ()),
        score=turn.score,
        step_index=turn.step_index,
        won=turn.won,
        truncated=turn.truncated,
        done=turn.done,
        reward=turn.reward,
    )


class EnvhubEnvironment(Environment[EnvhubAction, EnvhubObservation, EnvhubState]):
    """One envhub episode behind OpenEnv's server-side `Environment` interface.

    `reset()` starts (first call) or restarts the episode; `reset(task_id=...)`, or
    `reset(split=..., index=...)`, picks the task, otherwise the next of `task_ids` in turn
    (all tasks of `split` by default). The envhub session lives until `close()`.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, episodes: SessionPort, *, task_ids: Sequence[str] | None = None, split: str = "train") -> None:
        super().__init__()
        self.episodes = episodes
        self._task_ids = list(task_ids) if task_ids is not None else None
        self._split = split
        self._turns = itertools.count()
        self._turn: EnvView | None = None
        self._task_id = ""

    def _next_task(self) -> str:
        if self._task_ids is None:
            self._task_ids = self.episodes.task_ids(self._split)
        if not self._task_ids:
            raise ValueError(f"no {self.episodes.environment} tasks in split {self._split!r}")
        return self._task_ids[next(self._turns) % len(self._task_ids)]

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        split: str | None = None,
        index: int | None = None,
        **kwargs: Any,
    ) -> EnvhubObservation:
        """Start or restart the episode (`episode_id` is ignored: envhub names its sessions)."""
        if task_id is None and index is None:
            task_id = self._next_task()
        task = TaskRef(task_id) if task_id else TaskRef(split=split or "", index=index)
        if self._turn is None:
            self._turn = self.episodes.start(task, seed=seed or 0)
        else:
            self._turn = self.episodes.reset(self._turn.session_id, task=task, seed=seed)
        self._task_id = task_id or f"{split}/{index}"
        return _observation(self._turn)

    def step(self, action: EnvhubAction, timeout_s: float | None = None, **kwargs: Any) -> EnvhubObservation:
        self._turn = self.episodes.step(self._session(), action.command)
        return _observation(self._turn)

    @property
    def state(self) -> EnvhubState:
        turn = self._turn
        return EnvhubState(
            episode_id=turn.session_id if turn else None,
            step_count=turn.step_index if turn else 0,
            environment=self.episodes.environment,
            task_id=self._task_id,
            done=turn.done if turn else False,
            won=turn.won if turn else False,
            score=turn.score if turn else 0.0,
        )

    def _session(self) -> str:
        if self._turn is None:
            raise RuntimeError("call reset() before step(), snapshot() or fork()")
        return self._turn.session_id

    def expert_actions(self) -> list[str]:
        """The environment's expert's next actions, best first."""
        return self.episodes.expert(self._session())

    def snapshot(self) -> bytes:
        """The episode's state, as signed bytes for `restore`."""
        return self.episodes.snapshot(self._session())

    def restore(self, snapshot: bytes) -> EnvhubObservation:
        """Continue from `snapshot` in a new session (this episode's session is closed)."""
        turn = self.episodes.restore(snapshot)
        self.close()
        self._turn = turn
        return _observation(turn)

    def fork(self, count: int = 1) -> list[EnvhubEnvironment]:
        """`count` independent copies of this episode at its current state."""
        parent = self._turn
        if parent is None:
            raise RuntimeError("call reset() before fork()")
        children = []
        for session_id in self.episodes.fork(parent.session_id, count):
            child = EnvhubEnvironment(self.episodes, task_ids=self._task_ids, split=self._split)
            child._turn = EnvView(**{**parent.__dict__, "session_id": session_id})
            child._task_id = self._task_id
            children.append(child)
        return children

    def close(self) -> None:
        """End the envhub session (the connection is the `SessionPort`'s owner's to close)."""
        if self._turn is not None:
            self.episodes.end(self._turn.session_id)
            self._turn = None


class EnvhubEnv(EnvClient[EnvhubAction, EnvhubObservation, EnvhubState]):
    """The OpenEnv client of envhub episodes served by OpenEnv's own server (`create_openenv_app`).

    Everything but the three conversions OpenEnv asks of an environment's client is OpenEnv's:
    its WebSocket transport, `reset` / `step` / `state`, `.sync()`, the context managers.
    `EnvhubEnv(base_url="http://localhost:8000")`, or with the `openenv-envhub_env` package
    installed, `AutoEnv.from_env("envhub", base_url=...)`. A plain string works as an action.
    """

    def _step_payload(self, action: EnvhubAction | str) -> dict[str, Any]:
        return EnvhubAction(command=action).model_dump() if isinstance(action, str) else action.model_dump()

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[EnvhubObservation]:
        observation = EnvhubObservation(**payload["observation"], reward=payload.get("reward"), done=payload["done"])
        return StepResult(observation=observation, reward=payload.get("reward"), done=bool(payload["done"]))

    def _parse_state(self, payload: dict[str, Any]) -> EnvhubState:
        return EnvhubState.model_validate(payload)


def create_openenv_app(
    targets: str | Sequence[str],
    environment: str,
    *,
    split: str = "train",
    max_steps: int = 0,
    max_concurrent_envs: int = 64,
    token: str | None = None,
) -> Any:
    """OpenEnv's FastAPI server (`/ws`, `/reset`, `/step`, ...) for envhub episodes, one per OpenEnv session.

    Serve it with `uvicorn`; any OpenEnv client (`GenericEnvClient`, TRL's OpenEnv examples) can connect.
    """
    episodes = Sessions.connect(targets, environment, token=token, max_steps=max_steps)
    return create_fastapi_app(
        lambda: EnvhubEnvironment(episodes, split=split),
        EnvhubAction,
        EnvhubObservation,
        max_concurrent_envs=max_concurrent_envs,
    )


__all__ = [
    "EnvhubAction",
    "EnvhubEnv",
    "EnvhubEnvironment",
    "EnvhubObservation",
    "EnvhubState",
    "create_openenv_app",
]


def main(argv: Sequence[str] | None = None) -> None:
    """Serve envhub episodes with OpenEnv's server: `python -m envhub.integrations.openenv --target ... --env ...`."""
    import uvicorn

    parser = argparse.ArgumentParser(description="OpenEnv's server over an envhub server")
    parser.add_argument("--target", action="append", required=True, help="envhub host:port (repeat for replicas)")
    parser.add_argument("--env", required=True, help="the envhub environment, e.g. alfworld")
    parser.add_argument("--split", default="train")
    parser.add_argument("--host", default="localhost")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    uvicorn.run(create_openenv_app(args.target, args.env, split=args.split), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
