"""Response messages -> the client's typed results (`envhub.client.types`)."""

from __future__ import annotations

from collections.abc import Sequence

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


def view(session_id: str, observation: pb.Observation, result: pb.StepResult | None = None) -> types.EnvView:
    """The `EnvView` of `observation`, with the outcome of the step that led to it (`result`), if any."""
    return types.EnvView(
        session_id=session_id,
        text=observation.text,
        task_description=observation.task_description,
        admissible=tuple(observation.admissible_actions) if observation.has_admissible_actions else None,
        reward=result.reward if result else 0.0,
        score=observation.score,
        step_index=observation.step_index,
        terminated=result.terminated if result else False,
        truncated=result.truncated if result else False,
        won=result.won if result else False,
        info=json_format.MessageToDict(observation.info),
    )


def step_view(session_id: str, result: pb.StepResult) -> types.EnvView:
    """A step's `EnvView`."""
    return view(session_id, result.observation, result)


def step_batch(message: pb.StepBatchResponse, session_ids: Sequence[str]) -> list[types.EnvView | EnvhubError]:
    """Each entry's `EnvView` (for the session of its step), or the `EnvhubError` of its status."""
    return [
        from_status(entry.error) if entry.HasField("error") else step_view(session_id, entry.result)
        for session_id, entry in zip(session_ids, message.results, strict=True)
    ]


def restore_batch(message: pb.RestoreSnapshotBatchResponse) -> list[types.SessionStart | EnvhubError]:
    """Each entry's `SessionStart`, or the `EnvhubError` of its status."""
    return [
        from_status(entry.error) if entry.HasField("error") else session_start(entry.session)
        for entry in message.results
    ]


def session_start(message: pb.CreateSessionResponse | pb.RestoreSnapshotResponse) -> types.SessionStart:
    return types.SessionStart(task(message.task), view(message.session_id, message.observation))


def reset_start(session_id: str, message: pb.ResetSessionResponse) -> types.SessionStart:
    """A ResetSession answer as a `SessionStart` (the response does not repeat the session id)."""
    return types.SessionStart(task(message.task), view(session_id, message.observation))


def snapshot(message: pb.CreateSnapshotResponse) -> types.Snapshot:
    return types.Snapshot(
        data=message.snapshot,
        step_index=message.step_index,
        environment=message.environment,
        environment_version=message.environment_version,
    )
