"""Speed and memory of the ScienceWorld kind against the `scienceworld` package itself.

    python -m envhub.bench.scienceworld_engine      # prints a table, writes docs/results/scienceworld-bench.json

Baseline (same run): `scienceworld.ScienceWorldEnv`, one JVM per environment with the
default heap, whose `step` also lists the valid actions. envhub: one capped JVM, a raw
step, and simulators that share that JVM. Medians, since the machine is shared.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from scienceworld import ScienceWorldEnv

from envhub.bench import RESULTS
from envhub.core.environment import TaskSpec
from envhub.envs.scienceworld.environment import ScienceWorldEnvironment
from envhub.envs.scienceworld.expert import GoldPaths
from envhub.envs.scienceworld.jvm import Jvm

BENCH_PATH = RESULTS / "scienceworld-bench.json"
TASKS = ("boil/0", "chemistry-mix/0", "grow-fruit/0", "mendelian-genetics-unknown-plant/0")


def rss_mb(pid: int) -> float:
    """Resident memory of a process in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def heap_used_mb(jvm: Jvm) -> float:
    """Live Java heap after a full collection, in MB."""
    runtime = jvm.gateway.jvm.java.lang.Runtime.getRuntime()
    jvm.gateway.jvm.java.lang.System.gc()
    return float(runtime.totalMemory() - runtime.freeMemory()) / 2**20


def timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def median_ms(samples: Sequence[float]) -> float:
    return round(statistics.median(samples) * 1000, 2)


def bench_task(jvm: Jvm, gold_paths: GoldPaths, task_id: str, steps: int) -> dict[str, Any]:
    """Reset, step, admissible and gold-path timings for one task, envhub vs upstream."""
    name, _, variation = task_id.rpartition("/")
    spec = TaskSpec(task_id=task_id, split="", index=0, family=name)
    gold_s = timed(lambda: gold_paths.get(name, int(variation), ""))
    actions = list(gold_paths.get(name, int(variation), ""))[:steps]
    env = ScienceWorldEnvironment(jvm, gold_paths)
    reset_s = timed(lambda: env.reset(spec, seed=0, options={}))
    step_s = [timed(functools.partial(env.step, action)) for action in actions]
    admissible_s = timed(env.admissible_actions)
    env.close()
    upstream = ScienceWorldEnv(envStepLimit=10_000)
    try:
        upstream_reset_s = timed(lambda: (upstream.load(name, int(variation), ""), upstream.reset()))
        upstream_step_s = [timed(functools.partial(upstream.step, action)) for action in actions]
    finally:
        upstream.close()
    return {
        "task": task_id,
        "steps": len(actions),
        "gold_path_s": round(gold_s, 2),
        "reset_s": round(reset_s, 3),
        "upstream_load_reset_s": round(upstream_reset_s, 3),
        "step_ms": median_ms(step_s),
        "upstream_step_ms": median_ms(upstream_step_s),
        "step_speedup": round(statistics.median(upstream_step_s) / statistics.median(step_s), 1),
        "admissible_ms": round(admissible_s * 1000, 1),
    }


def bench_memory(simulators: int) -> dict[str, Any]:
    """JVM memory with `simulators` loaded boil simulators vs one upstream environment."""
    jvm = Jvm()
    try:
        started_s = timed(jvm.new_simulator)
        base_rss, base_heap = rss_mb(jvm.pid()), heap_used_mb(jvm)
        envs = [ScienceWorldEnvironment(jvm, GoldPaths(jvm)) for _ in range(simulators)]
        for index, env in enumerate(envs):
            env.reset(TaskSpec(task_id=f"boil/{index % 30}", split="", index=0), seed=0, options={})
            env.step("look around")
        rss, heap = rss_mb(jvm.pid()), heap_used_mb(jvm)
    finally:
        jvm.close()
    upstream = ScienceWorldEnv()
    try:
        upstream.load("boil", 0, "")
        upstream.reset()
        upstream.step("look around")
        upstream_rss = rss_mb(upstream._gateway.java_process.pid)
    finally:
        upstream.close()
    return {
        "jvm_start_s": round(started_s, 2),
        "simulators": simulators,
        "jvm_rss_empty_mb": round(base_rss),
        "jvm_rss_loaded_mb": round(rss),
        "rss_per_simulator_mb": round((rss - base_rss) / simulators, 1),
        "heap_per_simulator_mb": round((heap - base_heap) / simulators, 1),
        "upstream_jvm_rss_per_env_mb": round(upstream_rss),
    }


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark and write the JSON result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="gold-path steps timed per task")
    parser.add_argument("--simulators", type=int, default=20)
    parser.add_argument("--out", type=Path, default=BENCH_PATH)
    args = parser.parse_args(argv)
    jvm = Jvm()
    try:
        gold_paths = GoldPaths(jvm)
        tasks = [bench_task(jvm, gold_paths, task_id, args.steps) for task_id in TASKS]
    finally:
        jvm.close()
    result = {"tasks": tasks, "memory": bench_memory(args.simulators)}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1), file=sys.stderr)


if __name__ == "__main__":
    main()
