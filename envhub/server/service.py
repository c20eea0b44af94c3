"""The EnvHub gRPC service (grpc.aio): validation, routing to workers, conversions, errors.

Every RPC body is a coroutine that raises `EnvhubError`; `_unary` turns that into a rich
status (`abort_with_status`) and `SessionStream` into the same `google.rpc.Status` inside the
stream response, so both forms share one implementation. The event loop never blocks on an
environment: worker calls are futures. Malformed request bytes arrive as `Malformed` (see
`envhub.server.requests`) and answer INVALID_ARGUMENT. Once `start_drain()` is called every
call but CreateSnapshot and CloseSession (what a client needs to move a session to another
replica) is refused with UNAVAILABLE (DRAINING) while the ones in flight finish.
"""

from __future__ import annotations

import asyncio
import functools
import re
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeAlias, TypeVar

import grpc
import grpc.aio
from google.protobuf.message import Message

from envhub.core import errors
from envhub.core.environment import TaskSpec
from envhub.core.status import MAX_BATCH_STEPS, STREAM_ADMITTED, to_rpc_status, to_status
from envhub.server import convert
from envhub.server import worker_ops as ops
from envhub.server.auth import caller
from envhub.server.catalog import KindCatalog
from envhub.server.config import ServerConfig
from envhub.server.metrics import Metrics
from envhub.server.pool import WorkerPool
from envhub.server.requests import Malformed, RateLimitedLog
from envhub.server.sessions import SessionRecord, SessionTable
from envhub.server.snapshots import SnapshotSigner
from envhub.server.tenants import Tenant, Tenants
from envhub.server.tracing import Tracing
from envhub.server.worker_handle import Worker, discard_outcome
from envhub.v1 import envhub_pb2 as pb

Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]
T = TypeVar("T")
M = TypeVar("M", bound=Message)
MAX_PAGE_SIZE = 1000
MAX_REQUEST_ID_BYTES = 128
SERVICE = pb.DESCRIPTOR.services_by_name["EnvHub"]
SERVICE_NAME = SERVICE.full_name
_PAGE_TOKEN = re.compile(r"[1-9][0-9]{0,9}")
"""What this server issues as `next_page_token`: a positive decimal offset, ASCII, no padding."""


def _check_batch(entries: int, what: str) -> None:
    """INVALID_ARGUMENT (BATCH_TOO_LARGE) for a batch of more than `MAX_BATCH_STEPS` entries."""
    if entries > MAX_BATCH_STEPS:
        raise errors.invalid_argument(
            f"the batch has {entries} {what}; the limit is {MAX_BATCH_STEPS}",
            "BATCH_TOO_LARGE",
            max_batch_steps=str(MAX_BATCH_STEPS),
        )


def _resolve(catalog: KindCatalog, selector: pb.TaskSelector) -> TaskSpec:
    which = selector.WhichOneof("selector")
    if which == "task_id":
        return catalog.task(selector.task_id)
    if which == "split_index":
        return catalog.at(selector.split_index.split, selector.split_index.index)
    raise errors.invalid_argument("a task is required: set task.task_id or task.split_index", "MISSING_TASK")


def _check_request_id(request_id: str) -> str:
    if len(request_id.encode("utf-8")) > MAX_REQUEST_ID_BYTES:
        limit = str(MAX_REQUEST_ID_BYTES)
        raise errors.invalid_argument(f"request_id has more than {limit} bytes", "BAD_REQUEST_ID", max_bytes=limit)
    return request_id


def _expire(future: asyncio.Future[Any], op: ops.Op[Any]) -> None:
    if not future.done():
        future.set_exception(
            errors.EnvhubError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"{type(op).__name__} did not finish before the deadline",
                "DEADLINE_EXCEEDED",
            )
        )


