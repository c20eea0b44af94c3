"""Executors: where the workers live. The worker group (the single controller, as in verl) holds
worker handles and calls their methods through an executor; the roles themselves are plain classes.

    executor.reserve(bundles)                -> reserve GPU bundles (a Ray placement group; no-op locally)
    executor.spawn(cls, *args, slot=slot)    -> handle (the object itself, or a Ray actor in its slot)
    executor.submit(handle, "method", *args) -> pending result; may be passed on as another call's argument
    executor.gather(pendings)                -> results, in order
    executor.call(handle, "method", *args)   -> one result (submit + gather)

`LocalExecutor` runs everything in this process, one call at a time (tests, a single GPU box);
`RayExecutor` makes each worker a Ray actor, so calls submitted together run in parallel and a
pending result handed to other calls travels once through the object store (the learner's weights
to every rollout worker). A new executor (e.g. one process per GPU) only implements these methods.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any, Protocol

from trainer.config import TrainerConfig
from trainer.workers.placement import Slot

LOCAL_RAY_START_ATTEMPTS = 3
"""Tries to start a local Ray: Ray gives its raylet a fixed 30 s to register and raises when a loaded machine
(a shared CI box, two jobs on 2 cores) misses it; a second start then finds the machine less busy."""
_log = logging.getLogger(__name__)


class Executor(Protocol):
    """Creates workers and runs their methods."""

    def reserve(self, bundles: Sequence[dict[str, float]]) -> None:
        """Reserve resource bundles that later `spawn(..., slot=...)` calls place workers into."""
        ...

    def spawn(self, cls: type, *args: Any, slot: Slot | None = None) -> Any:
        """A new worker `cls(*args)` in `slot` (its bundle and GPU share); returns its handle."""
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

    def reserve(self, bundles: Sequence[dict[str, float]]) -> None:
        if bundles:
            raise ValueError("GPU placement needs Ray: set ray.enabled to true")

    def spawn(self, cls: type, *args: Any, slot: Slot | None = None) -> Any:
        del slot
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
    """Workers are Ray actors (`num_cpus=0`); GPUs come from the placement group of `reserve`: each
    actor asks its slot's `num_gpus` in its own bundle, so Ray sets its `CUDA_VISIBLE_DEVICES`."""

    def __init__(self, config: TrainerConfig) -> None:
        import ray

        init_ray(config)
        self._ray = ray
        self._timeout_s = config.placement.ready_timeout_s
        self._strategy = config.placement.strategy
        self._group: Any = None

    def reserve(self, bundles: Sequence[dict[str, float]]) -> None:
        if not bundles:
            return
        from ray.util.placement_group import placement_group

        group = placement_group(list(bundles), strategy=self._strategy)
        ready, _ = self._ray.wait([group.ready()], timeout=self._timeout_s)
        if not ready:
            self._ray.util.remove_placement_group(group)
            raise RuntimeError(
                f"Ray could not reserve {list(bundles)} within {self._timeout_s:.0f} s "
                f"(cluster has {self._ray.cluster_resources()}): lower placement.* or add GPUs"
            )
        self._group = group

    def spawn(self, cls: type, *args: Any, slot: Slot | None = None) -> Any:
        options: dict[str, Any] = {"num_cpus": 0}
        if slot is not None and slot.bundle is not None:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            if self._group is None:
                raise RuntimeError("spawn into a bundle before reserve()")
            options["num_gpus"] = slot.num_gpus
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=self._group, placement_group_bundle_index=slot.bundle
            )
        return self._ray.remote(**options)(cls).remote(*args)

    def submit(self, worker: Any, method: str, *args: Any) -> Any:
        return getattr(worker, method).remote(*args)

    def gather(self, pending: Sequence[Any]) -> list[Any]:
        return list(self._ray.get(list(pending)))

    def call(self, worker: Any, method: str, *args: Any) -> Any:
        return self._ray.get(self.submit(worker, method, *args))

    def kill(self, workers: Sequence[Any]) -> None:
        for worker in workers:
            self._ray.kill(worker)
        if self._group is not None:
            self._ray.util.remove_placement_group(self._group)
            self._group = None


def make_executor(config: TrainerConfig) -> Executor:
    """`RayExecutor` when `ray.enabled`, else `LocalExecutor`."""
    return RayExecutor(config) if config.ray.enabled else LocalExecutor()


def init_ray(config: TrainerConfig) -> None:
    """Connect to `ray.address`, or start a local Ray (auth off, object store capped); `ray.runtime_env`
    applies to every actor (the job's default runtime environment)."""
    import ray

    if ray.is_initialized():
        return
    runtime_env = dict(config.ray.runtime_env) or None
    if config.ray.address:
        ray.init(address=config.ray.address, runtime_env=runtime_env)
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    for attempt in range(1, LOCAL_RAY_START_ATTEMPTS + 1):
        try:
            ray.init(
                num_cpus=max(2, os.cpu_count() or 2),
                object_store_memory=config.ray.object_store_mb * 1024 * 1024,
                include_dashboard=False,
                log_to_driver=False,
                runtime_env=runtime_env,
            )
            return
        except Exception as exc:  # Ray raises a bare Exception for a raylet that missed its start window
            if "timed out during startup" not in str(exc) or attempt == LOCAL_RAY_START_ATTEMPTS:
                raise
            _log.warning(
                "local Ray start %d of %d timed out (machine busy); starting again", attempt, LOCAL_RAY_START_ATTEMPTS
            )
            ray.shutdown()
