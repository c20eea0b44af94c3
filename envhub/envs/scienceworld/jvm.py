"""One capped-heap JVM per process, hosting many ScienceWorld simulators.

The JVM is started lazily through py4j (the same way the `scienceworld` package does,
plus heap and GC options). Each simulator is a separate
`scienceworld.runtime.pythonapi.PythonInterface` object inside it (~16 MB).

Two pieces of simulator state are process-global in the JVM and would otherwise couple
simulators and make replays diverge: Scala's global `scala.util.Random` (drawn from by
task setup, wandering animals, genetics) and the object-id counter
`util.UniqueIdentifier`. `Jvm.seed` and `Jvm.id_counter` give access to both, so every
simulator can run under its own seed and counter.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
from scienceworld.constants import BASEPATH, JAR_PATH

from envhub.core import errors

DEFAULT_JAVA_OPTS: tuple[str, ...] = (
    "-XX:+UseSerialGC",
    "-XX:+UnlockExperimentalVMOptions",
    "-XX:hashCode=2",
)
"""A single-threaded collector (~250-320 MB per JVM instead of 0.7-1.4 GB) and constant
identity hash codes. The simulator keeps objects in hash sets keyed by identity hash, and
HotSpot's default identity hash depends on which thread hashed what before, so iteration
order (world layout, ambiguity resolution, gold paths) changes from run to run. With
`hashCode=2` every identity hash is 1 and that order is the insertion order. The heap cap
(`-Xms` = `-Xmx`) is added by `heap_options` from the number of simulators the JVM may hold."""

DEFAULT_SIMULATORS = 160
"""Simulators one JVM holds by default (the kind's `sessions_per_worker`): 256 sessions on 2 workers
with room for uneven placement (a group's forks go to its first session's worker, so groups created
concurrently can put more than 128 of 256 on one worker: seen with the rollout bench)."""
BASE_HEAP_MB = 128
"""Heap for the JVM itself and the gold-path simulator (3.4 MB live with no simulator, measured)."""
HEAP_PER_SIMULATOR_MB = 18
"""Heap budgeted per loaded simulator: 1.6x the measured live heap after a full GC (10.6-11.3 MB
at 8-128 simulators of mixed tasks, 0.1 MB more per 100 steps), so the collector has room."""


def heap_options(java_opts: Sequence[str], simulators: int) -> tuple[str, ...]:
    """`java_opts` with a fixed heap (`-Xms` = `-Xmx`) sized for `simulators` loaded simulators,
    unless they set `-Xmx`.

    A fixed heap: a heap that starts small grows through full collections (0.6-0.75 s pauses
    under load) while sessions are created; with the heap fixed, a run of 32 steppers and 4
    clients creating sessions spent 6-7 s in GC pauses instead of 12-18 s.
    """
    if any(opt.startswith("-Xmx") for opt in java_opts):
        return tuple(java_opts)
    heap = f"{BASE_HEAP_MB + simulators * HEAP_PER_SIMULATOR_MB}m"
    return (f"-Xms{heap}", f"-Xmx{heap}", *java_opts)


def step_seed(seed: int, step: int) -> int:
    """The Java `long` seed used before step `step` of an episode started with `seed`."""
    digest = hashlib.sha256(f"envhub-scienceworld:{seed}:{step}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class Jvm:
    """A lazily started JVM running the ScienceWorld jar."""

    def __init__(self, java_opts: Sequence[str] | None = None) -> None:
        """`java_opts`: the JVM's options; default `DEFAULT_JAVA_OPTS` with a heap for `DEFAULT_SIMULATORS`."""
        self.java_opts = tuple(heap_options(DEFAULT_JAVA_OPTS, DEFAULT_SIMULATORS) if java_opts is None else java_opts)
        self._gateway: JavaGateway | None = None
        self._random: Any = None
        self._ids: Any = None

    @property
    def started(self) -> bool:
        return self._gateway is not None

    def _start(self) -> JavaGateway:
        try:
            port, proc = launch_gateway(
                classpath=JAR_PATH, die_on_exit=True, cwd=BASEPATH, return_proc=True, javaopts=list(self.java_opts)
            )
        except (OSError, ValueError) as exc:  # py4j reads the port from the JVM's stdout: ValueError if it died
            raise errors.unavailable(
                f"the ScienceWorld JVM did not start (java on PATH? options {list(self.java_opts)}): {exc}",
                "JVM_START_FAILED",
            ) from exc
        gateway = JavaGateway(gateway_parameters=GatewayParameters(auto_field=True, port=port), java_process=proc)
        klass = gateway.jvm.java.lang.Class
        self._random = klass.forName("scala.util.Random$").getField("MODULE$").get(None)
        self._ids = klass.forName("util.UniqueIdentifier$").getField("MODULE$").get(None)
        self._gateway = gateway
        return gateway

    @property
    def gateway(self) -> JavaGateway:
        """The py4j gateway, starting the JVM on first use."""
        return self._gateway or self._start()

    def new_simulator(self) -> Any:
        """A fresh, unloaded `PythonInterface` simulator inside this JVM."""
        return self.gateway.jvm.scienceworld.runtime.pythonapi.PythonInterface()

    def release(self, java_object: Any) -> None:
        """Let the JVM collect `java_object` (a simulator that will not be used again)."""
        if self._gateway is not None:
            self._gateway.detach(java_object)

    def strings(self, java_list: Any) -> list[str]:
        """The strings of a Java `List<String>` in three py4j round trips (iterating costs one per item).

        The JVM joins them with newlines; if an item holds a newline itself, they are read one by one.
        """
        size = int(java_list.size())
        if size == 0:
            return []
        items = str(self.gateway.jvm.java.lang.String.join("\n", java_list)).split("\n")
        return items if len(items) == size else [str(item) for item in java_list]

    def seed(self, value: int) -> None:
        """Re-seed Scala's global `scala.util.Random`."""
        self.gateway  # noqa: B018 - starts the JVM when needed
        self._random.setSeed(value)

    @property
    def id_counter(self) -> int:
        """The global object-id counter (`util.UniqueIdentifier`)."""
        self.gateway  # noqa: B018
        return int(self._ids.count())

    @id_counter.setter
    def id_counter(self, value: int) -> None:
        self.gateway  # noqa: B018
        getattr(self._ids, "count_$eq")(value)

    def pid(self) -> int:
        """Process id of the JVM."""
        return int(self.gateway.java_process.pid)

    def close(self) -> None:
        """Stop the JVM (a later call starts a new one)."""
        gateway, self._gateway = self._gateway, None
        if gateway is None:
            return
        proc = gateway.java_process
        gateway.shutdown()
        if proc.poll() is None and proc.stdin is not None:
            # py4j's launched JVM exits when its stdin gets a line (py4j issue #320).
            proc.stdin.write(b"\n")
            proc.stdin.flush()
        proc.wait(timeout=10)
