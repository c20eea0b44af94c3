"""Conversions between the core dataclasses and the wire messages (server side)."""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf import json_format, struct_pb2

from envhub.core.environment import Observation, TaskSpec
from envhub.core.session import SessionStep
from envhub.server.catalog import KindCatalog
from envhub.v1 import envhub_pb2 as pb


def task_info(spec: TaskSpec) -> pb.TaskInfo:
    """`TaskSpec` -> `TaskInfo`."""
    return pb.TaskInfo(
        task_id=spec.task_id,
        split=spec.split,
        index=spec.index,
        family=spec.family,
        description=spec.description,
        deterministic=spec.deterministic,
    )


def environment_info(catalog: KindCatalog) -> pb.EnvironmentInfo:
    """`KindCatalog` -> `EnvironmentInfo`."""
    caps = catalog.capabilities
    return pb.EnvironmentInfo(
        name=catalog.name,
        version=catalog.version,
        description=catalog.description,
        splits=list(catalog.splits),
        split_sizes=[len(tasks) for tasks in catalog.splits.values()],
        capabilities=pb.Capabilities(
            native_snapshot=caps.native_snapshot,
            deterministic_replay=caps.deterministic_replay,
            expert=caps.expert,
            admissible_actions=caps.admissible_actions,
        ),
        default_max_steps=catalog.default_max_steps,
        options=dict(catalog.options),
        config=dict(catalog.config),
    )


def observation(obs: Observation, step_index: int, admissible: Sequence[str] | None = None) -> pb.Observation:
    """`Observation` (+ step index and optional admissible actions) -> wire `Observation`."""
    info = struct_pb2.Struct()
    if obs.info:
        info.update(dict(obs.info))
    return pb.Observation(
        text=obs.text,
        task_description=obs.task_description,
        admissible_actions=list(admissible or ()),
        has_admissible_actions=admissible is not None,
        score=obs.score,
        step_index=step_index,
        info=info,
    )


def observation_from_wire(message: pb.Observation) -> Observation:
    """Wire `Observation` -> `Observation` (used when restoring a snapshot)."""
    return Observation(
        text=message.text,
        task_description=message.task_description,
        score=message.score,
        info=json_format.MessageToDict(message.info),
    )


def step_result(step: SessionStep, admissible: Sequence[str] | None) -> pb.StepResult:
    """`SessionStep` -> wire `StepResult`."""
    result = step.result
    return pb.StepResult(
        observation=observation(result.observation, step.step_index, admissible),
        reward=result.reward,
        terminated=result.terminated,
        truncated=step.truncated,
        won=result.won,
    )
