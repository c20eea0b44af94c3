"""`EnvhubClient`: the blocking client, the typed API of `envhub.client.calls` over a blocking transport.

Every failure raises `envhub.core.errors.EnvhubError`. Retries follow one `RetryPolicy`
(jittered exponential backoff): read-only calls on UNAVAILABLE; Step and ResetSession on
UNAVAILABLE and DEADLINE_EXCEEDED, safely, because each carries a request_id the session
remembers (the call is applied once however many replies are lost). CreateSession,
RestoreSnapshot and ForkSession create sessions and CloseSession destroys one: a retry after
a lost reply would leak or misreport, so they are not retried.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Any, TypeVar

import grpc

from envhub.client import calls, channel
from envhub.client.calls import blocking
from envhub.client.pool_transport import PoolTransport
from envhub.client.retry import DEFAULT_POLICY, LOST, RetryPolicy
from envhub.client.transport import DEFAULT_TIMEOUT_S, ChannelTransport, Settings, Transport
from envhub.core.errors import EnvhubError

R = TypeVar("R")


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
    close_session = blocking(calls.close_session)
    expert_actions = blocking(calls.expert_actions)
    snapshot = blocking(calls.snapshot)
    restore = blocking(calls.restore)
    fork = blocking(calls.fork)

    def step_many(
        self, steps: Sequence[tuple[str, str]], *, admissible: bool = False, return_errors: bool = False
    ) -> list[Any]:
        """Step several sessions at once: `[(session_id, action), ...]` -> `StepResult`s in order.

        The steps travel on one SessionStream per server (concurrent across sessions, in order
        within one); a step whose reply was lost is retried on its own, applied once. Then the
        first failed step's `EnvhubError` is raised, or with `return_errors` each failure takes
        its result's place.
        """
        step_calls = [calls.step(session_id, action, admissible=admissible) for session_id, action in steps]
        answers = self.transport.step_round(step_calls)
        for index, (call, answer) in enumerate(zip(step_calls, answers, strict=True)):
            if isinstance(answer, EnvhubError) and answer.code in LOST:
                try:
                    answers[index] = self.run(call)
                except EnvhubError as error:
                    answers[index] = error
        return calls.step_results(answers, return_errors)

    def close(self) -> None:
        """Close the connection(s) (sessions stay open on the server until closed or reaped)."""
        self.transport.close()

    def __enter__(self) -> EnvhubClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
