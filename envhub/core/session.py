"""A session: one environment playing one task, with everything the server adds.

`Session` owns the step limit, the action log, the observation digests that make
replay verifiable, and conversion to and from `SessionState` (the unsigned content
of a snapshot). It is the in-process API: the server runs exactly this code inside
its worker processes, so an episode over gRPC equals the same episode in-process.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from envhub.core import errors
from envhub.core.environment import Environment, EnvironmentKind, Observation, StepResult, TaskSpec

DIGEST_BYTES = 16


def observation_digest(text: str) -> bytes:
    """First 16 bytes of SHA-256 of an observation text (what replay verifies)."""
    return hashlib.sha256(text.encode("utf-8")).digest()[:DIGEST_BYTES]


@dataclass(frozen=True)
class SessionStep:
    """A `StepResult` plus what the session layer adds."""

    result: StepResult
    step_index: int
    truncated: bool

    @property
    def done(self) -> bool:
        return self.result.terminated or self.truncated


@dataclass(frozen=True)
class SessionState:
    """Everything needed to rebuild a session: the content of a snapshot."""

    environment: str
    environment_version: str
    task_id: str
    seed: int
    options: Mapping[str, str]
    max_steps: int
    step_index: int
    actions: tuple[str, ...]
    digests: tuple[bytes, ...]
    reset_digest: bytes
    last_observation: Observation
    done: bool
    native_state: str = ""


@dataclass
class Session:
    """One live episode. Create with `Session.start` or `Session.restore`."""

    kind: EnvironmentKind
    env: Environment
    task: TaskSpec
    seed: int
    options: Mapping[str, str]
    max_steps: int
    observation: Observation
    reset_digest: bytes
    actions: list[str] = field(default_factory=list)
    digests: list[bytes] = field(default_factory=list)
    done: bool = False

    @classmethod
    def start(
        cls,
        kind: EnvironmentKind,
        task: TaskSpec,
        *,
        seed: int = 0,
        options: Mapping[str, str] | None = None,
        max_steps: int = 0,
        env: Environment | None = None,
    ) -> Session:
        """Create (or reuse `env`) and reset onto `task`."""
        options = dict(options or {})
        try:
            kind.validate_options(options)
        except ValueError as exc:
            raise errors.invalid_argument(str(exc), "BAD_OPTION") from exc
        owned = env is None
        env = env or kind.create()
        try:
            observation = env.reset(task, seed=seed, options=options)
        except BaseException:
            if owned:
                env.close()
            raise
        return cls(
            kind=kind,
            env=env,
            task=task,
            seed=seed,
            options=options,
            max_steps=max_steps or kind.default_max_steps,
            observation=observation,
            reset_digest=observation_digest(observation.text),
        )

    @property
    def step_index(self) -> int:
        return len(self.actions)

    def reset(self, task: TaskSpec | None = None, seed: int | None = None) -> Observation:
        """Reset onto the same or another task / seed."""
        self.task = task or self.task
        self.seed = self.seed if seed is None else seed
        self.observation = self.env.reset(self.task, seed=self.seed, options=self.options)
        self.reset_digest = observation_digest(self.observation.text)
        self.actions.clear()
        self.digests.clear()
        self.done = False
        return self.observation

    def step(self, action: str) -> SessionStep:
        """Apply one action; raises FAILED_PRECONDITION once the episode is over."""
        if self.done:
            raise errors.failed_precondition(
                "the episode is over; reset the session or create a new one", "EPISODE_OVER"
            )
        result = self.env.step(action)
        self.actions.append(action)
        self.digests.append(observation_digest(result.observation.text))
        truncated = not result.terminated and self.step_index >= self.max_steps
        self.done = result.terminated or truncated
        self.observation = result.observation
        return SessionStep(result=result, step_index=self.step_index, truncated=truncated)

    def admissible_actions(self) -> list[str]:
        if not self.kind.capabilities.admissible_actions:
            raise errors.unsupported(f"{self.kind.name} does not list admissible actions")
        return self.env.admissible_actions()

    def expert_actions(self) -> list[str]:
        if not self.kind.capabilities.expert:
            raise errors.unsupported(f"{self.kind.name} has no expert")
        return self.env.expert_actions()

    def state(self) -> SessionState:
        """The session's state, ready to be signed as a snapshot."""
        native = self.env.native_state() if self.kind.capabilities.native_snapshot else ""
        return SessionState(
            environment=self.kind.name,
            environment_version=self.kind.version,
            task_id=self.task.task_id,
            seed=self.seed,
            options=dict(self.options),
            max_steps=self.max_steps,
            step_index=self.step_index,
            actions=tuple(self.actions),
            digests=tuple(self.digests),
            reset_digest=self.reset_digest,
            last_observation=self.observation,
            done=self.done,
            native_state=native,
        )

    @classmethod
    def restore(
        cls, kind: EnvironmentKind, state: SessionState, env: Environment | None = None, *, other_versions: bool = False
    ) -> Session:
        """Rebuild a session from `state`: natively when possible, else by verified replay.

        A snapshot of another version of the kind restores only with `other_versions`, and then always by
        replay from the episode's start (its native state is another version's), verified against its
        digests. Raises INVALID_ARGUMENT for a snapshot of another environment (or of another version
        without `other_versions`), and FAILED_PRECONDITION when a replayed observation differs from the
        recorded one: REPLAY_DIVERGED on the same version, VERSION_DIVERGED across versions.
        """
        other_version = state.environment_version != kind.version
        if state.environment != kind.name or (other_version and not other_versions):
            refusal = "" if state.environment != kind.name else " and restores no other version"
            raise errors.invalid_argument(
                f"snapshot is for {state.environment} {state.environment_version}, "
                f"this server runs {kind.name} {kind.version}{refusal}",
                "SNAPSHOT_MISMATCH",
            )
        try:
            task = kind.task(state.task_id)
        except KeyError as exc:
            raise errors.invalid_argument(f"snapshot names unknown task {state.task_id!r}", "UNKNOWN_TASK") from exc
        if other_version:
            try:
                kind.validate_options(state.options)
            except ValueError as exc:
                raise errors.invalid_argument(
                    f"{exc} (the snapshot is of version {state.environment_version})", "BAD_OPTION"
                ) from exc
        owned = env is None
        env = env or kind.create()
        try:
            if state.native_state and kind.capabilities.native_snapshot and not other_version:
                env.load_native_state(
                    task,
                    seed=state.seed,
                    options=state.options,
                    state=state.native_state,
                    observation=state.last_observation,
                )
            else:
                _replay_verified(env, task, state, kind.version if other_version else "")
        except BaseException:
            if owned:
                env.close()
            raise
        return cls(
            kind=kind,
            env=env,
            task=task,
            seed=state.seed,
            options=dict(state.options),
            max_steps=state.max_steps,
            observation=state.last_observation,
            reset_digest=state.reset_digest,
            actions=list(state.actions),
            digests=list(state.digests),
            done=state.done,
        )

    def fork(self, env: Environment | None = None) -> Session:
        """An independent copy of this session (same state, own environment)."""
        return Session.restore(self.kind, self.state(), env=env)

    def close(self) -> None:
        self.env.close()


