"""`EnvhubClient`: the blocking client. Every failure raises `envhub.core.errors.EnvhubError`.

Retries (exponential backoff, UNAVAILABLE only) are limited to idempotent calls:
ListEnvironments, ListTasks, GetExpertActions and CreateSnapshot. CreateSession,
RestoreSnapshot and ForkSession create sessions (a retry after a lost reply would leak
one), Step and ResetSession change state, and a retried CloseSession could report
NOT_FOUND for a close that succeeded: none of those is retried.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, overload

import grpc

from envhub.client import channel, convert, stream, types
from envhub.client.errors import RETRYABLE, backoff_s, from_rpc_error
from envhub.core.errors import EnvhubError
from envhub.v1 import envhub_pb2 as pb
from envhub.v1 import envhub_pb2_grpc as pb_grpc

DEFAULT_TIMEOUT_S = 60.0
RETRY_ATTEMPTS = 4


class EnvhubClient:
    """A connection to one envhub server."""

    def __init__(
        self,
        target: str,
        token: str | None = None,
        tls: channel.Tls = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        creds = channel.credentials(tls)
        if creds is None:
            self._channel = grpc.insecure_channel(target, options=channel.OPTIONS)
        else:
            self._channel = grpc.secure_channel(target, creds, options=channel.OPTIONS)
        self._stub = pb_grpc.EnvHubStub(self._channel)
        self._metadata = channel.call_metadata(token)
        self.target = target
        self.timeout = timeout
        self._replica_id = ""

    def _invoke(self, method: Callable[..., Any], request: Any, timeout: float | None, idempotent: bool) -> Any:
        attempts = RETRY_ATTEMPTS if idempotent else 1
        for attempt in range(attempts):
            try:
                return method(request, timeout=timeout or self.timeout, metadata=self._metadata)
            except grpc.RpcError as exc:
                error = from_rpc_error(exc)
                if attempt + 1 == attempts or error.code not in RETRYABLE:
                    raise error from None
            time.sleep(backoff_s(attempt))
        raise AssertionError("unreachable")

    # discovery
    def list_environments(self, timeout: float | None = None) -> list[types.EnvironmentInfo]:
        response = self._invoke(self._stub.ListEnvironments, pb.ListEnvironmentsRequest(), timeout, True)
        self._replica_id = response.replica_id
        return [convert.environment(info) for info in response.environments]

    @property
    def replica_id(self) -> str:
        """Id of the replica behind this client (the prefix of its session ids)."""
        if not self._replica_id:
            self.list_environments()
        return self._replica_id

    def list_tasks(self, environment: str, split: str = "", timeout: float | None = None) -> list[types.TaskInfo]:
        """Every task of `environment` (of one split when given), following pages."""
        tasks: list[types.TaskInfo] = []
        request = pb.ListTasksRequest(environment=environment, split=split)
        while True:
            response = self._invoke(self._stub.ListTasks, request, timeout, True)
            tasks.extend(convert.task(info) for info in response.tasks)
            if not response.next_page_token:
                return tasks
            request.page_token = response.next_page_token

    # sessions
    def create_session(
        self,
        environment: str,
        *,
        task_id: str | None = None,
        split: str | None = None,
        index: int | None = None,
        seed: int = 0,
        options: Mapping[str, str] | None = None,
        max_steps: int = 0,
        admissible: bool = False,
        timeout: float | None = None,
    ) -> types.SessionStart:
        """Start a session on a task (`task_id`, or `split` and `index`)."""
        request = convert.create_request(environment, task_id, split, index, seed, options, max_steps, admissible)
        return convert.session_start(self._invoke(self._stub.CreateSession, request, timeout, False))

    def reset_session(
        self,
        session_id: str,
        *,
        task_id: str | None = None,
        split: str | None = None,
        index: int | None = None,
        seed: int | None = None,
        admissible: bool = False,
        timeout: float | None = None,
    ) -> types.SessionStart:
        """Reset onto the same task and seed, or onto the ones given."""
        request = convert.reset_request(session_id, task_id, split, index, seed, admissible)
        response = self._invoke(self._stub.ResetSession, request, timeout, False)
        return convert.reset_start(session_id, response)

    def step(
        self, session_id: str, action: str, *, admissible: bool = False, timeout: float | None = None
    ) -> types.StepResult:
        request = pb.StepRequest(session_id=session_id, action=action, include_admissible_actions=admissible)
        return convert.step(self._invoke(self._stub.Step, request, timeout, False))

    @overload
    def step_many(
        self,
        steps: Sequence[tuple[str, str]],
        *,
        admissible: bool = False,
        timeout: float | None = None,
        return_errors: Literal[False] = False,
    ) -> list[types.StepResult]: ...

    @overload
    def step_many(
        self,
        steps: Sequence[tuple[str, str]],
        *,
        admissible: bool = False,
        timeout: float | None = None,
        return_errors: Literal[True],
    ) -> list[types.StepResult | EnvhubError]: ...

    def step_many(
        self,
        steps: Sequence[tuple[str, str]],
        *,
        admissible: bool = False,
        timeout: float | None = None,
        return_errors: bool = False,
    ) -> list[types.StepResult] | list[types.StepResult | EnvhubError]:
        """Step several sessions at once over one SessionStream: `[(session_id, action), ...]` -> results in order.

        Every step runs (concurrently across sessions, in order within one); then the first failed
        step's `EnvhubError` is raised, or with `return_errors` each failure takes its result's place.
        Not retried; `timeout` bounds the whole round."""
        results = stream.step_round(self._stub, self._metadata, steps, admissible, timeout or self.timeout)
        if return_errors:
            return results
        for result in results:
            if isinstance(result, EnvhubError):
                raise result
        return [result for result in results if not isinstance(result, EnvhubError)]

    def close_session(self, session_id: str, timeout: float | None = None) -> None:
        self._invoke(self._stub.CloseSession, pb.CloseSessionRequest(session_id=session_id), timeout, False)

    def expert_actions(self, session_id: str, timeout: float | None = None) -> list[str]:
        request = pb.GetExpertActionsRequest(session_id=session_id)
        return list(self._invoke(self._stub.GetExpertActions, request, timeout, True).actions)

    # snapshots
    def snapshot(self, session_id: str, timeout: float | None = None) -> types.Snapshot:
        response = self._invoke(
            self._stub.CreateSnapshot, pb.CreateSnapshotRequest(session_id=session_id), timeout, True
        )
        return convert.snapshot(response)

    def restore(
        self, snapshot: types.Snapshot | bytes, *, admissible: bool = False, timeout: float | None = None
    ) -> types.SessionStart:
        """A new session at the snapshot's state (any replica with the same key and version)."""
        data = snapshot.data if isinstance(snapshot, types.Snapshot) else snapshot
        request = pb.RestoreSnapshotRequest(snapshot=data, include_admissible_actions=admissible)
        return convert.session_start(self._invoke(self._stub.RestoreSnapshot, request, timeout, False))

    def fork(self, session_id: str, count: int = 1, timeout: float | None = None) -> list[str]:
        """`count` new sessions continuing independently from this one's state."""
        request = pb.ForkSessionRequest(session_id=session_id, count=count)
        return list(self._invoke(self._stub.ForkSession, request, timeout, False).session_ids)

    # lifetime
    def close(self) -> None:
        """Close the channel (sessions stay open on the server until closed or reaped)."""
        self._channel.close()

    def __enter__(self) -> EnvhubClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
