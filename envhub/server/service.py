"""The EnvHub gRPC service (grpc.aio): validation, routing to workers, conversions, errors.

Every RPC body is a coroutine that raises `EnvhubError`; `_unary` turns that into a rich
status (`abort_with_status`) and `SessionStream` into a `StreamError`, so both forms share
one implementation. The event loop never blocks on an environment: worker calls are futures.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeAlias, TypeVar

import grpc
import grpc.aio

from envhub.core import errors
from envhub.core.environment import TaskSpec
from envhub.core.session import SessionState, SessionStep
from envhub.server import convert
from envhub.server.catalog import Catalog
from envhub.server.config import ServerConfig
from envhub.server.metrics import Metrics
from envhub.server.pool import WorkerPool
from envhub.server.sessions import SessionTable
from envhub.server.snapshots import SnapshotSigner
from envhub.server.status import to_status
from envhub.server.worker import View
from envhub.server.workers import Worker, discard_outcome
from envhub.v1 import envhub_pb2 as pb
from envhub.v1 import envhub_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)
Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]
T = TypeVar("T")
MAX_PAGE_SIZE = 1000


def _resolve(catalog: Catalog, selector: pb.TaskSelector) -> TaskSpec:
    which = selector.WhichOneof("selector")
    if which == "task_id":
        return catalog.task(selector.task_id)
    if which == "split_index":
        return catalog.at(selector.split_index.split, selector.split_index.index)
    raise errors.invalid_argument("a task is required: set task.task_id or task.split_index", "MISSING_TASK")


class EnvHubService(pb_grpc.EnvHubServicer):
    """Implements envhub.v1.EnvHub over a `WorkerPool` and a `SessionTable`."""

    def __init__(
        self, config: ServerConfig, pool: WorkerPool, table: SessionTable, signer: SnapshotSigner, metrics: Metrics
    ) -> None:
        self._config = config
        self._pool = pool
        self._table = table
        self._signer = signer
        self._metrics = metrics

    # ------------------------------------------------------------------ plumbing

    async def _unary(self, method: str, body: Coroutine[Any, Any, T], context: Context) -> T:
        try:
            return await body
        except errors.EnvhubError as exc:
            self._metrics.error(method, exc.code)
            await context.abort_with_status(to_status(exc))
            raise  # abort_with_status raises; this line only satisfies the type checker

    async def _call(self, context: Context, worker: Worker, op: str, *args: Any) -> Any:
        """One worker call under the RPC's deadline."""
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            raise errors.EnvhubError(grpc.StatusCode.DEADLINE_EXCEEDED, "the deadline passed", "DEADLINE_EXCEEDED")
        try:
            return await asyncio.wait_for(worker.call(op, *args), remaining)
        except TimeoutError as exc:
            raise errors.EnvhubError(
                grpc.StatusCode.DEADLINE_EXCEEDED, f"{op} did not finish before the deadline", "DEADLINE_EXCEEDED"
            ) from exc

    async def _on_session(self, context: Context, session_id: str, op: str, *args: Any) -> Any:
        """A worker call on a live session, keeping its idle clock and in-flight count."""
        record = self._table.get(session_id)
        record.in_flight += 1
        try:
            return await self._call(context, record.worker, op, session_id, *args)
        finally:
            record.in_flight -= 1
            record.last_used = time.monotonic()

    async def _start_sessions(
        self, context: Context, environment: str, worker: Worker, ids: list[str], op: str, *args: Any
    ) -> Any:
        """A worker call creating sessions `ids`; on any failure they are forgotten and closed."""
        records = [self._table.add(session_id, environment, worker) for session_id in ids]
        for record in records:
            record.in_flight += 1  # not idle while being created
        try:
            result = await self._call(context, worker, op, *args)
        except BaseException:
            for session_id in ids:
                self._table.drop(session_id)
                if worker.alive:  # runs after the create in the worker's FIFO, if it went through
                    discard_outcome(worker.call("close", session_id))
            raise
        finally:
            for record in records:
                record.in_flight -= 1
                record.last_used = time.monotonic()
        return result

    def _check_action(self, action: str) -> None:
        if not action.strip():
            raise errors.invalid_argument("the action is empty", "EMPTY_ACTION")
        size = len(action.encode("utf-8"))
        if size > self._config.max_action_bytes:
            raise errors.invalid_argument(
                f"the action has {size} bytes; the limit is {self._config.max_action_bytes}",
                "ACTION_TOO_LONG",
                max_action_bytes=str(self._config.max_action_bytes),
            )

    # ------------------------------------------------------------------ bodies

    async def _list_environments(self) -> pb.ListEnvironmentsResponse:
        infos = [convert.environment_info(catalog) for catalog in self._pool.catalogs.values()]
        return pb.ListEnvironmentsResponse(environments=infos, replica_id=self._table.replica_id)

    async def _list_tasks(self, request: pb.ListTasksRequest) -> pb.ListTasksResponse:
        tasks = self._pool.catalog(request.environment).listing(request.split)
        size = min(request.page_size or MAX_PAGE_SIZE, MAX_PAGE_SIZE)
        try:
            start = int(request.page_token or "0")
        except ValueError as exc:
            raise errors.invalid_argument("page_token is not one this server issued", "BAD_PAGE_TOKEN") from exc
        if not 0 <= start <= len(tasks):
            raise errors.invalid_argument("page_token is out of range", "BAD_PAGE_TOKEN")
        end = start + size
        return pb.ListTasksResponse(
            tasks=[convert.task_info(spec) for spec in tasks[start:end]],
            next_page_token=str(end) if end < len(tasks) else "",
            total_size=len(tasks),
        )

    async def _create(self, request: pb.CreateSessionRequest, context: Context) -> pb.CreateSessionResponse:
        catalog = self._pool.catalog(request.environment)
        spec = _resolve(catalog, request.task)
        [session_id] = self._table.new_ids(1)
        worker = self._pool.place(request.environment)
        view: View = await self._start_sessions(
            context,
            request.environment,
            worker,
            [session_id],
            "create",
            session_id,
            spec.task_id,
            request.seed,
            dict(request.options),
            request.max_steps,
            request.include_admissible_actions,
        )
        return pb.CreateSessionResponse(
            session_id=session_id,
            task=convert.task_info(spec),
            observation=convert.observation(view.observation, view.step_index, view.admissible),
        )

    async def _reset(self, request: pb.ResetSessionRequest, context: Context) -> pb.ResetSessionResponse:
        catalog = self._pool.catalog(self._table.get(request.session_id).environment)
        task_id = _resolve(catalog, request.task).task_id if request.HasField("task") else None
        seed = request.seed if request.HasField("seed") else None
        view: View = await self._on_session(
            context, request.session_id, "reset", task_id, seed, request.include_admissible_actions
        )
        return pb.ResetSessionResponse(
            task=convert.task_info(catalog.task(view.task_id)),
            observation=convert.observation(view.observation, view.step_index, view.admissible),
        )

    async def _step(self, request: pb.StepRequest, context: Context) -> pb.StepResponse:
        self._check_action(request.action)
        environment = self._table.get(request.session_id).environment
        started = time.perf_counter()
        step: SessionStep
        admissible: tuple[str, ...] | None
        step, admissible = await self._on_session(
            context, request.session_id, "step", request.action, request.include_admissible_actions
        )
        self._metrics.step_latency.labels(environment).observe(time.perf_counter() - started)
        self._metrics.steps.labels(environment).inc()
        return pb.StepResponse(result=convert.step_result(step, admissible))

    async def _close(self, request: pb.CloseSessionRequest, context: Context) -> pb.CloseSessionResponse:
        record = self._table.get(request.session_id)
        self._table.drop(request.session_id)
        await self._call(context, record.worker, "close", request.session_id)
        return pb.CloseSessionResponse()

    async def _expert(self, request: pb.GetExpertActionsRequest, context: Context) -> pb.GetExpertActionsResponse:
        actions: list[str] = await self._on_session(context, request.session_id, "expert")
        return pb.GetExpertActionsResponse(actions=actions)

    async def _snapshot(self, request: pb.CreateSnapshotRequest, context: Context) -> pb.CreateSnapshotResponse:
        state: SessionState = await self._on_session(context, request.session_id, "snapshot")
        return pb.CreateSnapshotResponse(snapshot=self._signer.sign(state), step_index=state.step_index)

    async def _restore(self, request: pb.RestoreSnapshotRequest, context: Context) -> pb.RestoreSnapshotResponse:
        state = self._signer.verify(request.snapshot)
        catalog = self._pool.catalog(state.environment)
        spec = catalog.task(state.task_id)
        [session_id] = self._table.new_ids(1)
        worker = self._pool.place(state.environment)
        view: View = await self._start_sessions(
            context,
            state.environment,
            worker,
            [session_id],
            "restore",
            session_id,
            state,
            request.include_admissible_actions,
        )
        return pb.RestoreSnapshotResponse(
            session_id=session_id,
            task=convert.task_info(spec),
            observation=convert.observation(view.observation, view.step_index, view.admissible),
        )

    async def _fork(self, request: pb.ForkSessionRequest, context: Context) -> pb.ForkSessionResponse:
        if not 1 <= request.count <= self._config.max_fork:
            raise errors.invalid_argument(
                f"count must be between 1 and {self._config.max_fork}, not {request.count}", "BAD_FORK_COUNT"
            )
        record = self._table.get(request.session_id)
        ids = self._table.new_ids(request.count)
        record.last_used = time.monotonic()
        await self._start_sessions(context, record.environment, record.worker, ids, "fork", request.session_id, ids)
        return pb.ForkSessionResponse(session_ids=ids)

    # ------------------------------------------------------------------ unary RPCs

    async def ListEnvironments(self, request: pb.ListEnvironmentsRequest, context: Context) -> Any:
        return await self._unary("ListEnvironments", self._list_environments(), context)

    async def ListTasks(self, request: pb.ListTasksRequest, context: Context) -> Any:
        return await self._unary("ListTasks", self._list_tasks(request), context)

    async def CreateSession(self, request: pb.CreateSessionRequest, context: Context) -> Any:
        return await self._unary("CreateSession", self._create(request, context), context)

    async def ResetSession(self, request: pb.ResetSessionRequest, context: Context) -> Any:
        return await self._unary("ResetSession", self._reset(request, context), context)

    async def Step(self, request: pb.StepRequest, context: Context) -> Any:
        return await self._unary("Step", self._step(request, context), context)

    async def CloseSession(self, request: pb.CloseSessionRequest, context: Context) -> Any:
        return await self._unary("CloseSession", self._close(request, context), context)

    async def GetExpertActions(self, request: pb.GetExpertActionsRequest, context: Context) -> Any:
        return await self._unary("GetExpertActions", self._expert(request, context), context)

    async def CreateSnapshot(self, request: pb.CreateSnapshotRequest, context: Context) -> Any:
        return await self._unary("CreateSnapshot", self._snapshot(request, context), context)

    async def RestoreSnapshot(self, request: pb.RestoreSnapshotRequest, context: Context) -> Any:
        return await self._unary("RestoreSnapshot", self._restore(request, context), context)

    async def ForkSession(self, request: pb.ForkSessionRequest, context: Context) -> Any:
        return await self._unary("ForkSession", self._fork(request, context), context)

    # ------------------------------------------------------------------ streaming

    async def _stream_one(self, request: pb.SessionStreamRequest, context: Context) -> pb.SessionStreamResponse:
        response = pb.SessionStreamResponse(request_id=request.request_id)
        call = request.WhichOneof("call")
        try:
            if call == "create":
                response.create.CopyFrom(await self._create(request.create, context))
            elif call == "reset":
                response.reset.CopyFrom(await self._reset(request.reset, context))
            elif call == "step":
                response.step.CopyFrom(await self._step(request.step, context))
            elif call == "close":
                response.close.CopyFrom(await self._close(request.close, context))
            else:
                raise errors.invalid_argument("the stream request names no call", "EMPTY_CALL")
        except errors.EnvhubError as exc:
            self._metrics.error(f"SessionStream.{call}", exc.code)
            response.error.CopyFrom(pb.StreamError(code=exc.code.value[0], message=exc.message, reason=exc.reason))
        return response

    async def SessionStream(
        self, request_iterator: AsyncIterator[pb.SessionStreamRequest], context: Context
    ) -> AsyncIterator[pb.SessionStreamResponse]:
        """Answers each request as soon as it completes; in request order within one session."""
        out: asyncio.Queue[pb.SessionStreamResponse | None] = asyncio.Queue()
        last_of_session: dict[str, asyncio.Task[None]] = {}
        tasks: set[asyncio.Task[None]] = set()

        async def answer(request: pb.SessionStreamRequest, previous: asyncio.Task[None] | None) -> None:
            response = await self._stream_one(request, context)
            if previous is not None:
                await asyncio.wait([previous])
            out.put_nowait(response)

        def forget(done: asyncio.Task[None]) -> None:
            for key, task in list(last_of_session.items()):
                if task is done:
                    del last_of_session[key]

        async def read() -> None:
            async for request in request_iterator:
                call = request.WhichOneof("call")
                key = getattr(request, call).session_id if call in ("reset", "step", "close") else ""
                task = asyncio.create_task(answer(request, last_of_session.get(key) if key else None))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                if key:
                    last_of_session[key] = task
                    task.add_done_callback(forget)
            while tasks:
                await asyncio.wait(set(tasks))
            out.put_nowait(None)

        reader = asyncio.create_task(read())
        try:
            while (response := await out.get()) is not None:
                yield response
            await reader
        finally:
            reader.cancel()
            for task in list(tasks):
                task.cancel()
