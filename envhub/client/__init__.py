"""envhub clients: `EnvhubClient` (blocking), `AsyncEnvhubClient` (asyncio), `EnvhubPool` (several replicas),
`SessionStreamClient` (many sessions on one SessionStream, from `AsyncEnvhubClient.stream()`).

Every failure raises `envhub.core.errors.EnvhubError` (code, message, reason, metadata).
"""

from envhub.client.aio import AsyncEnvhubClient
from envhub.client.pool import EnvhubPool
from envhub.client.stream import SessionStreamClient
from envhub.client.sync import EnvhubClient
from envhub.client.types import (
    Capabilities,
    EnvironmentInfo,
    Observation,
    SessionStart,
    Snapshot,
    StepResult,
    TaskInfo,
)
from envhub.core.errors import EnvhubError

__all__ = [
    "AsyncEnvhubClient",
    "Capabilities",
    "EnvhubClient",
    "EnvhubError",
    "EnvhubPool",
    "EnvironmentInfo",
    "Observation",
    "SessionStart",
    "SessionStreamClient",
    "Snapshot",
    "StepResult",
    "TaskInfo",
]
