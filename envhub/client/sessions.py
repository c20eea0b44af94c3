"""The session port: sessions of one environment, started, stepped and ended, as `EnvView`s.

`SessionPort` is what every caller that plays episodes uses (the framework adapters in
`envhub.integrations`, the trainer's rollouts, its expert collection and branching); `Sessions`
implements it over any `EnvhubClient` (one server, a pool, a failover transport). One port, so a
second caller that needs "sessions, stepped" changes this one instead of writing its own.

    sessions = Sessions.connect("localhost:50051", "alfworld")      # or Sessions(client, "alfworld")
    view = sessions.start("train/00000", seed=0)
    view = sessions.step(view.session_id, "look")
    sessions.end(view.session_id)
    sessions.close()
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Protocol

from envhub.client.pool import EnvhubPool
from envhub.client.sync import EnvhubClient
from envhub.client.types import EnvView, Snapshot, TaskRef
from envhub.core.errors import EnvhubError


class SessionPort(Protocol):
    """Sessions of one environment kind; thread-safe (rollouts call it from a thread pool)."""

    environment: str
    """The environment kind every session plays."""

    def task_ids(self, split: str = "", families: Sequence[str] = ()) -> list[str]:
        """Ids of the environment's tasks (of one split, of some families, when given)."""
        ...

    def start(self, task: TaskRef | str, *, seed: int = 0, max_steps: int | None = None) -> EnvView:
        """A new session on a task (a task id, or `TaskRef(split=..., index=...)`)."""
        ...

    def start_group(
        self, task: TaskRef | str, *, size: int, seed: int = 0, max_steps: int | None = None
    ) -> list[EnvView]:
        """`size` sessions in the same state (a GRPO group): one start and `size - 1` forks of it (a fork copies
        the state in the worker, where a start may load a game); each view carries its own session id."""
        ...

    def reset(self, session_id: str, *, task: TaskRef | str | None = None, seed: int | None = None) -> EnvView:
        """Restart a session's episode in place, on the same task or on the one given."""
        ...

    def step(self, session_id: str, action: str, *, timeout: float | None = None) -> EnvView:
        """One action; the session's new view."""
        ...

    def step_each(
        self, steps: Sequence[tuple[str, str]], *, timeout: float | None = None
    ) -> list[EnvView | EnvhubError]:
        """One action for each of several sessions in one batched call, `[(session_id, action), ...]`:
        each new view, or the failed step's `EnvhubError` in its place."""
        ...

    def step_many(self, steps: Sequence[tuple[str, str]], *, timeout: float | None = None) -> list[EnvView]:
        """`step_each`, raising the first failure once every step ran."""
        ...

    def expert(self, session_id: str) -> list[str]:
        """The environment's expert's next actions from the session's state, best first."""
        ...

    def snapshot(self, session_id: str) -> bytes:
        """The session's state as signed opaque bytes (restored on any replica of the same kind)."""
        ...

    def restore(self, snapshot: bytes) -> EnvView:
        """A new session at a snapshot's state."""
        ...

    def fork(self, session_id: str, count: int = 1) -> list[str]:
        """`count` new sessions continuing independently from this one's current state."""
        ...

    def end(self, session_id: str) -> None:
        """Close one session."""
        ...

    def close(self) -> None:
        """Close the connection (open sessions stay until ended or reaped by the server)."""
        ...


class Sessions:
    """`SessionPort` over an `EnvhubClient`.

    `options` (the environment's session options, e.g. ALFWorld's `expert`), `max_steps` (0: the
    environment's default; `start` may give its own) and `admissible` (list the admissible actions
    in every view) apply to every session.
    """

    def __init__(
        self,
        client: EnvhubClient,
        environment: str,
        *,
        options: Mapping[str, str] | None = None,
        max_steps: int = 0,
        admissible: bool = True,
    ) -> None:
        self.client = client
        self.environment = environment
        self.options = dict(options or {})
        self.max_steps = max_steps
        self.admissible = admissible

    @classmethod
    def connect(
        cls,
        targets: str | Sequence[str],
        environment: str,
        *,
        token: str | None = None,
        timeout: float = 60.0,
        options: Mapping[str, str] | None = None,
        max_steps: int = 0,
        admissible: bool = True,
    ) -> Sessions:
        """Sessions on one server ("host:port"), or spread over several replicas (a list: an
        `EnvhubPool`, which routes each session to its replica and restores snapshots on any)."""
        names = [targets] if isinstance(targets, str) else list(targets)
        client = (
            EnvhubClient(names[0], token=token, timeout=timeout)
            if len(names) == 1
            else EnvhubPool(names, token=token, timeout=timeout)
        )
        return cls(client, environment, options=options, max_steps=max_steps, admissible=admissible)

    def task_ids(self, split: str = "", families: Sequence[str] = ()) -> list[str]:
        tasks = self.client.list_tasks(self.environment, split)
        return [task.task_id for task in tasks if not families or task.family in families]

    def start(self, task: TaskRef | str, *, seed: int = 0, max_steps: int | None = None) -> EnvView:
        start = self.client.create_session(
            self.environment,
            task,
            seed=seed,
            options=self.options,
            max_steps=self.max_steps if max_steps is None else max_steps,
            admissible=self.admissible,
        )
        return start.view

    def start_group(
        self, task: TaskRef | str, *, size: int, seed: int = 0, max_steps: int | None = None
    ) -> list[EnvView]:
        if size < 1:
            raise ValueError(f"a group has at least one session, not {size}")
        first = self.start(task, seed=seed, max_steps=max_steps)
        forks = self.fork(first.session_id, size - 1) if size > 1 else []
        return [first, *(dataclasses.replace(first, session_id=session_id) for session_id in forks)]

    def reset(self, session_id: str, *, task: TaskRef | str | None = None, seed: int | None = None) -> EnvView:
        return self.client.reset_session(session_id, task=task, seed=seed, admissible=self.admissible).view

    def step(self, session_id: str, action: str, *, timeout: float | None = None) -> EnvView:
        return self.client.step(session_id, action, admissible=self.admissible, timeout=timeout)

    def step_each(
        self, steps: Sequence[tuple[str, str]], *, timeout: float | None = None
    ) -> list[EnvView | EnvhubError]:
        return self.client.step_many(steps, admissible=self.admissible, return_errors=True, timeout=timeout)

    def step_many(self, steps: Sequence[tuple[str, str]], *, timeout: float | None = None) -> list[EnvView]:
        return self.client.step_many(steps, admissible=self.admissible, timeout=timeout)

    def expert(self, session_id: str) -> list[str]:
        return self.client.expert_actions(session_id)

    def snapshot(self, session_id: str) -> bytes:
        return bytes(self.client.snapshot(session_id).data)

    def restore(self, snapshot: bytes) -> EnvView:
        held = Snapshot(snapshot, 0, environment=self.environment)  # so a pool places it by environment
        return self.client.restore(held, admissible=self.admissible).view

    def fork(self, session_id: str, count: int = 1) -> list[str]:
        return self.client.fork(session_id, count)

    def end(self, session_id: str) -> None:
        self.client.close_session(session_id)

    def close(self) -> None:
        self.client.close()
