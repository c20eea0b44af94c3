"""Executors: where the workers live. The worker group (the single controller, as in verl) holds
worker handles and calls their methods through an executor; the roles themselves are plain classes.

    executor.spawn(cls, *args)               -> handle (the object itself, or a Ray actor)
    executor.submit(handle, "method", *args) -> pending result; may be passed on as another call's argument
    executor.gather(pendings)                -> results, in order
    executor.call(handle, "method", *args)   -> one result (submit + gather)

`LocalExecutor` runs everything in this process, one call at a time (tests, a single GPU box);
`RayExecutor` makes each worker a Ray actor, so calls submitted together run in parallel and a
pending result handed to other calls travels once through the object store (the learner's weights
to every rollout worker). A new executor (e.g. one process per GPU) only implements these methods.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol

from trainer.config import TrainerConfig


class Executor(Protocol):
    """Creates workers and runs their methods."""

    def spawn(self, cls: type, *args: Any) -> Any:
        """A new worker `cls(*args)`; returns its handle."""
        ...

    def submit(self, worker: Any, method: str, *args: Any) -> Any:
        """Start `worker.method(*args)`; returns a pending result."""
        ...

    def gather(self, pending: Sequence[Any]) -> list[Any]:
        """Wait for pending results; their values in order."""
        ...

    def call(self, worker: Any, method: str, *args: Any) -> Any:
        """`worker.method(*args)`, waited for."""
        ...

    def kill(self, workers: Sequence[Any]) -> None:
        """Release workers (after their own `close`)."""
        ...


class LocalExecutor:
    """Workers are objects in this process; a call runs when submitted."""

    def spawn(self, cls: type, *args: Any) -> Any:
        return cls(*args)

    def submit(self, worker: Any, method: str, *args: Any) -> Any:
        return getattr(worker, method)(*args)

    def gather(self, pending: Sequence[Any]) -> list[Any]:
        return list(pending)

    def call(self, worker: Any, method: str, *args: Any) -> Any:
        return getattr(worker, method)(*args)

    def kill(self, workers: Sequence[Any]) -> None:
        del workers


class RayExecutor:
    """Workers are Ray actors (`num_cpus=0`: placement is the cluster's business, not a CPU count)."""

    def __init__(self, config: TrainerConfig) -> None:
        import ray

        init_ray(config)
        self._ray = ray
        self._remote: dict[type, Any] = {}

    def spawn(self, cls: type, *args: Any) -> Any:
        if cls not in self._remote:
            self._remote[cls] = self._ray.remote(num_cpus=0)(cls)
        return self._remote[cls].remote(*args)

    def submit(self, worker: Any, method: str, *args: Any) -> Any:
        return getattr(worker, method).remote(*args)

    def gather(self, pending: Sequence[Any]) -> list[Any]:
        return list(self._ray.get(list(pending)))

    def call(self, worker: Any, method: str, *args: Any) -> Any:
        return self._ray.get(self.submit(worker, method, *args))

    def kill(self, workers: Sequence[Any]) -> None:
        for worker in workers:
            self._ray.kill(worker)


def make_executor(config: TrainerConfig) -> Executor:
    """`RayExecutor` when `ray.enabled`, else `LocalExecutor`."""
    return RayExecutor(config) if config.ray.enabled else LocalExecutor()


def init_ray(config: TrainerConfig) -> None:
    """Connect to `ray.address`, or start a local Ray (auth off, object store capped)."""
    import ray

    if ray.is_initialized():
        return
    if config.ray.address:
        ray.init(address=config.ray.address)
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(
        num_cpus=max(2, os.cpu_count() or 2),
        object_store_memory=config.ray.object_store_mb * 1024 * 1024,
        include_dashboard=False,
        log_to_driver=False,
    )
