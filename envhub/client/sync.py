"""`EnvhubClient`: the blocking client, the typed API of `envhub.client.calls` over a blocking transport.

Every failure raises `envhub.core.errors.EnvhubError`. Retries follow one `RetryPolicy`
(jittered exponential backoff): read-only calls on UNAVAILABLE; Step and ResetSession on
UNAVAILABLE and DEADLINE_EXCEEDED, safely, because each carries a request_id the session
remembers (the call is applied once however many replies are lost). CreateSession,
RestoreSnapshot(Batch) and ForkSession create sessions and CloseSession destroys one: a retry after
a lost reply would leak or misreport, so they are not retried.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Concatenate, ParamSpec, TypeVar

import grpc

from envhub.client import calls, channel
from envhub.client.pool_transport import PoolTransport
from envhub.client.retry import DEFAULT_POLICY, RetryPolicy
from envhub.client.transport import DEFAULT_TIMEOUT_S, ChannelTransport, Settings, Transport

P = ParamSpec("P")
R = TypeVar("R")


def blocking(build: Callable[P, calls.Call[R]]) -> Callable[Concatenate[EnvhubClient, P], R]:
    """A blocking client method running the `Call` that `build` makes."""

    def method(self: EnvhubClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.run(build(*args, **kwargs))

    method.__name__, method.__doc__ = build.__name__, build.__doc__
    return method


class EnvhubClient:
    """The envhub API over one server (`EnvhubClient("host:port")`), several replicas (a list of
    targets: see `EnvhubPool`), or any blocking `Transport`."""

    def __init__(
        self,
        target: str | Sequence[str] | Transport,
        token: str | None = None,
        tls: channel.Tls = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        policy: RetryPolicy = DEFAULT_POLICY,
        interceptors: Sequence[grpc.UnaryUnaryClientInterceptor] = (),
    ) -> None:
        if isinstance(target, str | Sequence):
            names = [target] if isinstance(target, str) else list(target)
            settings = Settings(token, tls, timeout, policy)
            replicas = [ChannelTransport(name, settings, interceptors) for name in names]
            target = replicas[0] if isinstance(target, str) else PoolTransport(replicas)
        self.transport: Transport = target

    def run(self, call: calls.Call[R]) -> R:
        """Send one `Call` and decode its answer (what every method below does)."""
        return call.decode(self.transport.send(call))

    list_environments = blocking(calls.list_environments)
    replica_id = blocking(calls.replica_id)
    list_tasks = blocking(calls.list_tasks)
    create_session = blocking(calls.create_session)
    reset_session = blocking(calls.reset_session)
    step = blocking(calls.step)
    step_many = blocking(calls.step_many)
    close_session = blocking(calls.close_session)
    expert_actions = blocking(calls.expert_actions)
    snapshot = blocking(calls.snapshot)
    restore = blocking(calls.restore)
    restore_many = blocking(calls.restore_many)
    fork = blocking(calls.fork)

    def close(self) -> None:
        """Close the connection(s) (sessions stay open on the server until closed or reaped)."""
        self.transport.close()

    def __enter__(self) -> EnvhubClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
