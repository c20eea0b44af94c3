"""envhub clients: one typed API (`envhub.client.calls`) over interchangeable transports.

`EnvhubClient` (blocking, one server), `EnvhubPool` (blocking, several replicas),
`AsyncEnvhubClient` (asyncio, one server; `.stream()` puts session calls on one SessionStream).
Every failure raises `EnvhubError` (code: a `StatusCode`, message, reason, metadata). What a
session shows is an `EnvView`; `Sessions` (the `SessionPort`) plays sessions of one environment.
"""

from grpc import StatusCode

from envhub.client.aio import AsyncEnvhubClient
from envhub.client.channel import MutualTls
from envhub.client.pool import EnvhubPool
from envhub.client.retry import RetryPolicy
from envhub.client.sessions import SessionPort, Sessions
from envhub.client.sync import EnvhubClient
from envhub.client.types import (
    Capabilities,
    EnvironmentInfo,
    EnvView,
    SessionStart,
    Snapshot,
    TaskInfo,
    TaskRef,
)
from envhub.core.errors import EnvhubError

__all__ = [
    "AsyncEnvhubClient",
    "Capabilities",
    "EnvView",
    "EnvhubClient",
    "EnvhubError",
    "EnvhubPool",
    "EnvironmentInfo",
    "MutualTls",
    "RetryPolicy",
    "SessionPort",
    "SessionStart",
    "Sessions",
    "Snapshot",
    "StatusCode",
    "TaskInfo",
    "TaskRef",
]
