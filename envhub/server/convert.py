"""Conversions between the core dataclasses and the wire messages (server side)."""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf import json_format

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
    message = pb.Observation()
    _fill_observation(message, obs, step_index, admissible)
    return message


def _fill_observation(
    message: pb.Observation, obs: Observation, step_index: int, admissible: Sequence[str] | None
) -> None:
    """Write `observation`'s fields into `message` in place (a message built and then passed to its parent's
    constructor is copied once more, on every step)."""
    message.text = obs.text
    message.task_description = obs.task_description
    message.score = obs.score
    message.step_index = step_index
    if admissible is not None:
        message.admissible_actions.extend(admissible)
        message.has_admissible_actions = True
    if obs.info:
        message.info.update(dict(obs.info))


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
    message = pb.StepResult()
    fill_step_result(message, step, admissible)
    return message


def fill_step_result(message: pb.StepResult, step: SessionStep, admissible: Sequence[str] | None) -> None:
    """Write `step` into `message` (a response's field) in place, with no copy."""
    result = step.result
    message.reward = result.reward
    message.terminated = result.terminated
    message.truncated = step.truncated
    message.won = result.won
    _fill_observation(message.observation, result.observation, step.step_index, admissible)
