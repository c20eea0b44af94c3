"""The few session operations a rollout needs, as a protocol, and its envhub-client implementation.

Rollout strategies talk to `EnvPort`, not to gRPC, so a strategy reads like the algorithm.
`ClientEnvPort` implements it over `envhub.client.EnvhubClient` (real gRPC). What a session shows is
envhub's own `EnvView` (the one the framework adapters return), so both sides read it the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from envhub.core.errors import EnvhubError
from envhub.integrations.episodes import EnvView, env_view


class EnvPort(Protocol):
    """Session operations used by rollout strategies (thread-safe: called from a thread pool); a turn's
    steps go through `step_many` (one batched call)."""

    def create(self, task_id: str, *, seed: int, max_steps: int, admissible: bool) -> EnvView: ...
    def fork(self, session_id: str, count: int) -> list[str]: ...
    def step(self, session_id: str, action: str, *, admissible: bool, timeout: float) -> EnvView: ...
    def step_many(
        self, steps: Sequence[tuple[str, str]], *, admissible: bool, timeout: float
    ) -> list[EnvView | EnvhubError]: ...
    def snapshot(self, session_id: str) -> bytes: ...
    def restore(self, snapshot: bytes, *, admissible: bool) -> EnvView: ...
    def expert(self, session_id: str) -> list[str]: ...
    def close(self, session_id: str) -> None: ...
    def task_ids(self, split: str, families: Sequence[str] = ()) -> list[str]: ...


class ClientEnvPort:
    """`EnvPort` over `envhub.client.EnvhubClient` for one environment kind; `options` go to every new
    session (`env.options`, e.g. a ScienceWorld simplification)."""

    def __init__(self, client: Any, environment: str, options: Mapping[str, str] | None = None) -> None:
        self.client = client
        self.environment = environment
        self.options = dict(options or {})

    def create(self, task_id: str, *, seed: int, max_steps: int, admissible: bool) -> EnvView:
        start = self.client.create_session(
            self.environment,
            task=task_id,
            seed=seed,
            max_steps=max_steps,
            admissible=admissible,
            options=self.options,
        )
        return env_view(start.session_id, start.observation)

    def fork(self, session_id: str, count: int) -> list[str]:
        return list(self.client.fork(session_id, count))

    def step(self, session_id: str, action: str, *, admissible: bool, timeout: float) -> EnvView:
        result = self.client.step(session_id, action, admissible=admissible, timeout=timeout)
        return env_view(session_id, result.observation, result)

    def step_many(
        self, steps: Sequence[tuple[str, str]], *, admissible: bool, timeout: float
    ) -> list[EnvView | EnvhubError]:
        """Every `(session_id, action)` in one batched call (StepBatch); a failed step's error in its place."""
        results = self.client.step_many(steps, admissible=admissible, return_errors=True, timeout=timeout)
        return [
            result if isinstance(result, EnvhubError) else env_view(session_id, result.observation, result)
            for (session_id, _), result in zip(steps, results, strict=True)
        ]

    def snapshot(self, session_id: str) -> bytes:
        return bytes(self.client.snapshot(session_id).data)

    def restore(self, snapshot: bytes, *, admissible: bool) -> EnvView:
        start = self.client.restore(snapshot, admissible=admissible)
        return env_view(start.session_id, start.observation)

    def expert(self, session_id: str) -> list[str]:
        return list(self.client.expert_actions(session_id))

    def close(self, session_id: str) -> None:
        self.client.close_session(session_id)

    def task_ids(self, split: str, families: Sequence[str] = ()) -> list[str]:
        tasks = self.client.list_tasks(self.environment, split=split)
        return [task.task_id for task in tasks if not families or task.family in families]
