"""How many ScienceWorld simulators fit in a JVM: live heap and RSS per loaded simulator.

    python -m envhub.bench.scienceworld_capacity    # writes docs/results/scienceworld-capacity.json, prints it

One JVM of the kind's options, with a heap cap large enough not to matter; simulators are
loaded one task name after another (the first train variation of each of the 30 tasks, in
turn) and stepped three times; at each count the live heap after full collections and the
JVM's RSS are read. Then some simulators step 100 more times, to see whether a session grows.
`jvm.HEAP_PER_SIMULATOR_MB` (the heap the kind budgets per session) is derived from this.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envhub.bench import RESULTS
from envhub.bench.scienceworld_engine import heap_used_mb, rss_mb
from envhub.core.environment import TaskSpec
from envhub.envs.scienceworld import catalog
from envhub.envs.scienceworld.environment import ScienceWorldEnvironment
from envhub.envs.scienceworld.expert import GoldPaths
from envhub.envs.scienceworld.jvm import BASE_HEAP_MB, DEFAULT_JAVA_OPTS, HEAP_PER_SIMULATOR_MB, Jvm

CAPACITY_PATH = RESULTS / "scienceworld-capacity.json"
COUNTS = (8, 32, 64, 128)
SETUP_ACTIONS = ("look around", "inventory", "look around")
LONG_STEPS = 100


def measure(counts: Sequence[int] = COUNTS, heap_mb: int = 4096) -> dict[str, Any]:
    """Live heap (after full GC) and RSS per simulator at each count of loaded simulators."""
    first_of_each: dict[str, TaskSpec] = {}
    for spec in catalog.task_specs(frozenset())["train"]:
        first_of_each.setdefault(spec.family, spec)
    firsts = list(first_of_each.values())
    jvm = Jvm((f"-Xmx{heap_mb}m", *DEFAULT_JAVA_OPTS))
    rows = []
    try:
        gold_paths = GoldPaths(jvm)
        jvm.gateway  # noqa: B018 - start it
        base_heap, base_rss = heap_used_mb(jvm), rss_mb(jvm.pid())
        envs: list[ScienceWorldEnvironment] = []
        for count in counts:
            while len(envs) < count:
                env = ScienceWorldEnvironment(jvm, gold_paths)
                env.reset(firsts[len(envs) % len(firsts)], seed=0, options={})
                for action in SETUP_ACTIONS:
                    env.step(action)
                envs.append(env)
            heap, rss = heap_used_mb(jvm), rss_mb(jvm.pid())
            rows.append(
                {
                    "simulators": count,
                    "live_heap_mb": round(heap, 1),
                    "live_heap_per_simulator_mb": round((heap - base_heap) / count, 2),
                    "jvm_rss_mb": round(rss),
                    "rss_per_simulator_mb": round((rss - base_rss) / count, 2),
                }
            )
            print(rows[-1], file=sys.stderr, flush=True)
        before = heap_used_mb(jvm)
        stepped = envs[: len(firsts)]
        for env in stepped:
            for index in range(LONG_STEPS):
                env.step(SETUP_ACTIONS[index % 2])
        growth = (heap_used_mb(jvm) - before) / len(stepped)
    finally:
        jvm.close()
    return {
        "java_opts": [f"-Xmx{heap_mb}m", *DEFAULT_JAVA_OPTS],
        "empty_live_heap_mb": round(base_heap, 1),
        "empty_jvm_rss_mb": round(base_rss),
        "counts": rows,
        f"heap_growth_per_simulator_per_{LONG_STEPS}_steps_mb": round(growth, 2),
        "budget": {"base_heap_mb": BASE_HEAP_MB, "heap_per_simulator_mb": HEAP_PER_SIMULATOR_MB},
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=CAPACITY_PATH)
    args = parser.parse_args(argv)
    result = measure()
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