async def _before(future: asyncio.Future[T], remaining: float | None, op: ops.Op[Any]) -> T:
    """The result of a worker call's `future`, or DEADLINE_EXCEEDED after `remaining` seconds (None: no
    deadline). One timer, where `asyncio.wait_for` adds a waiter future and callbacks to every call; the
    worker's late answer is dropped (`Worker` skips a future already done)."""
    if remaining is None:
        return await future
    timer = asyncio.get_running_loop().call_later(remaining, _expire, future, op)
    try:
        return await future
    finally:
        timer.cancel()


async def _within(event: asyncio.Event, timeout: float | None) -> bool:
    """Whether `event` is set within `timeout` seconds (None: however long it takes)."""
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except TimeoutError:
        return False
    return True


class EnvHubService:
    """Implements envhub.v1.EnvHub over a `WorkerPool` and a `SessionTable`."""

    def __init__(
        self,
        config: ServerConfig,
        pool: WorkerPool,
        table: SessionTable,
        signer: SnapshotSigner,
        metrics: Metrics,
        tenants: Tenants,
        tracing: Tracing | None = None,
    ) -> None:
        self._config = config
        self._tenants = tenants
        self._pool = pool
        self._table = table
        self._signer = signer
        self._metrics = metrics
        self._tracing = tracing or Tracing()
        self._malformed_log = RateLimitedLog()
        self._draining = False
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._emptied = asyncio.Event()
        """Set when, draining, no call is in flight and no session is open."""
        table.on_drop = self._note_emptied
        self._streams: set[asyncio.Queue[Any]] = set()
        self._stream_bodies: dict[str, Callable[[Any, Context], Coroutine[Any, Any, Message]]] = {
            "create": self._create,
            "reset": self._reset,
            "step": self._step,
            "close": self._close,
        }
        """The calls a SessionStream carries, by the request's `call` field."""

    # ------------------------------------------------------------------ drain

    def start_drain(self) -> None:
        """From now on refuse every call but CreateSnapshot and CloseSession with UNAVAILABLE (DRAINING);
        calls in flight go on."""
        self._draining = True
        self._note_emptied()

    async def wait_emptied(self, timeout: float) -> bool:
        """Wait until, draining, no call is in flight and every session is closed (at most `timeout` s)."""
        return await _within(self._emptied, timeout)

    def _note_emptied(self) -> None:
        if self._draining and self._in_flight == 0 and len(self._table) == 0:
            self._emptied.set()

    async def wait_idle(self, timeout: float | None) -> bool:
        """Wait until no call is in flight (at most `timeout` s); True if it got there."""
        return await _within(self._idle, timeout)

    def end_streams(self) -> None:
        """Tell every open SessionStream to end with UNAVAILABLE (DRAINING) after its queued answers."""
        for queue in self._streams:
            queue.put_nowait(_END_DRAINING)

    # ------------------------------------------------------------------ plumbing

    def _enter(self, request: M | Malformed, moving: bool = False) -> M:
        """Admit one call: refused while draining unless it is `moving` a session away (a snapshot,
        a close); malformed bytes answer INVALID_ARGUMENT."""
        if self._draining and not moving:
            raise errors.draining()
        if isinstance(request, Malformed):
            self._malformed_log.note(request)
            raise request.error()
        self._in_flight += 1
        self._idle.clear()
        return request

    def _leave(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._idle.set()
            self._note_emptied()

    async def _unary(
        self,
        method: str,
        request: M | Malformed,
        body: Callable[[M, Context], Coroutine[Any, Any, T]],
        context: Context,
        moving: bool = False,
    ) -> T:
        """One unary RPC: admitted (`_enter`), its body run, an `EnvhubError` answered as a rich status."""
        try:
            message = self._enter(request, moving)
            try:
                return await body(message, context)
            finally:
                self._leave()
        except errors.EnvhubError as exc:
            self._metrics.error(method, exc.code, self._tenant_label(context))
            await context.abort_with_status(to_status(exc))
            raise  # abort_with_status raises; this line only satisfies the type checker

    def _caller(self, context: Context) -> Tenant:
        return caller(self._tenants, context)

    async def _call(self, context: Context, worker: Worker, op: ops.Op[T]) -> T:
        """One worker call under the RPC's deadline."""
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            raise errors.EnvhubError(grpc.StatusCode.DEADLINE_EXCEEDED, "the deadline passed", "DEADLINE_EXCEEDED")
        if self._tracing.enabled:
            with self._tracing.op(type(op).__name__, worker.name, worker.index):
                return await _before(worker.call(op), remaining, op)
        return await _before(worker.call(op), remaining, op)

    def _tenant_label(self, context: Context) -> str:
        """The caller's tenant for a metrics label ("" when its credentials name none)."""
        try:
            return self._caller(context).name
        except errors.EnvhubError:
            return ""

    async def _on_session(self, context: Context, session_id: str, op: ops.Op[T]) -> T:
        """A worker call on a live session of the caller, keeping its idle clock and in-flight count."""
        return await self._on_record(context, self._table.get(session_id, self._caller(context).name), op)

    async def _on_record(self, context: Context, record: SessionRecord, op: ops.Op[T]) -> T:
        """A worker call on the session of `record`, keeping its idle clock and in-flight count."""
        record.in_flight += 1
        try:
            return await self._call(context, record.worker, op)
        finally:
            record.in_flight -= 1
            record.last_used = time.monotonic()

    async def _start_sessions(
        self, context: Context, environment: str, worker: Worker, ids: list[str], op: ops.Op[T], task_id: str
    ) -> T:
        """A worker call creating sessions `ids` of the caller on `task_id`; on any failure they are
        forgotten and closed."""
        tenant = self._caller(context).name
        records = [self._table.add(session_id, environment, worker, tenant, task_id) for session_id in ids]
        for record in records:
            record.in_flight += 1  # not idle while being created
        try:
            result = await self._call(context, worker, op)
        except BaseException:
            for session_id in ids:
                self._table.drop(session_id)
                if worker.alive:  # runs after the create in the worker's FIFO, if it went through
                    discard_outcome(worker.call(ops.Close(session_id)))
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

    async def _list_environments(
        self, request: pb.ListEnvironmentsRequest, context: Context
    ) -> pb.ListEnvironmentsResponse:
        infos = [convert.environment_info(catalog) for catalog in self._pool.catalogs.values()]
        return pb.ListEnvironmentsResponse(environments=infos, replica_id=self._table.replica_id)

    async def _list_tasks(self, request: pb.ListTasksRequest, context: Context) -> pb.ListTasksResponse:
        tasks = self._pool.catalog(request.environment).listing(request.split)
        size = min(request.page_size or MAX_PAGE_SIZE, MAX_PAGE_SIZE)
        start = 0
        if request.page_token:
            if not _PAGE_TOKEN.fullmatch(request.page_token) or int(request.page_token) >= len(tasks):
                raise errors.invalid_argument("page_token is not one this server issued", "BAD_PAGE_TOKEN")
            start = int(request.page_token)
        end = start + size
        return pb.ListTasksResponse(
            tasks=[convert.task_info(spec) for spec in tasks[start:end]],
            next_page_token=str(end) if end < len(tasks) else "",
            total_size=len(tasks),
        )

    async def _create(self, request: pb.CreateSessionRequest, context: Context) -> pb.CreateSessionResponse:
        catalog = self._pool.catalog(request.environment)
        spec = _resolve(catalog, request.task)
        [session_id] = self._table.new_ids(1, self._caller(context))
        worker = self._pool.place(request.environment, spec.task_id)
        op = ops.Create(
            session_id,
            spec.task_id,
            request.seed,  # unset reads as 0, the documented default
            dict(request.options),
            request.max_steps,
            request.include_admissible_actions,
        )
        view = await self._start_sessions(context, request.environment, worker, [session_id], op, spec.task_id)
        return pb.CreateSessionResponse(
            session_id=session_id,
            task=convert.task_info(spec),
            observation=convert.observation(view.observation, view.step_index, view.admissible),
        )

    async def _reset(self, request: pb.ResetSessionRequest, context: Context) -> pb.ResetSessionResponse:
        record = self._table.get(request.session_id, self._caller(context).name)
        catalog = self._pool.catalog(record.environment)
        task_id = _resolve(catalog, request.task).task_id if request.HasField("task") else None
        seed = request.seed if request.HasField("seed") else None
        op = ops.Reset(
            request.session_id, task_id, seed, request.include_admissible_actions, _check_request_id(request.request_id)
        )
        view = await self._on_session(context, request.session_id, op)
        if view.task_id != record.task_id and request.session_id in record.worker.sessions:
            self._table.retask(record, view.task_id)
        return pb.ResetSessionResponse(
            task=convert.task_info(catalog.task(view.task_id)),
            observation=convert.observation(view.observation, view.step_index, view.admissible),
        )

    def _step_op(self, request: pb.StepRequest) -> ops.Step:
        """The worker op of one step request, after checking its action and request_id."""
        self._check_action(request.action)
        return ops.Step(
            request.session_id,
            request.action,
            request.include_admissible_actions,
            request.expected_step_index if request.HasField("expected_step_index") else None,
            _check_request_id(request.request_id),
        )

    async def _step(self, request: pb.StepRequest, context: Context) -> pb.StepResponse:
        op = self._step_op(request)
        record = self._table.get(request.session_id, self._caller(context).name)
        started = time.perf_counter()
        outcome = await self._on_record(context, record, op)
        return self._stepped(record, time.perf_counter() - started, outcome, pb.StepResponse())

    def _stepped(
        self, record: SessionRecord, seconds: float, outcome: ops.StepOutcome, response: pb.StepResponse
    ) -> pb.StepResponse:
        """Count one step of `record`'s session served in `seconds` and write its outcome into `response`."""
        self._metrics.step(record.environment, record.tenant, seconds)
        convert.fill_step_result(response.result, outcome.step, outcome.admissible)
        return response

    async def _step_batch(self, request: pb.StepBatchRequest, context: Context) -> pb.StepBatchResponse:
        """Every step checked on its own, then one `StepMany` per worker, all workers at once."""
        _check_batch(len(request.steps), "steps")
        tenant = self._caller(context).name
        response = pb.StepBatchResponse()
        entries = [response.results.add() for _ in request.steps]
        groups: dict[int, tuple[Worker, list[int], list[ops.Step], list[SessionRecord]]] = {}
        for index, step in enumerate(request.steps):
            try:
                op = self._step_op(step)
                record = self._table.get(step.session_id, tenant)
            except errors.EnvhubError as exc:
                self._batch_error(entries[index], exc, tenant)
                continue
            _, positions, steps, records = groups.setdefault(id(record.worker), (record.worker, [], [], []))
            positions.append(index)
            steps.append(op)
            records.append(record)
        await asyncio.gather(*(self._step_group(context, *group, entries) for group in groups.values()))
        return response

    async def _step_group(
        self,
        context: Context,
        worker: Worker,
        positions: list[int],
        steps: list[ops.Step],
        records: list[SessionRecord],
        entries: list[pb.StepBatchEntry],
    ) -> None:
        """One worker's share of a StepBatch, written into `entries` at `positions`."""
        for record in records:
            record.in_flight += 1
        started = time.perf_counter()
        try:
            replies: tuple[ops.Reply, ...] = await self._call(context, worker, ops.StepMany(tuple(steps)))
        except errors.EnvhubError as exc:  # the worker died or the deadline passed: every step of it failed
            replies = tuple(ops.Reply(error=exc) for _ in steps)
        finally:
            now = time.monotonic()
            for record in records:
                record.in_flight -= 1
                record.last_used = now
        elapsed = time.perf_counter() - started
        for position, record, reply in zip(positions, records, replies, strict=True):
            if reply.error is not None:
                self._batch_error(entries[position], reply.error, record.tenant)
                continue
            outcome: ops.StepOutcome = reply.value
            convert.fill_step_result(entries[position].result, outcome.step, outcome.admissible)
            self._metrics.step(record.environment, record.tenant, elapsed)

    def _batch_error(self, entry: pb.StepBatchEntry, error: errors.EnvhubError, tenant: str) -> None:
        self._metrics.error("StepBatch.step", error.code, tenant)
        entry.error.CopyFrom(to_rpc_status(error))

    async def _close(self, request: pb.CloseSessionRequest, context: Context) -> pb.CloseSessionResponse:
        tenant = self._caller(context).name
        if self._table.lost(request.session_id, tenant):  # already gone with its worker: forget its tombstone
            self._table.drop(request.session_id)
            return pb.CloseSessionResponse()
        record = self._table.get(request.session_id, tenant)
        self._table.drop(request.session_id)
        await self._call(context, record.worker, ops.Close(request.session_id))
        return pb.CloseSessionResponse()

    async def _expert(self, request: pb.GetExpertActionsRequest, context: Context) -> pb.GetExpertActionsResponse:
        actions = await self._on_session(context, request.session_id, ops.ExpertActions(request.session_id))
        return pb.GetExpertActionsResponse(actions=actions)

    async def _snapshot(self, request: pb.CreateSnapshotRequest, context: Context) -> pb.CreateSnapshotResponse:
        state = await self._on_session(context, request.session_id, ops.TakeSnapshot(request.session_id))
        return pb.CreateSnapshotResponse(
            snapshot=self._signer.sign(state),
            step_index=state.step_index,
            environment=state.environment,
            environment_version=state.environment_version,
        )

    async def _restore(self, request: pb.RestoreSnapshotRequest, context: Context) -> pb.RestoreSnapshotResponse:
        state = self._signer.verify(request.snapshot)
        catalog = self._pool.catalog(state.environment)
        spec = catalog.task(state.task_id)
        [session_id] = self._table.new_ids(1, self._caller(context))
        worker = self._pool.place(state.environment, state.task_id)
        op = ops.Restore(session_id, state, request.include_admissible_actions, self._config.cross_version_restore)
        view = await self._start_sessions(context, state.environment, worker, [session_id], op, state.task_id)
        return pb.RestoreSnapshotResponse(
            session_id=session_id,
            task=convert.task_info(spec),
            observation=convert.observation(view.observation, view.step_index, view.admissible),
        )

    async def _restore_batch(
        self, request: pb.RestoreSnapshotBatchRequest, context: Context
    ) -> pb.RestoreSnapshotBatchResponse:
        """Every restore as the unary RestoreSnapshot, all at once (each on the worker its task's
        placement picks), each answered in its place."""
        _check_batch(len(request.restores), "restores")
        tenant = self._tenant_label(context)
        response = pb.RestoreSnapshotBatchResponse()
        entries = [response.results.add() for _ in request.restores]

        async def restore(entry: pb.RestoreSnapshotBatchEntry, one: pb.RestoreSnapshotRequest) -> None:
            try:
                entry.session.CopyFrom(await self._restore(one, context))
            except errors.EnvhubError as exc:
                self._metrics.error("RestoreSnapshotBatch.restore", exc.code, tenant)
                entry.error.CopyFrom(to_rpc_status(exc))

        await asyncio.gather(*(restore(entry, one) for entry, one in zip(entries, request.restores, strict=True)))
        return response

    async def _fork(self, request: pb.ForkSessionRequest, context: Context) -> pb.ForkSessionResponse:
        if not 1 <= request.count <= self._config.max_fork:
            raise errors.invalid_argument(
                f"count must be between 1 and {self._config.max_fork}, not {request.count}", "BAD_FORK_COUNT"
            )
        tenant = self._caller(context)
        record = self._table.get(request.session_id, tenant.name)
        ids = self._table.new_ids(request.count, tenant)
        record.last_used = time.monotonic()
        op = ops.Fork(request.session_id, tuple(ids))
        await self._start_sessions(context, record.environment, record.worker, ids, op, record.task_id)
        return pb.ForkSessionResponse(session_ids=ids)

    # ------------------------------------------------------------------ unary RPCs

    async def ListEnvironments(self, request: Any, context: Context) -> Any:
        return await self._unary("ListEnvironments", request, self._list_environments, context)

    async def ListTasks(self, request: Any, context: Context) -> Any:
        return await self._unary("ListTasks", request, self._list_tasks, context)

    async def CreateSession(self, request: Any, context: Context) -> Any:
        return await self._unary("CreateSession", request, self._create, context)

    async def ResetSession(self, request: Any, context: Context) -> Any:
        return await self._unary("ResetSession", request, self._reset, context)

    async def Step(self, request: Any, context: Context) -> Any:
        return await self._unary("Step", request, self._step, context)

    async def StepBatch(self, request: Any, context: Context) -> Any:
        return await self._unary("StepBatch", request, self._step_batch, context)

    async def CloseSession(self, request: Any, context: Context) -> Any:
        return await self._unary("CloseSession", request, self._close, context, moving=True)

    async def GetExpertActions(self, request: Any, context: Context) -> Any:
        return await self._unary("GetExpertActions", request, self._expert, context)

    async def CreateSnapshot(self, request: Any, context: Context) -> Any:
        return await self._unary("CreateSnapshot", request, self._snapshot, context, moving=True)

    async def RestoreSnapshot(self, request: Any, context: Context) -> Any:
        return await self._unary("RestoreSnapshot", request, self._restore, context)

    async def RestoreSnapshotBatch(self, request: Any, context: Context) -> Any:
        return await self._unary("RestoreSnapshotBatch", request, self._restore_batch, context)

    async def ForkSession(self, request: Any, context: Context) -> Any:
        return await self._unary("ForkSession", request, self._fork, context)

    # ------------------------------------------------------------------ streaming

    async def _stream_call(self, request: pb.SessionStreamRequest, context: Context) -> pb.SessionStreamResponse:
        response = pb.SessionStreamResponse(call_id=request.call_id)
        call = request.WhichOneof("call")
        started, code = time.perf_counter(), grpc.StatusCode.OK
        try:
            body = self._stream_bodies.get(call) if call is not None else None
            if body is None:
                raise errors.invalid_argument("the stream request names no call", "EMPTY_CALL")
            message = self._enter(getattr(request, call))
            try:
                getattr(response, call).CopyFrom(await body(message, context))
            finally:
                self._leave()
        except errors.EnvhubError as exc:
            code = self._stream_failed(response, f"SessionStream.{call}", exc, context)
        self._metrics.rpc(SERVICE_NAME, f"SessionStream.{call}", code, time.perf_counter() - started)
        return response

    def _stream_failed(
        self, response: pb.SessionStreamResponse, method: str, error: errors.EnvhubError, context: Context
    ) -> grpc.StatusCode:
        """A stream's call failed with `error`: counted, and answered in `response`; returns its code."""
        self._metrics.error(method, error.code, self._tenant_label(context))
        response.error.CopyFrom(to_rpc_status(error))
        return error.code

    def _stream_step(
        self,
        request: pb.SessionStreamRequest,
        context: Context,
        answered: Callable[[pb.SessionStreamResponse], None],
    ) -> None:
        """A stream's step as `_stream_call` answers it, with no task of its own: admitted, checked and sent to its
        session's worker now, and answered (`answered(response)`) by a callback of the worker's answer, or at once
        when refused before it is sent. Only where `_call` would add nothing: tracing off, no deadline."""
        response = pb.SessionStreamResponse(call_id=request.call_id)
        started = time.perf_counter()
        try:
            message = self._enter(request.step)
            try:
                op = self._step_op(message)
                record = self._table.get(message.session_id, self._caller(context).name)
            except errors.EnvhubError:
                self._leave()
                raise
        except errors.EnvhubError as exc:
            code = self._stream_failed(response, "SessionStream.step", exc, context)
            self._metrics.rpc(SERVICE_NAME, "SessionStream.step", code, time.perf_counter() - started)
            answered(response)
            return
        record.in_flight += 1
        sent = time.perf_counter()

        def finish(future: asyncio.Future[ops.StepOutcome]) -> None:
            record.in_flight -= 1
            record.last_used = time.monotonic()
            self._leave()
            code = grpc.StatusCode.OK
            try:
                self._stepped(record, time.perf_counter() - sent, future.result(), response.step)
            except errors.EnvhubError as exc:
                code = self._stream_failed(response, "SessionStream.step", exc, context)
            self._metrics.rpc(SERVICE_NAME, "SessionStream.step", code, time.perf_counter() - started)
            answered(response)

        record.worker.call(op).add_done_callback(finish)

    async def SessionStream(self, request_iterator: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
        """Answers each request as soon as it completes; in request order within one session.

        Each call runs as a task of its own (`_stream_call`), except a step of a session with no earlier call
        unanswered on this stream, on a stream with no deadline and tracing off: that one is sent to its worker
        as it is read and answered from the worker's answer (`_stream_step`), no task, no loop turns of its own.
        """
        if self._draining:
            await context.abort_with_status(to_status(errors.draining()))
        await context.send_initial_metadata(((STREAM_ADMITTED, "1"),))
        out: asyncio.Queue[Any] = asyncio.Queue()
        last_of_session: dict[str, asyncio.Future[None]] = {}
        """Session -> its latest call on this stream, until answered (a task, or a step's marker future)."""
        unanswered: set[asyncio.Future[None]] = set()
        at_once = not self._tracing.enabled and context.time_remaining() is None
        loop = asyncio.get_running_loop()

        async def answer(request: pb.SessionStreamRequest, previous: asyncio.Future[None] | None) -> None:
            response = await self._stream_call(request, context)
            if previous is not None and not previous.done():  # its session's earlier answer goes out first
                await asyncio.wait([previous])
            out.put_nowait(response)

        def forget(key: str, done: asyncio.Future[None]) -> None:
            unanswered.discard(done)
            if last_of_session.get(key) is done:
                del last_of_session[key]

        def answered(key: str, marker: asyncio.Future[None], response: pb.SessionStreamResponse) -> None:
            out.put_nowait(response)
            if not marker.done():
                marker.set_result(None)
            forget(key, marker)

        async def read() -> None:
            async for request in request_iterator:
                if isinstance(request, Malformed):  # no call id to answer: end the stream
                    self._malformed_log.note(request)
                    out.put_nowait(request)
                    return
                call = request.WhichOneof("call")
                key = getattr(request, call).session_id if call in ("reset", "step", "close") else ""
                previous = last_of_session.get(key) if key else None
                if at_once and call == "step" and previous is None:
                    marker: asyncio.Future[None] = loop.create_future()
                    unanswered.add(marker)
                    last_of_session[key] = marker
                    self._stream_step(request, context, functools.partial(answered, key, marker))
                    continue
                task = asyncio.create_task(answer(request, previous))
                unanswered.add(task)
                task.add_done_callback(functools.partial(forget, key))
                if key:
                    last_of_session[key] = task
            while unanswered:
                await asyncio.wait(set(unanswered))
            out.put_nowait(_END)

        self._streams.add(out)
        reader = asyncio.create_task(read())
        try:
            while (response := await out.get()) is not _END:
                if isinstance(response, Malformed):
                    await context.abort_with_status(to_status(response.error()))
                if response is _END_DRAINING:
                    await context.abort_with_status(to_status(errors.draining()))
                yield response
            await reader
        finally:
            self._streams.discard(out)
            reader.cancel()
            for task in list(unanswered):  # a step's marker too: its worker's answer then goes nowhere
                task.cancel()


_END = object()
"""Queued by a stream's reader when the client half-closed and every answer is out."""
_END_DRAINING = object()
"""Queued by `end_streams` when the server drains."""
