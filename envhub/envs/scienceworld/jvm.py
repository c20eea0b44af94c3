"""One capped-heap JVM per process, hosting many ScienceWorld simulators.

The JVM is started lazily through py4j (the same way the `scienceworld` package does,
plus heap and GC options). Each simulator is a separate
`scienceworld.runtime.pythonapi.PythonInterface` object inside it (~16 MB).

Two pieces of simulator state are process-global in the JVM and would otherwise couple
simulators and make replays diverge: Scala's global `scala.util.Random` (drawn from by
task setup, wandering animals, genetics) and the object-id counter
`util.UniqueIdentifier`. `Jvm.seed` and `Jvm.id_counter` give access to both, so every
simulator can run under its own seed and counter; `Jvm.turns` makes the calls that set and use
them one at a time when two threads call (`envhub.envs.scienceworld.turns`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
from scienceworld.constants import BASEPATH, JAR_PATH

from envhub.core import errors
from envhub.envs.scienceworld.turns import JvmTurns

DEFAULT_JAVA_OPTS: tuple[str, ...] = (
    "-XX:+UseSerialGC",
    "-XX:+UnlockExperimentalVMOptions",
    "-XX:hashCode=2",
)
"""A single-threaded collector (~250-320 MB per JVM instead of 0.7-1.4 GB) and constant
identity hash codes. The simulator keeps objects in hash sets keyed by identity hash, and
HotSpot's default identity hash depends on which thread hashed what before, so iteration
order (world layout, ambiguity resolution, gold paths) changes from run to run. With
`hashCode=2` every identity hash is 1 and that order is the insertion order. The heap
options are added by `heap_options`."""

DEFAULT_SIMULATORS = 160
"""Simulators one JVM holds by default (the kind's `sessions_per_worker`): 256 sessions on 2 workers
with room for uneven placement (a group's forks go to its first session's worker, so groups created
concurrently can put more than 128 of 256 on one worker: seen with the rollout bench)."""
BASE_HEAP_MB = 96
"""Heap for the JVM itself, the gold-path simulator and the young generation (3.4 MB live with no
simulator, measured)."""
HEAP_PER_SIMULATOR_MB = 14
"""Old-generation heap planned per loaded simulator: 1.3x the measured live heap after a full GC
(10.6-11.3 MB at 8-128 simulators of mixed tasks, 0.1 MB more per 100 steps)."""
YOUNG_MB = 48
"""The young generation, fixed: with Serial's default (a third of the heap) a heap planned for 160
simulators kept a 1 GB eden, all of it resident, whatever the sessions (111 MB per session at 10)."""
SHRINK_COLLECTIONS = 4
"""Full collections a shrink may take (Serial shrinks by 0%, 10%, 40%, then 100% of the excess)."""
LIVE_PER_SIMULATOR_MB = 11
"""Live heap of one loaded simulator after a full collection (`envhub.bench.scienceworld_capacity`: 10.6-12.3)."""
HEAP_STEP = 8
"""Simulators the heap is planned for at first; the plan doubles when outgrown (`planned_simulators`)."""


def heap_mb(simulators: int) -> int:
    """The heap planned for `simulators` loaded simulators, in MB."""
    return BASE_HEAP_MB + simulators * HEAP_PER_SIMULATOR_MB


def planned_simulators(live: int, planned: int, cap: int, step: int = HEAP_STEP) -> int:
    """The simulators a JVM's heap should be planned for, holding `live` of them, planned for `planned`.

    Grown in steps: doubled (at most to `cap`) when `live` outgrows the plan; halved (at least to
    `step`) once `live` falls to a quarter of it, so a server that had many sessions gives the memory
    back when they end, and one that never had them never holds it. Each change is one full collection
    (`Jvm.resize_heap`), a few during a ramp to `cap`, where a heap left to grow by itself went through
    a full collection every few sessions.
    """
    while live > planned and planned < cap:
        planned = min(cap, planned * 2)
    while planned > step and live <= planned // 4:
        planned = max(step, planned // 2)
    return planned


def heap_options(java_opts: Sequence[str], simulators: int, step: int = HEAP_STEP) -> tuple[str, ...]:
    """`java_opts` with a heap planned for `step` simulators that may grow to `simulators` (`-Xms`, `-Xmx`),
    a fixed young generation and the free-space bounds `Jvm.resize_heap` moves; unless they set `-Xmx`.

    The heap is resized by `Jvm.resize_heap` as `planned_simulators` says, not by the collector: left to
    itself, a heap starting small grows through a full collection every few simulators (12 by 80
    simulators, measured); a fixed heap never collects fully but keeps its whole young generation and,
    as garbage is promoted, its whole old one resident, for sessions it may never have.
    """
    if any(opt.startswith("-Xmx") for opt in java_opts):
        return tuple(java_opts)
    first = min(step, simulators)
    return (
        f"-Xms{heap_mb(first)}m",
        f"-Xmx{heap_mb(simulators)}m",
        f"-Xmn{YOUNG_MB}m",
        "-XX:MinHeapFreeRatio=10",
        "-XX:MaxHeapFreeRatio=40",
        *java_opts,
    )


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
        self.turns = JvmTurns()
        """Held around every call that sets or uses the JVM's global state (simulator calls, heap resizes)."""

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

    def heap_committed_mb(self) -> float:
        """The heap the JVM holds now (committed), in MB."""
        memory = self.gateway.jvm.java.lang.management.ManagementFactory.getMemoryMXBean()
        return float(memory.getHeapMemoryUsage().getCommitted()) / 2**20

    def resize_heap(self, target_mb: int, live_mb: float | None = None) -> None:
        """Collect fully and leave the heap at about `target_mb`, `live_mb` expected to survive (None: measured).

        Serial resizes its old generation only at full collections, to keep its free share between
        `MinHeapFreeRatio` and `MaxHeapFreeRatio` (both settable at run time): both are set to the free
        share the live heap will have in the target's old generation, then `System.gc()` resizes.
        Without `live_mb` one more collection measures it first (a shrink, when little is live). Serial
        damps shrinking (none at the first full collection, all of it by the fourth), so a shrink
        collects up to `SHRINK_COLLECTIONS` times, each cheap with what little is live then.
        """
        jvm = self.gateway.jvm
        management = jvm.java.lang.management.ManagementFactory
        if live_mb is None:
            jvm.java.lang.System.gc()
            old = next(pool for pool in management.getMemoryPoolMXBeans() if str(pool.getName()) == "Tenured Gen")
            live_mb = float(old.getUsage().getUsed()) / 2**20
        free = max(1, min(95, round(100 * (1 - live_mb / max(target_mb - YOUNG_MB, 1)))))
        bean = management.getPlatformMXBean(jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
        bean.setVMOption("MaxHeapFreeRatio", "100")  # so that MinHeapFreeRatio may rise above the old maximum
        bean.setVMOption("MinHeapFreeRatio", str(free))
        bean.setVMOption("MaxHeapFreeRatio", str(min(100, free + 2)))
        for _ in range(SHRINK_COLLECTIONS):
            jvm.java.lang.System.gc()
            if self.heap_committed_mb() <= 1.05 * target_mb:
                break

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
