"""`Episodes`: the envhub session calls every framework adapter makes, in one place.

An adapter asks for what a host framework needs (start an episode, step it, step many at
once, snapshot, restore, fork) and gets `EnvView` values back; only this module touches the
envhub client, so the adapters follow client changes through it. One target gives an
`EnvhubClient`; several give an `EnvhubPool`, which routes each session to the replica that
owns it and restores snapshots on any replica.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envhub.client import EnvhubClient, EnvhubError, EnvhubPool, Observation, StepResult, TaskRef


@dataclass(frozen=True)
class EnvView:
    """What an episode shows after a start, a step or a restore (the envhub trainer's rollouts use it too)."""

    session_id: str
    text: str
    task_description: str = ""
    admissible: tuple[str, ...] = ()
    reward: float = 0.0
    score: float = 0.0
    step_index: int = 0
    terminated: bool = False
    truncated: bool = False
    won: bool = False
    info: Mapping[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


def env_view(session_id: str, observation: Observation, result: StepResult | None = None) -> EnvView:
    """The view of a session's `observation`, with the outcome of the step that led to it (`result`), if any."""
    return EnvView(
        session_id=session_id,
        text=observation.text,
        task_description=observation.task_description,
        admissible=tuple(observation.admissible_actions or ()),
        reward=result.reward if result else 0.0,
        score=observation.score,
        step_index=observation.step_index,
        terminated=result.terminated if result else False,
        truncated=result.truncated if result else False,
        won=result.won if result else False,
        info=dict(observation.info),
    )


class Episodes:
    """Sessions of one environment kind on one envhub server, or spread over several replicas.

    `max_steps` (0: the environment's default) and `admissible` (ask for the admissible
    actions with every observation) apply to every episode; `options` are the environment's
    session options (e.g. ALFWorld's `expert`).
    """

    def __init__(
        self,
        targets: str | Sequence[str],
        environment: str,
        *,
        token: str | None = None,
        max_steps: int = 0,
        admissible: bool = True,
        options: Mapping[str, str] | None = None,
        timeout: float = 60.0,
    ) -> None:
        names = [targets] if isinstance(targets, str) else list(targets)
        self.client: EnvhubClient | EnvhubPool = (
            EnvhubClient(names[0], token=token, timeout=timeout)
            if len(names) == 1
            else EnvhubPool(names, token=token, timeout=timeout)
        )
        self.environment = environment
        self.max_steps = max_steps
        self.admissible = admissible
        self.options = dict(options or {})

    def task_ids(self, split: str = "") -> list[str]:
        """The ids of the environment's tasks (of one split when given)."""
        return [task.task_id for task in self.client.list_tasks(self.environment, split)]

    def start(self, task: TaskRef | str, *, seed: int = 0) -> EnvView:
        """A new episode on a task (a task id, or `TaskRef(split=..., index=...)`)."""
        start = self.client.create_session(
            self.environment,
            task,
            seed=seed,
            options=self.options,
            max_steps=self.max_steps,
            admissible=self.admissible,
        )
        return env_view(start.session_id, start.observation)

    def reset(self, session_id: str, *, task: TaskRef | str | None = None, seed: int | None = None) -> EnvView:
        """Restart an episode in place, on the same task or on the one given."""
        start = self.client.reset_session(session_id, task=task, seed=seed, admissible=self.admissible)
        return env_view(session_id, start.observation)

    def step(self, session_id: str, action: str) -> EnvView:
        result = self.client.step(session_id, action, admissible=self.admissible)
        return env_view(session_id, result.observation, result)

    def step_many(self, steps: Sequence[tuple[str, str]]) -> list[EnvView]:
        """One action for each of several episodes, sent together: `[(session_id, action), ...]` -> turns in order.

        Every step runs; then the first failure is raised (`step_each` returns failures in place)."""
        turns = []
        for outcome in self.step_each(steps):
            if isinstance(outcome, EnvhubError):
                raise outcome
            turns.append(outcome)
        return turns

    def step_each(self, steps: Sequence[tuple[str, str]]) -> list[EnvView | EnvhubError]:
        """`step_many` with each failed step's `EnvhubError` in its turn's place (one round per replica)."""
        results = self.client.step_many(steps, admissible=self.admissible, return_errors=True)
        return [
            result if isinstance(result, EnvhubError) else env_view(session_id, result.observation, result)
            for (session_id, _), result in zip(steps, results, strict=True)
        ]

    def expert(self, session_id: str) -> list[str]:
        """The environment's expert's next actions (best first), where it has an expert."""
        return self.client.expert_actions(session_id)

    def snapshot(self, session_id: str) -> bytes:
        """The episode's state as signed opaque bytes (restore them on any replica of the same kind)."""
        return bytes(self.client.snapshot(session_id).data)

    def restore(self, snapshot: bytes) -> EnvView:
        """A new episode at a snapshot's state."""
        start = self.client.restore(snapshot, admissible=self.admissible)
        return env_view(start.session_id, start.observation)

    def fork(self, session_id: str, count: int = 1) -> list[str]:
        """`count` new episodes continuing independently from this one's current state."""
        return self.client.fork(session_id, count)

    def end(self, session_id: str) -> None:
        """Close one episode's session."""
        self.client.close_session(session_id)

    def close(self) -> None:
        """Close the connection(s); open sessions stay until ended or reaped by the server."""
        self.client.close()
