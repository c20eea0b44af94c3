"""envhub clients: one typed API (`envhub.client.calls`) over interchangeable transports.

`EnvhubClient` (blocking, one server), `EnvhubPool` (blocking, several replicas),
`AsyncEnvhubClient` (asyncio, one server; `.stream()` puts session calls on one SessionStream).
Every failure raises `envhub.core.errors.EnvhubError` (code, message, reason, metadata).
"""

from envhub.client.aio import AsyncEnvhubClient
from envhub.client.channel import MutualTls
from envhub.client.pool import EnvhubPool
from envhub.client.retry import RetryPolicy
from envhub.client.sync import EnvhubClient
from envhub.client.types import (
    Capabilities,
    EnvironmentInfo,
    Observation,
    SessionStart,
    Snapshot,
    StepResult,
    TaskInfo,
    TaskRef,
)
from envhub.core.errors import EnvhubError

__all__ = [
    "AsyncEnvhubClient",
    "Capabilities",
    "EnvhubClient",
    "EnvhubError",
    "EnvhubPool",
    "EnvironmentInfo",
    "MutualTls",
    "Observation",
    "RetryPolicy",
    "SessionStart",
    "Snapshot",
    "StepResult",
    "TaskInfo",
    "TaskRef",
]
