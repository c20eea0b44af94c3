"""OpenEnv over envhub: `EnvhubEnv` (an OpenEnv `EnvClient`) and `EnvhubEnvironment` (an OpenEnv `Environment`).

`EnvhubEnv` is what an OpenEnv user constructs in place of an environment's own client:
OpenEnv's `EnvClient.reset` / `step` / `state`, its `.sync()` wrapper and its context
managers run unchanged; only the transport differs: the messages OpenEnv would send over its
WebSocket are answered by an `EnvhubEnvironment` in this process, which makes envhub gRPC
calls, and the answers are serialized with OpenEnv's own server-side serializer. For OpenEnv
clients in other processes, `create_openenv_app` serves `EnvhubEnvironment` with OpenEnv's
own FastAPI server.

envhub adds `snapshot()`, `restore()`, `fork()` and `expert_actions()` to both classes.
Install with `pip install 'envhub[openenv]'`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.serialization import deserialize_action, serialize_observation
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
    """An OpenEnv client whose environment is an envhub session.

    `base_url` is an envhub gRPC target ("host:port") or a list of replicas. Use it as any
    OpenEnv client: `async with EnvhubEnv(...) as env`, or `with EnvhubEnv(...).sync() as env`,
    then `reset()`, `step(EnvhubAction(command=...))` (a plain string works too), `state()`.
    """

    def __init__(
        self,
        base_url: str | Sequence[str],
        environment: str,
        *,
        task_ids: Sequence[str] | None = None,
        split: str = "train",
        max_steps: int = 0,
        admissible: bool = True,
        token: str | None = None,
        message_timeout_s: float = 60.0,
    ) -> None:
        super().__init__("http://envhub.invalid", message_timeout_s=message_timeout_s)
        self._episodes: SessionPort = Sessions.connect(
            base_url, environment, token=token, max_steps=max_steps, admissible=admissible, timeout=message_timeout_s
        )
        self._owns_episodes = True
        self._environment = EnvhubEnvironment(self._episodes, task_ids=task_ids, split=split)

    @classmethod
    def _adopting(cls, environment: EnvhubEnvironment, message_timeout_s: float) -> EnvhubEnv:
        client = cls.__new__(cls)
        EnvClient.__init__(client, "http://envhub.invalid", message_timeout_s=message_timeout_s)
        client._episodes = environment.episodes
        client._owns_episodes = False
        client._environment = environment
        return client

    # The transport: OpenEnv's messages answered by the in-process EnvhubEnvironment.
    async def connect(self) -> EnvhubEnv:
        return self

    async def disconnect(self) -> None:
        await asyncio.to_thread(self._environment.close)
        if self._owns_episodes:
            self._episodes.close()

    async def _send_and_receive(self, message: dict[str, Any]) -> dict[str, Any]:
        return await asyncio.wait_for(asyncio.to_thread(self._answer, message), timeout=self._message_timeout)

    def _answer(self, message: dict[str, Any]) -> dict[str, Any]:
        """What OpenEnv's server would answer to `message` (its WebSocket protocol, as dicts)."""
        kind, data = message.get("type"), message.get("data", {})
        if kind == "reset":
            return {"type": "observation", "data": serialize_observation(self._environment.reset(**data))}
        if kind == "step":
            action = deserialize_action(data, EnvhubAction)
            assert isinstance(action, EnvhubAction)
            return {"type": "observation", "data": serialize_observation(self._environment.step(action))}
        if kind == "state":
            return {"type": "state", "data": self._environment.state.model_dump()}
        raise ValueError(f"EnvhubEnv cannot answer an OpenEnv {kind!r} message")

    # OpenEnv's conversions
    def _step_payload(self, action: EnvhubAction | str) -> dict[str, Any]:
        return EnvhubAction(command=action).model_dump() if isinstance(action, str) else action.model_dump()

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[EnvhubObservation]:
        observation = EnvhubObservation(**payload["observation"], reward=payload.get("reward"), done=payload["done"])
        return StepResult(observation=observation, reward=payload.get("reward"), done=bool(payload["done"]))

    def _parse_state(self, payload: dict[str, Any]) -> EnvhubState:
        return EnvhubState.model_validate(payload)

    # What envhub adds
    async def expert_actions(self) -> list[str]:
        return await asyncio.to_thread(self._environment.expert_actions)

    async def snapshot(self) -> bytes:
        return await asyncio.to_thread(self._environment.snapshot)

    async def restore(self, snapshot: bytes) -> StepResult[EnvhubObservation]:
        observation = await asyncio.to_thread(self._environment.restore, snapshot)
        return self._parse_result(serialize_observation(observation))

    async def fork(self, count: int = 1) -> list[EnvhubEnv]:
        """`count` clients, each on an independent copy of this episode (same connection)."""
        children = await asyncio.to_thread(self._environment.fork, count)
        return [EnvhubEnv._adopting(child, self._message_timeout) for child in children]


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