def _replay_verified(env: Environment, task: TaskSpec, state: SessionState, other_version: str = "") -> None:
    """Reset and replay `state.actions`, checking every observation against its digest (on `other_version`
    of the kind when the snapshot is of another one)."""
    first = env.reset(task, seed=state.seed, options=state.options)
    if observation_digest(first.text) != state.reset_digest:
        raise _diverged(task, state, 0, "the reset observation differs", other_version)
    texts = env.replay(state.actions)
    for index, (text, digest) in enumerate(zip(texts, state.digests, strict=True), start=1):
        if observation_digest(text) != digest:
            detail = f"after action {state.actions[index - 1]!r} the observation differs"
            raise _diverged(task, state, index, detail, other_version)


def _diverged(task: TaskSpec, state: SessionState, step: int, detail: str, other_version: str) -> errors.EnvhubError:
    if other_version:
        return errors.failed_precondition(
            f"replay on {state.environment} {other_version} of a snapshot of version {state.environment_version} "
            f"diverged at step {step}: {detail} (this version changed the episode; restore it on a replica of "
            f"version {state.environment_version})",
            "VERSION_DIVERGED",
            step=str(step),
            task_id=task.task_id,
            snapshot_version=state.environment_version,
            version=other_version,
        )
    nondeterministic = "" if task.deterministic else f" (task {task.task_id} is listed as nondeterministic)"
    return errors.failed_precondition(
        f"replay diverged at step {step}: {detail}{nondeterministic}",
        "REPLAY_DIVERGED",
        step=str(step),
        task_id=task.task_id,
    )
