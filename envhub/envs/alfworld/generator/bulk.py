"""Generating many games at once with worker processes (used by the bulk command and the statistics)."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from envhub.envs.alfworld.generator.scene import RoomSize
from envhub.envs.alfworld.taskset import GeneratedTaskSet

_taskset: GeneratedTaskSet | None = None


@dataclass(frozen=True)
class Made:
    """Summary of one generated (or cached) game."""

    split: str
    index: int
    task_type: str
    solution_length: int
    """Actions in the planner expert's solution."""
    attempts: int
    """Draws until a solvable game."""
    cpu_s: float
    """CPU seconds the worker spent on it (small on a cache hit); robust to a busy machine, unlike wall time."""


def init_worker(seed: int, cache_dir: Path | None, room: RoomSize | None = None) -> None:
    """Pool initializer: one task set (and so one planner env) per worker process."""
    global _taskset
    _taskset = GeneratedTaskSet(seed=seed, cache_dir=cache_dir, room=room)


def make(job: tuple[str, int]) -> Made:
    """Generate (or read from the cache) one game."""
    if _taskset is None:
        raise RuntimeError("make() runs in pool workers set up by init_worker()")
    started = time.process_time()
    record = _taskset.record(*job)
    cpu_s = time.process_time() - started
    return Made(record.split, record.index, record.task_type, len(record.walkthrough), record.attempts, cpu_s)


def make_all(
    jobs: Sequence[tuple[str, int]], seed: int, cache_dir: Path | None, workers: int, room: RoomSize | None = None
) -> list[Made]:
    """Generate every (split, index) of `jobs` into the cache, printing progress; results in job order."""
    started = time.perf_counter()
    results: list[Made] = []
    context = multiprocessing.get_context("spawn")
    with context.Pool(workers, initializer=init_worker, initargs=(seed, cache_dir, room)) as pool:
        for made in pool.imap(make, jobs, chunksize=4):
            results.append(made)
            if len(results) % 200 == 0:
                print(f"{len(results)}/{len(jobs)} games, {time.perf_counter() - started:.0f} s", flush=True)
    return results
