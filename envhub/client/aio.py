"""`AsyncEnvhubClient`: the asyncio client, same methods and retry policy as `EnvhubClient`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

import grpc
import grpc.aio

from envhub.client import channel, convert, types
from envhub.client.errors import RETRYABLE, backoff_s, from_rpc_error
from envhub.client.stream import SessionStreamClient
from envhub.client.sync import DEFAULT_TIMEOUT_S, RETRY_ATTEMPTS
from envhub.v1 import envhub_pb2 as pb
from envhub.v1 import envhub_pb2_grpc as pb_grpc


class AsyncEnvhubClient:
    """An asyncio connection to one envhub server (create it inside a running loop)."""

    def __init__(
        self,
        target: str,
        token: str | None = None,
        tls: channel.Tls = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        creds = channel.credentials(tls)
        if creds is None:
            self._channel = grpc.aio.insecure_channel(target, options=channel.OPTIONS)
        else:
            self._channel = grpc.aio.secure_channel(target, creds, options=channel.OPTIONS)
        self._stub = pb_grpc.EnvHubStub(self._channel)
        self._metadata = channel.call_metadata(token)
        self.target = target
        self.timeout = timeout

    async def _invoke(self, method: Callable[..., Any], request: Any, timeout: float | None, idempotent: bool) -> Any:
        attempts = RETRY_ATTEMPTS if idempotent else 1
        for attempt in range(attempts):
            try:
                return await method(request, timeout=timeout or self.timeout, metadata=self._metadata)
            except grpc.aio.AioRpcError as exc:
                error = from_rpc_error(exc)
                if attempt + 1 == attempts or error.code not in RETRYABLE:
                    raise error from None
            await asyncio.sleep(backoff_s(attempt))
        raise AssertionError("unreachable")

    async def list_environments(self, timeout: float | None = None) -> tuple[str, list[types.EnvironmentInfo]]:
        """The replica id and the environments it hosts."""
        response = await self._invoke(self._stub.ListEnvironments, pb.ListEnvironmentsRequest(), timeout, True)
        return response.replica_id, [convert.environment(info) for info in response.environments]

    async def list_tasks(self, environment: str, split: str = "", timeout: float | None = None) -> list[types.TaskInfo]:
        tasks: list[types.TaskInfo] = []
        request = pb.ListTasksRequest(environment=environment, split=split)
        while True:
            response = await self._invoke(self._stub.ListTasks, request, timeout, True)
            tasks.extend(convert.task(info) for info in response.tasks)
            if not response.next_page_token:
                return tasks
            request.page_token = response.next_page_token

    async def create_session(
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
        request = convert.create_request(environment, task_id, split, index, seed, options, max_steps, admissible)
        return convert.session_start(await self._invoke(self._stub.CreateSession, request, timeout, False))

    async def reset_session(
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
        request = convert.reset_request(session_id, task_id, split, index, seed, admissible)
        response = await self._invoke(self._stub.ResetSession, request, timeout, False)
        return convert.reset_start(session_id, response)

    async def step(
        self, session_id: str, action: str, *, admissible: bool = False, timeout: float | None = None
    ) -> types.StepResult:
        request = pb.StepRequest(session_id=session_id, action=action, include_admissible_actions=admissible)
        return convert.step(await self._invoke(self._stub.Step, request, timeout, False))

    async def close_session(self, session_id: str, timeout: float | None = None) -> None:
        await self._invoke(self._stub.CloseSession, pb.CloseSessionRequest(session_id=session_id), timeout, False)

    async def expert_actions(self, session_id: str, timeout: float | None = None) -> list[str]:
        request = pb.GetExpertActionsRequest(session_id=session_id)
        return list((await self._invoke(self._stub.GetExpertActions, request, timeout, True)).actions)

    async def snapshot(self, session_id: str, timeout: float | None = None) -> types.Snapshot:
        request = pb.CreateSnapshotRequest(session_id=session_id)
        response = await self._invoke(self._stub.CreateSnapshot, request, timeout, True)
        return convert.snapshot(response)

    async def restore(
        self, snapshot: types.Snapshot | bytes, *, admissible: bool = False, timeout: float | None = None
    ) -> types.SessionStart:
        data = snapshot.data if isinstance(snapshot, types.Snapshot) else snapshot
        request = pb.RestoreSnapshotRequest(snapshot=data, include_admissible_actions=admissible)
        return convert.session_start(await self._invoke(self._stub.RestoreSnapshot, request, timeout, False))

    async def fork(self, session_id: str, count: int = 1, timeout: float | None = None) -> list[str]:
        request = pb.ForkSessionRequest(session_id=session_id, count=count)
        return list((await self._invoke(self._stub.ForkSession, request, timeout, False)).session_ids)

    def stream(self, timeout: float | None = None) -> SessionStreamClient:
        """A `SessionStreamClient` on this channel: `async with client.stream() as stream: await stream.step(...)`."""
        return SessionStreamClient(self._stub, self._metadata, timeout or self.timeout)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncEnvhubClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
