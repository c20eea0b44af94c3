"""Response messages -> the client's typed results (`envhub.client.types`)."""

from __future__ import annotations

from google.protobuf import json_format

from envhub.client import types
from envhub.client.errors import from_status
from envhub.core.errors import EnvhubError
from envhub.v1 import envhub_pb2 as pb


def environment(message: pb.EnvironmentInfo) -> types.EnvironmentInfo:
    caps = message.capabilities
    return types.EnvironmentInfo(
        name=message.name,
        version=message.version,
        description=message.description,
        splits=dict(zip(message.splits, message.split_sizes, strict=True)),
        capabilities=types.Capabilities(
            native_snapshot=caps.native_snapshot,
            deterministic_replay=caps.deterministic_replay,
            expert=caps.expert,
            admissible_actions=caps.admissible_actions,
        ),
        default_max_steps=message.default_max_steps,
        options=dict(message.options),
        config=dict(message.config),
    )


def task(message: pb.TaskInfo) -> types.TaskInfo:
    return types.TaskInfo(
        task_id=message.task_id,
        split=message.split,
        index=message.index,
        family=message.family,
        description=message.description,
        deterministic=message.deterministic,
    )


def observation(message: pb.Observation) -> types.Observation:
    return types.Observation(
        text=message.text,
        task_description=message.task_description,
        score=message.score,
        step_index=message.step_index,
        admissible_actions=tuple(message.admissible_actions) if message.has_admissible_actions else None,
        info=json_format.MessageToDict(message.info),
    )


def step(message: pb.StepResponse) -> types.StepResult:
    return step_result(message.result)


def step_result(result: pb.StepResult) -> types.StepResult:
    return types.StepResult(
        observation=observation(result.observation),
        reward=result.reward,
        terminated=result.terminated,
        truncated=result.truncated,
        won=result.won,
    )


def step_batch(message: pb.StepBatchResponse) -> list[types.StepResult | EnvhubError]:
    """Each entry's `StepResult`, or the `EnvhubError` of its status."""
    return [
        from_status(entry.error) if entry.HasField("error") else step_result(entry.result) for entry in message.results
    ]


def session_start(message: pb.CreateSessionResponse | pb.RestoreSnapshotResponse) -> types.SessionStart:
    return types.SessionStart(
        session_id=message.session_id, task=task(message.task), observation=observation(message.observation)
    )


def reset_start(session_id: str, message: pb.ResetSessionResponse) -> types.SessionStart:
    """A ResetSession answer as a `SessionStart` (the response does not repeat the session id)."""
    return types.SessionStart(
        session_id=session_id, task=task(message.task), observation=observation(message.observation)
    )


def snapshot(message: pb.CreateSnapshotResponse) -> types.Snapshot:
    return types.Snapshot(
        data=message.snapshot,
        step_index=message.step_index,
        environment=message.environment,
        environment_version=message.environment_version,
    )
