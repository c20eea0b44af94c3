"""Executors: where the workers live. The worker group (the single controller, as in verl) holds
worker handles and calls their methods through an executor; the roles themselves are plain classes.

    executor.reserve(bundles)                          -> reserve GPU bundles (a Ray placement group; no-op locally)
    executor.spawn(slot, Cls, *args)                   -> Handle[Cls] (the object itself, or a Ray actor in its slot)
    executor.submit(handle, Cls.method, *args)         -> Pending[result]; `.as_argument()` passes it to other calls
    executor.gather(pendings)                          -> results, in order
    executor.call(handle, Cls.method, *args)           -> one result (submit + gather)

Methods are passed by reference (`RolloutWorker.run`), so the type checker sees each call's arguments
and result across the process boundary; a method of another class is refused (`TypeError`).
`LocalExecutor` runs everything in this process, one call at a time (tests, a single GPU box);
`RayExecutor` makes each worker a Ray actor, so calls submitted together run in parallel and a
pending result handed to other calls travels once through the object store (the learner's weights
to every rollout worker). A new executor (e.g. one process per GPU) only implements these methods.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, cast

from trainer.config import RayConfig, TrainerConfig
from trainer.workers.placement import Slot

LOCAL_RAY_START_ATTEMPTS = 3
"""Tries to start a local Ray: Ray gives its raylet a fixed 30 s to register and raises when a loaded machine
(a shared CI box, two jobs on 2 cores) misses it; a second start then finds the machine less busy."""
_log = logging.getLogger(__name__)

W = TypeVar("W")
R = TypeVar("R")
P = ParamSpec("P")


@dataclass(frozen=True, eq=False)
class Handle(Generic[W]):
    """A worker of class `cls` placed by an executor."""

    cls: Callable[..., W]
    """The worker's class (what `spawn` built)."""
    ref: Any
    """The worker itself (`LocalExecutor`) or its Ray actor handle (`RayExecutor`)."""


@dataclass(frozen=True, eq=False)
class Pending(Generic[R]):
    """A submitted call's result, not yet waited for."""

    ref: Any
    """The value itself (`LocalExecutor`) or its Ray object reference (`RayExecutor`)."""

    def as_argument(self) -> R:
        """This result as an argument of later calls: under Ray the object reference, which Ray resolves
        where each call runs (one object-store copy for them all); locally the value. Only for arguments of
        `submit`/`call`: read a result with `gather`."""
        return cast(R, self.ref)


def method_name(cls: Callable[..., Any], function: Callable[..., Any]) -> str:
    """The name under which `function` is a method of `cls` (the same object, not just the same name);
    TypeError when it is not one of its methods."""
    name = getattr(function, "__name__", "")
    if not name or getattr(cls, name, None) is not function:
        owner = getattr(cls, "__name__", repr(cls))
        raise TypeError(f"{getattr(function, '__qualname__', function)!r} is not a method of {owner}")
    return name


class Executor(Protocol):
    """Creates workers and runs their methods."""

    def reserve(self, bundles: Sequence[dict[str, float]]) -> None:
        """Reserve resource bundles that later `spawn(slot, ...)` calls place workers into."""
        ...

    def spawn(self, slot: Slot | None, cls: Callable[P, W], *args: P.args, **kwargs: P.kwargs) -> Handle[W]:
        """A new worker `cls(*args, **kwargs)` in `slot` (its bundle and GPU share; None: no GPU)."""
        ...

    def submit(
        self, worker: Handle[W], method: Callable[Concatenate[W, P], R], *args: P.args, **kwargs: P.kwargs
    ) -> Pending[R]:
        """Start `method` on `worker`; returns its pending result."""
        ...

    def gather(self, pending: Sequence[Pending[R]]) -> list[R]:
        """Wait for pending results; their values in order."""
        ...

    def call(self, worker: Handle[W], method: Callable[Concatenate[W, P], R], *args: P.args, **kwargs: P.kwargs) -> R:
        """`method` on `worker`, waited for."""
        ...

    def kill(self, workers: Sequence[Handle[Any]]) -> None:
        """Release workers (after their own `close`)."""
        ...


