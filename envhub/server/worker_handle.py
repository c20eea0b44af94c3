"""The server side of the pipe: worker processes as seen from the server's event loop.

Each `Worker` owns one child process (see `envhub.server.worker_process`) and a pipe to it. Operations
(`envhub.server.worker_ops`) are written to the pipe with a call id and a future is kept under
it; the event loop reads `(call_id, Reply)` answers as they arrive (`envhub.server.worker_pipe`: no
thread hop, and the loop never blocks on the pipe) and resolves the matching futures, so requests
pipeline (a create waiting for its task to be prepared is answered after operations sent behind it).
When the pipe reports end-of-file the worker is dead: its
pending calls fail with UNAVAILABLE, the server forgets its sessions, and it is restarted.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing
from collections import Counter
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

from envhub.core import errors
from envhub.server import worker_ops as ops
from envhub.server.catalog import KindCatalog
from envhub.server.worker_pipe import PipeEnd
from envhub.server.worker_process import worker_main

R = TypeVar("R")

log = logging.getLogger(__name__)
_CONTEXT = multiprocessing.get_context("spawn")  # no fork of a process running gRPC threads
_READY = 0
"""Call id of the worker's first message (its catalog, or why it could not start), which is a bare `Reply`."""


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def discard_outcome(future: asyncio.Future[Any]) -> None:
    """Fire-and-forget a worker call whose outcome (often NOT_FOUND) nobody needs."""
    future.add_done_callback(_retrieve)


class Worker:
    """One worker process for one environment kind."""

    def __init__(
        self,
        environment: str,
        index: int,
        on_death: Callable[[Worker], None],
        config: dict[str, Any] | None = None,
        workers: int = 1,
        *,
        inline_starts: bool = False,
    ) -> None:
        self.environment = environment
        self.name = environment
        """The kind's wire name (its catalog's name once started; `environment` may be "module:Class")."""
        self.config = dict(config or {})
        """Server-side configuration of the kind (`EnvironmentKind.from_config`)."""
        self.index = index
        self.workers = workers
        """Workers of this kind (worker `index` prepares every `workers`-th task ahead)."""
        self.inline_starts = inline_starts
        """Session starts on the stepping thread even where the kind allows a start thread (`ServerConfig`)."""
        self.sessions: set[str] = set()
        """Ids of the sessions living in this worker (kept by the session table)."""
        self.tasks: Counter[str] = Counter()
        """Task id -> sessions of it living in this worker (kept by the session table): the worker has
        that task's game loaded, so a new session of it is cheaper here (placement prefers it)."""
        self._on_death = on_death
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._call_ids = itertools.count(1)
        self._pipe: PipeEnd | None = None
        self._process: BaseProcess | None = None
        self.alive = False
        self.started = False
        """True once the worker announced its catalog (a worker that never started is not restarted)."""

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def load(self) -> tuple[int, int]:
        """Sort key for placement: sessions held, then calls in flight."""
        return (len(self.sessions), len(self._pending))

    async def start(self) -> KindCatalog:
        """Spawn the process and wait for its catalog; raises EnvhubError if the kind fails to start."""
        if self._process is not None:  # a restart: reap the dead process
            self._process.kill()
            await asyncio.get_running_loop().run_in_executor(None, self._process.join)
        parent_conn, child_conn = _CONTEXT.Pipe()
        process = _CONTEXT.Process(
            target=worker_main,
            args=(self.environment, self.config, child_conn, self.index, self.workers, self.inline_starts),
            name=f"envhub-{self.environment}-{self.index}",
        )
        process.daemon = True
        process.start()
        child_conn.close()
        self._process = process
        ready: asyncio.Future[KindCatalog] = asyncio.get_running_loop().create_future()
        self._pending[_READY] = ready
        self._pipe = PipeEnd(parent_conn, self._on_message, self._died)
        self.alive = True
        catalog = await ready
        self.name = catalog.name
        self.started = True
        log.info("worker %s/%d started (pid %s)", self.environment, self.index, process.pid)
        return catalog

    def call(self, op: ops.Op[R]) -> asyncio.Future[R]:
        """Send one operation; the future resolves with its result or raises its EnvhubError."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        if not self.alive or self._pipe is None:
            future.set_exception(errors.unavailable(f"worker {self.environment}/{self.index} is restarting"))
            return future
        call_id = next(self._call_ids)
        try:
            self._pipe.send((call_id, op))
        except OSError:
            self._died()
            future.set_exception(errors.unavailable(f"worker {self.environment}/{self.index} died", "WORKER_LOST"))
            return future
        self._pending[call_id] = future
        return future

    def _on_message(self, message: Any) -> None:
        call_id, reply = (_READY, message) if isinstance(message, ops.Reply) else message
        future = self._pending.pop(call_id)
        if not future.done():  # else the caller gave up (deadline, cancellation)
            if reply.error is None:
                future.set_result(reply.value)
            else:
                future.set_exception(reply.error)

    def _died(self) -> None:
        if not self.alive:
            return
        self.alive = False
        self._detach()
        lost = errors.unavailable(f"worker {self.environment}/{self.index} died; its sessions are lost", "WORKER_LOST")
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(lost)
        log.error("worker %s/%d (pid %s) died", self.environment, self.index, self.pid)
        self._on_death(self)

    def _detach(self) -> None:
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None

    async def stop(self, timeout: float = 10.0) -> None:
        """Ask the worker to close its sessions and exit; kill it if it does not."""
        process = self._process
        if self.alive and self._pipe is not None:
            self.alive = False
            try:
                self._pipe.send((next(self._call_ids), ops.Stop()))
            except OSError:
                log.warning("worker %s/%d pipe already closed", self.environment, self.index)
            self._detach()
        if process is not None:
            await asyncio.get_running_loop().run_in_executor(None, process.join, timeout)
            if process.is_alive():
                process.kill()
                process.join()
