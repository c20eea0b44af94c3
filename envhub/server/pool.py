"""All worker processes of a server: start-up, placement of new sessions, restart after death."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from envhub.core import errors
from envhub.server.catalog import KindCatalog
from envhub.server.metrics import Metrics
from envhub.server.sessions import SessionTable
from envhub.server.worker_handle import Worker

log = logging.getLogger(__name__)
AFFINITY_SLACK = 16
"""Sessions more than the least-loaded worker that a worker already holding a task may have and still
take a new session of it."""
RESTART_DELAY_S = 1.0
MAX_RESTART_DELAY_S = 60.0


class WorkerPool:
    """`workers` processes per environment kind, and the catalog each kind announced."""

    def __init__(
        self,
        environments: tuple[str, ...],
        workers: int,
        table: SessionTable,
        metrics: Metrics,
        configs: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        inline_starts: bool = False,
    ) -> None:
        self._table = table
        self._metrics = metrics
        configs = configs or {}
        self._workers = {
            env: [
                Worker(env, index, self._on_death, dict(configs.get(env, {})), workers, inline_starts=inline_starts)
                for index in range(workers)
            ]
            for env in environments
        }
        self.catalogs: dict[str, KindCatalog] = {}
        self._restarts: set[asyncio.Task[None]] = set()
        self._stopping = False

    async def start(self) -> None:
        """Start every worker; raises EnvhubError (with the kind's message) if one fails."""
        everyone = [worker for group in self._workers.values() for worker in group]
        results = await asyncio.gather(*(worker.start() for worker in everyone), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                await self.stop()
                raise result
            self.catalogs.setdefault(result.name, result)
        # Served under the kind's own name (a kind given as "module:Class" has a short wire name).
        by_name = {group[0].name: group for group in self._workers.values()}
        if len(by_name) != len(self._workers):
            await self.stop()
            raise errors.failed_precondition("two of the environments served have the same name", "ENVIRONMENT_START")
        self._workers = by_name

    def catalog(self, environment: str) -> KindCatalog:
        """The catalog of a hosted kind; INVALID_ARGUMENT (UNKNOWN_ENVIRONMENT) otherwise."""
        catalog = self.catalogs.get(environment)
        if catalog is None:
            hosted = ", ".join(sorted(self.catalogs))
            raise errors.invalid_argument(
                f"environment {environment!r} is not served here; this server hosts: {hosted}",
                "UNKNOWN_ENVIRONMENT",
                environment=environment,
            )
        return catalog

    def place(self, environment: str, task_id: str = "") -> Worker:
        """The least-loaded live worker of `environment`; for a session of `task_id`, a worker already
        holding sessions of that task (its game loaded) unless it holds `AFFINITY_SLACK` more sessions
        than the least-loaded one (a restored group, like a forked one, lands together)."""
        self.catalog(environment)
        alive = [worker for worker in self._workers[environment] if worker.alive]
        if not alive:
            raise errors.unavailable(f"every {environment} worker is restarting; retry shortly", "NO_WORKER")
        least = min(alive, key=lambda worker: worker.load)
        holding = [worker for worker in alive if task_id and worker.tasks[task_id] > 0]
        if holding:
            warm = min(holding, key=lambda worker: worker.load)
            if len(warm.sessions) <= len(least.sessions) + AFFINITY_SLACK:
                return warm
        return least

    def workers(self) -> list[Worker]:
        return [worker for group in self._workers.values() for worker in group]

    def _on_death(self, worker: Worker) -> None:
        self._table.drop_worker(worker)
        if self._stopping or not worker.started:
            return
        self._metrics.worker_restarts.labels(worker.name).inc()
        task = asyncio.get_running_loop().create_task(self._restart(worker))
        self._restarts.add(task)
        task.add_done_callback(self._restarts.discard)

    async def _restart(self, worker: Worker) -> None:
        delay = RESTART_DELAY_S
        while not self._stopping:
            await asyncio.sleep(delay)
            try:
                await worker.start()
                return
            except errors.EnvhubError as exc:
                delay = min(MAX_RESTART_DELAY_S, 2 * delay)
                name = f"{worker.environment}/{worker.index}"
                log.error("restarting worker %s failed (next try in %.0f s): %s", name, delay, exc)

    async def stop(self) -> None:
        """Stop every worker (their sessions close) and any restart in progress."""
        self._stopping = True
        for task in self._restarts:
            task.cancel()
        await asyncio.gather(*(worker.stop() for worker in self.workers()))
