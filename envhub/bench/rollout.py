"""`envhub bench --profile rollout`: a rollout turn at the papers' scale, against its ideal, in one run.

N sessions (N / G tasks, each created once and forked G - 1 times, as the trainer's group
rollout does), then T turns in which every session steps once through the trainer's path
(`EnvhubClient.step_many`: one StepBatch call, one message per worker). In each turn the same
action is also sent as unary Step calls from 16 threads (the trainer's former path: the
baseline; the two modes take turns at going first), and stepped in this process on local
`Session`s, one per task of one worker's share (N / G / workers tasks: a step's cost depends on
how many different games a process steps, through its caches), so the in-process step (the
ideal's unit) sees the same machine load. Reported: turn wall time (median, max), ideal turn =
N x in-process step / cores, efficiency = ideal / turn, steps/s per core, server memory per
session, create time, and the load average at run time. Writes
`<out>/envhub-bench-rollout-<environment>.json` and `.md`.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envhub.bench.procs import ServerProcess
from envhub.bench.run import PROFILES
from envhub.client import EnvhubClient, EnvhubError
from envhub.core.registry import build_kind
from envhub.core.session import Session

DEFAULT_SESSIONS = {"scienceworld": 256}
"""Sessions per environment when not given (others: 1,024, the papers' 128 tasks x G = 8)."""
SERVER_SETTINGS: dict[str, dict[str, str]] = {"alfworld": {"rooms": "small"}}
"""Environment settings of the benchmarked server (ALFWorld: the small rooms the trainer's local servers use)."""
EFFICIENCY_TARGET = 0.8
UNARY_THREADS = 16
"""Threads of the baseline turn: unary Step calls from a thread pool (the trainer's former path)."""
WARMUP_ROUNDS = 3
"""Untimed rounds of the action cycle on the local sessions before any timing (ScienceWorld's JVM
is cold at first: its first steps cost several times a warm step)."""


@dataclass(frozen=True)
class RolloutBenchSettings:
    environment: str
    out: str
    sessions: int | None = None
    """None: `DEFAULT_SESSIONS` or 1,024."""
    group_size: int = 8
    turns: int = 5
    workers: int = 2
    settings: Mapping[str, str] = field(default_factory=dict)
    """Server-side environment settings; empty: `SERVER_SETTINGS`."""

    @property
    def session_count(self) -> int:
        return self.sessions or DEFAULT_SESSIONS.get(self.environment, 1024)


def _say(message: str) -> None:
    print(message, flush=True)


def _create(client: EnvhubClient, environment: str, sessions: int, group: int) -> list[str]:
    """`sessions` sessions, one created per task and forked `group - 1` times (the trainer's groups)."""
    tasks = [task.task_id for task in client.list_tasks(environment, "train")]
    ids: list[str] = []
    for index in range(0, sessions, group):
        size = min(group, sessions - index)
        first = client.create_session(environment, task=tasks[(index // group) % len(tasks)], max_steps=10**6)
        ids += [first.session_id, *(client.fork(first.session_id, size - 1) if size > 1 else [])]
    return ids


def _in_process_step_s(local: list[Session], action: str) -> list[float]:
    samples = []
    for session in local:
        started = time.perf_counter()
        session.step(action)
        samples.append(time.perf_counter() - started)
    return samples


def run_rollout_bench(settings: RolloutBenchSettings) -> dict[str, Any]:
    """Run the rollout profile; write and return its results."""
    environment, sessions = settings.environment, settings.session_count
    profile = PROFILES[environment]
    chosen = dict(settings.settings or SERVER_SETTINGS.get(environment, {}))
    extra = [item for key, value in chosen.items() for item in ("--set", f"{environment}.{key}={value}")]
    cores = min(settings.workers, os.cpu_count() or 1)
    kind = build_kind(environment, chosen)
    share = max(1, sessions // settings.group_size // settings.workers)
    tasks = [spec.task_id for spec in kind.tasks("train")]
    local = [Session.start(kind, kind.task(tasks[i % len(tasks)]), seed=0, max_steps=10**6) for i in range(share)]
    for action in profile.actions * WARMUP_ROUNDS:
        _in_process_step_s(local, action)
    in_process: list[float] = []
    turns: list[float] = []
    unary: list[float] = []
    failures = 0
    server = ServerProcess(environment, workers=settings.workers, max_sessions=sessions + 8, extra=extra)
    with server, EnvhubClient(server.target, timeout=600.0) as client:
        base_mb = server.rss_mb()
        started = time.perf_counter()
        ids = _create(client, environment, sessions, settings.group_size)
        create_s = time.perf_counter() - started
        memory_mb = server.rss_mb() - base_mb
        _say(f"{environment}: {sessions} sessions created in {create_s:.1f} s ({memory_mb:.0f} MB)")
        for turn in range(settings.turns):
            action = profile.actions[turn % len(profile.actions)]
            for mode in ("batched", "unary") if turn % 2 == 0 else ("unary", "batched"):  # either goes first
                started = time.perf_counter()
                if mode == "batched":
                    results = client.step_many([(session_id, action) for session_id in ids], return_errors=True)
                    failures += sum(isinstance(result, EnvhubError) for result in results)
                else:
                    with ThreadPoolExecutor(max_workers=UNARY_THREADS) as threads:
                        list(threads.map(client.step, ids, [action] * len(ids)))
                (turns if mode == "batched" else unary).append(time.perf_counter() - started)
            in_process += _in_process_step_s(local, action)
            _say(f"  turn {turn}: {turns[-1]:.2f} s batched, {unary[-1]:.2f} s unary")
    for session in local:
        session.close()
    kind.close()
    step_s = statistics.median(in_process)
    turn_s = statistics.median(turns)
    ideal_s = sessions * step_s / cores
    result = {
        "environment": environment,
        "settings": chosen,
        "sessions": sessions,
        "group_size": settings.group_size,
        "turns": settings.turns,
        "workers": settings.workers,
        "cores": cores,
        "load_average_1m": os.getloadavg()[0],
        "create_s": create_s,
        "memory_per_session_mb": memory_mb / sessions,
        "in_process_step_ms": 1000 * step_s,
        "in_process_sessions": share,
        "turn_s": {"p50": turn_s, "max": max(turns), "all": turns},
        "ideal_turn_s": ideal_s,
        "efficiency": ideal_s / turn_s,
        "efficiency_target": EFFICIENCY_TARGET,
        "steps_per_s_per_core": sessions / turn_s / cores,
        "unary_turn_s": {"p50": statistics.median(unary), "all": unary},
        "batched_speedup": statistics.median(unary) / turn_s,
        "failed_steps": failures,
    }
    _write(result, Path(settings.out))
    return result


def _write(result: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    name = f"envhub-bench-rollout-{result['environment']}"
    (out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    turn = result["turn_s"]
    lines = [
        f"# envhub bench --profile rollout: {result['environment']}",
        "",
        f"{result['sessions']} sessions ({result['sessions'] // result['group_size']} tasks x G = "
        f"{result['group_size']}), {result['turns']} turns, {result['workers']} workers, settings "
        f"{result['settings'] or 'default'}; every turn each session steps once through `step_many` "
        f"(one StepBatch). Load average (1 min) at the end of the run: {result['load_average_1m']:.1f} "
        "(the machine is shared; medians).",
        "",
        "| figure | value |",
        "|---|---|",
        f"| turn wall time (median / max) | {turn['p50']:.3f} s / {turn['max']:.3f} s |",
        f"| in-process step (median, same run, {result['in_process_sessions']} local sessions) "
        f"| {result['in_process_step_ms']:.3f} ms |",
        f"| ideal turn (sessions x step / {result['cores']} cores) | {result['ideal_turn_s']:.3f} s |",
        f"| efficiency (ideal / turn; target >= {result['efficiency_target']}) | {result['efficiency']:.2f} |",
        f"| steps/s per core | {result['steps_per_s_per_core']:.0f} |",
        f"| baseline: unary turn ({UNARY_THREADS} threads of Steps), median | {result['unary_turn_s']['p50']:.3f} s |",
        f"| batched speedup (unary / batched turn) | {result['batched_speedup']:.2f}x |",
        f"| server memory per session | {result['memory_per_session_mb']:.2f} MB |",
        f"| create time (create + fork, all sessions) | {result['create_s']:.1f} s |",
        f"| failed steps | {result['failed_steps']} |",
        "",
    ]
    (out / f"{name}.md").write_text("\n".join(lines))
    _say("\n".join(lines))