class LocalExecutor:
    """Workers are objects in this process; a call runs when submitted."""

    def reserve(self, bundles: Sequence[dict[str, float]]) -> None:
        if bundles:
            raise ValueError("GPU placement needs Ray: set ray.enabled to true")

    def spawn(self, slot: Slot | None, cls: Callable[P, W], *args: P.args, **kwargs: P.kwargs) -> Handle[W]:
        del slot
        return Handle(cls, cls(*args, **kwargs))

    def submit(
        self, worker: Handle[W], method: Callable[Concatenate[W, P], R], *args: P.args, **kwargs: P.kwargs
    ) -> Pending[R]:
        return Pending(self.call(worker, method, *args, **kwargs))

    def gather(self, pending: Sequence[Pending[R]]) -> list[R]:
        return [p.ref for p in pending]

    def call(self, worker: Handle[W], method: Callable[Concatenate[W, P], R], *args: P.args, **kwargs: P.kwargs) -> R:
        method_name(worker.cls, method)
        return method(worker.ref, *args, **kwargs)

    def kill(self, workers: Sequence[Handle[Any]]) -> None:
        del workers


class RayExecutor:
    """Workers are Ray actors (`num_cpus=0`); GPUs come from the placement group of `reserve`: each
    actor asks its slot's `num_gpus` in its own bundle, so Ray sets its `CUDA_VISIBLE_DEVICES`. With vLLM's
    CPU build the plan's units are CPU cores instead: bundles of CPUs, each actor its share as `num_cpus`."""

    def __init__(self, config: TrainerConfig) -> None:
        import ray

        init_ray(config.ray)
        self._ray = ray
        self._timeout_s = config.placement.ready_timeout_s
        self._strategy = config.placement.strategy
        self._unit = "CPU" if config.vllm_on_cpu() else "GPU"
        """The resource a placement plan's units stand for (trainer/workers/placement.py plans GPUs)."""
        self._group: Any = None

    def reserve(self, bundles: Sequence[dict[str, float]]) -> None:
        if not bundles:
            return
        from ray.util.placement_group import placement_group

        bundles = [{self._unit if key == "GPU" else key: units for key, units in b.items()} for b in bundles]
        group = placement_group(list(bundles), strategy=self._strategy)
        ready, _ = self._ray.wait([group.ready()], timeout=self._timeout_s)
        if not ready:
            self._ray.util.remove_placement_group(group)
            raise RuntimeError(
                f"Ray could not reserve {list(bundles)} within {self._timeout_s:.0f} s "
                f"(cluster has {self._ray.cluster_resources()}): lower placement.* or add GPUs"
            )
        self._group = group

    def spawn(self, slot: Slot | None, cls: Callable[P, W], *args: P.args, **kwargs: P.kwargs) -> Handle[W]:
        options: dict[str, Any] = {"num_cpus": 0}
        if slot is not None and slot.bundle is not None:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            if self._group is None:
                raise RuntimeError("spawn into a bundle before reserve()")
            options["num_gpus" if self._unit == "GPU" else "num_cpus"] = slot.num_gpus
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=self._group, placement_group_bundle_index=slot.bundle
            )
        return Handle(cls, self._ray.remote(**options)(cls).remote(*args, **kwargs))

    def submit(
        self, worker: Handle[W], method: Callable[Concatenate[W, P], R], *args: P.args, **kwargs: P.kwargs
    ) -> Pending[R]:
        return Pending(getattr(worker.ref, method_name(worker.cls, method)).remote(*args, **kwargs))

    def gather(self, pending: Sequence[Pending[R]]) -> list[R]:
        return list(self._ray.get([p.ref for p in pending]))

    def call(self, worker: Handle[W], method: Callable[Concatenate[W, P], R], *args: P.args, **kwargs: P.kwargs) -> R:
        result: R = self._ray.get(self.submit(worker, method, *args, **kwargs).ref)
        return result

    def kill(self, workers: Sequence[Handle[Any]]) -> None:
        for worker in workers:
            self._ray.kill(worker.ref)
        if self._group is not None:
            self._ray.util.remove_placement_group(self._group)
            self._group = None


def make_executor(config: TrainerConfig) -> Executor:
    """`RayExecutor` when `ray.enabled`, else `LocalExecutor`."""
    return RayExecutor(config) if config.ray.enabled else LocalExecutor()


def init_ray(settings: RayConfig) -> None:
    """Connect to `ray.address`, or start a local Ray (auth off, object store capped); `ray.runtime_env`
    applies to every actor (the job's default runtime environment)."""
    import ray

    if ray.is_initialized():
        return
    runtime_env = dict(settings.runtime_env) or None
    if settings.address:
        ray.init(address=settings.address, runtime_env=runtime_env)
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    for attempt in range(1, LOCAL_RAY_START_ATTEMPTS + 1):
        try:
            ray.init(
                num_cpus=max(2, os.cpu_count() or 2),
                object_store_memory=settings.object_store_mb * 1024 * 1024,
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
