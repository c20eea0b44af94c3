"""`envhub bench --profile rollout`: a rollout turn at the papers' scale, against its ideal, in one run.

N sessions (N / G tasks, each created once and forked G - 1 times, groups created from 16
threads as the trainer's group rollout does), then T turns in which every session steps once
through the trainer's path (`EnvhubClient.step_many`: one StepBatch call, one message per
worker). In each turn the same action is also sent as unary Step calls from 16 threads (the
trainer's former path: the baseline; the two modes take turns at going first), and stepped in
this process over one worker's share (N / workers local sessions of N / G / workers tasks, G
per task, like a worker's), timed as a whole, like a worker's turn: the ideal turn is that
share's wall time (workers step their shares in parallel), i.e. N x in-process step / cores with
the step taken as share time / share size. A single step's median hides the machine's load
(a 1 ms step rarely waits for a CPU; a 1 s turn always does), so it is reported beside it only.

The server's CPU time per turn (its main process and its workers, from /proc) is measured for
both modes: CPU per step against the in-process CPU per step is the load-independent figure
of what the serving path adds. Reported: turn wall time (median, max), the ideal, efficiency =
ideal / turn, CPU efficiency, steps/s per core, server memory per session, create time and the
load average. Writes `<out>/envhub-bench-rollout-<environment>.json` and `.md`.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envhub.bench.procs import ServerProcess, own_cpu_s
from envhub.bench.run import PROFILES
from envhub.client import EnvhubClient, EnvhubError, Sessions
from envhub.core.environment import EnvironmentKind
from envhub.core.registry import build_kind
from envhub.core.session import Session

DEFAULT_SESSIONS = {"scienceworld": 256}
"""Sessions per environment when not given (others: 1,024, the papers' 128 tasks x G = 8)."""
SERVER_SETTINGS: dict[str, dict[str, str]] = {"alfworld": {"rooms": "small"}}
"""Environment settings of the benchmarked server (ALFWorld: the small rooms the trainer's local servers use)."""
EFFICIENCY_TARGET = 0.8
THREADS = 16
"""Threads of the baseline turn (unary Step calls, the trainer's former path) and of session creation."""
WARMUP_ROUNDS = 3
"""Untimed rounds of the action cycle on one local session per task before any timing (ScienceWorld's
JVM is cold at first: its first steps cost several times a warm step)."""


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


@dataclass
class _Mode:
    """One way of stepping every session once, measured per turn."""

    wall_s: list[float] = field(default_factory=list)
    main_cpu_s: list[float] = field(default_factory=list)
    """CPU of the server's main process (gRPC, protobuf, routing) or, in-process, of this process and its JVM."""
    worker_cpu_s: list[float] = field(default_factory=list)

    def summary(self, steps: int) -> dict[str, Any]:
        return {
            "p50": statistics.median(self.wall_s),
            "max": max(self.wall_s),
            "all": self.wall_s,
            "main_cpu_ms_per_step": 1000 * statistics.median(self.main_cpu_s) / steps,
            "worker_cpu_ms_per_step": 1000 * statistics.median(self.worker_cpu_s) / steps,
        }


def _say(message: str) -> None:
    print(message, flush=True)


def _create(client: EnvhubClient, environment: str, sessions: int, group: int) -> list[str]:
    """`sessions` sessions, one created per task and forked `group - 1` times (the trainer's groups)."""
    tasks = [task.task_id for task in client.list_tasks(environment, "train")]
    port = Sessions(client, environment, admissible=False)

    def one_group(index: int) -> list[str]:
        size = min(group, sessions - index)
        views = port.start_group(tasks[(index // group) % len(tasks)], size=size, max_steps=10**6)
        return [view.session_id for view in views]

    with ThreadPoolExecutor(max_workers=THREADS) as threads:
        return [session_id for ids in threads.map(one_group, range(0, sessions, group)) for session_id in ids]


def _local_share(kind: EnvironmentKind, tasks: int, group: int, workers: int) -> list[Session]:
    """One worker's share in this process: `tasks` tasks (every `workers`-th), `group` sessions each."""
    names = [spec.task_id for spec in kind.tasks("train")]
    local: list[Session] = []
    for index in range(tasks):
        first = Session.start(kind, kind.task(names[(index * workers) % len(names)]), seed=0, max_steps=10**6)
        local += [first, *(first.fork() for _ in range(group - 1))]
    return local


def _step_local(local: list[Session], action: str) -> list[float]:
    """Step every local session once; each step's wall time."""
    samples = []
    for session in local:
        started = time.perf_counter()
        session.step(action)
        samples.append(time.perf_counter() - started)
    return samples


def _measure(mode: _Mode, run: Callable[[], Any], cpu: Callable[[], tuple[float, float]]) -> None:
    main, workers = cpu()
    started = time.perf_counter()
    run()
    mode.wall_s.append(time.perf_counter() - started)
    main_after, workers_after = cpu()
    mode.main_cpu_s.append(main_after - main)
    mode.worker_cpu_s.append(workers_after - workers)


def run_rollout_bench(settings: RolloutBenchSettings) -> dict[str, Any]:
    """Run the rollout profile; write and return its results."""
    environment, sessions = settings.environment, settings.session_count
    profile = PROFILES[environment]
    chosen = dict(settings.settings or SERVER_SETTINGS.get(environment, {}))
    extra = [item for key, value in chosen.items() for item in ("--set", f"{environment}.{key}={value}")]
    cores = min(settings.workers, os.cpu_count() or 1)
    kind = build_kind(environment, chosen)
    share_tasks = max(1, sessions // settings.group_size // settings.workers)
    local = _local_share(kind, share_tasks, settings.group_size, settings.workers)
    for action in profile.actions * WARMUP_ROUNDS:
        _step_local(local[:: settings.group_size], action)
    modes = {"batched": _Mode(), "unary": _Mode(), "in-process": _Mode()}
    single_steps: list[float] = []
    failures = 0
    server = ServerProcess(environment, workers=settings.workers, max_sessions=sessions + 8, extra=extra)
    with server, EnvhubClient(server.target, timeout=600.0) as client:
        base_mb = server.rss_mb()
        started = time.perf_counter()
        ids = _create(client, environment, sessions, settings.group_size)
        create_s = time.perf_counter() - started
        memory_mb = server.rss_mb() - base_mb
        _say(f"{environment}: {sessions} sessions created in {create_s:.1f} s ({memory_mb:.0f} MB)")

        def batched() -> None:
            nonlocal failures
            results = client.step_many([(session_id, action) for session_id in ids], return_errors=True)
            failures += sum(isinstance(result, EnvhubError) for result in results)

        def unary() -> None:
            with ThreadPoolExecutor(max_workers=THREADS) as threads:
                list(threads.map(client.step, ids, [action] * len(ids)))

        def in_process() -> None:
            single_steps.extend(_step_local(local, action))

        runs = {"batched": batched, "unary": unary}
        for turn in range(settings.turns):
            action = profile.actions[turn % len(profile.actions)]
            for name in ("batched", "unary") if turn % 2 == 0 else ("unary", "batched"):  # either goes first
                _measure(modes[name], runs[name], server.cpu_s)
            _measure(modes["in-process"], in_process, lambda: (own_cpu_s(server.process.pid), 0.0))  # + local JVM
            _say(
                f"  turn {turn}: {modes['batched'].wall_s[-1]:.2f} s batched, {modes['unary'].wall_s[-1]:.2f} s "
                f"unary, {modes['in-process'].wall_s[-1]:.2f} s in-process ({len(local)} sessions)"
            )
    for session in local:
        session.close()
    kind.close()
    batched_turn, unary_turn, share = (
        modes[name].summary(steps)
        for name, steps in (("batched", sessions), ("unary", sessions), ("in-process", len(local)))
    )
    step_s = share["p50"] / len(local)
    ideal_s = sessions * step_s / cores
    server_cpu_ms = batched_turn["main_cpu_ms_per_step"] + batched_turn["worker_cpu_ms_per_step"]
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
        "in_process_sessions": len(local),
        "in_process_turn_s": share,
        "in_process_step_ms": 1000 * step_s,
        "in_process_cpu_ms": share["main_cpu_ms_per_step"],
        "in_process_single_step_ms": 1000 * statistics.median(single_steps),
        "turn_s": batched_turn,
        "ideal_turn_s": ideal_s,
        "efficiency": ideal_s / batched_turn["p50"],
        "efficiency_target": EFFICIENCY_TARGET,
        "server_cpu_ms_per_step": server_cpu_ms,
        "cpu_efficiency": share["main_cpu_ms_per_step"] / server_cpu_ms,
        "steps_per_s_per_core": sessions / batched_turn["p50"] / cores,
        "unary_turn_s": unary_turn,
        "batched_speedup": unary_turn["p50"] / batched_turn["p50"],
        "failed_steps": failures,
    }
    _write(result, Path(settings.out))
    return result


def _write(result: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    name = f"envhub-bench-rollout-{result['environment']}"
    (out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    turn = result["turn_s"]
    unary = result["unary_turn_s"]
    lines = [
        f"# envhub bench --profile rollout: {result['environment']}",
        "",
        f"{result['sessions']} sessions ({result['sessions'] // result['group_size']} tasks x G = "
        f"{result['group_size']}), {result['turns']} turns, {result['workers']} workers, settings "
        f"{result['settings'] or 'default'}; every turn each session steps once through `step_many` "
        f"(one StepBatch). Load average (1 min) at the end of the run: {result['load_average_1m']:.1f} "
        "(the machine is shared; medians over turns).",
        "",
        "| figure | value |",
        "|---|---|",
        f"| turn wall time (median / max) | {turn['p50']:.3f} s / {turn['max']:.3f} s |",
        f"| in-process turn of one worker's share ({result['in_process_sessions']} sessions, same run), median "
        f"| {result['in_process_turn_s']['p50']:.3f} s |",
        f"| in-process step (share time / share size) | {result['in_process_step_ms']:.3f} ms |",
        f"| ideal turn (sessions x step / {result['cores']} cores) | {result['ideal_turn_s']:.3f} s |",
        f"| efficiency (ideal / turn; target >= {result['efficiency_target']}) | {result['efficiency']:.2f} |",
        f"| in-process CPU per step | {result['in_process_cpu_ms']:.3f} ms |",
        f"| server CPU per step, batched: main process + workers | {turn['main_cpu_ms_per_step']:.3f} + "
        f"{turn['worker_cpu_ms_per_step']:.3f} ms |",
        f"| CPU efficiency (in-process CPU / server CPU per step) | {result['cpu_efficiency']:.2f} |",
        f"| steps/s per core | {result['steps_per_s_per_core']:.0f} |",
        f"| baseline: unary turn ({THREADS} threads of Steps), median | {unary['p50']:.3f} s |",
        f"| server CPU per step, unary: main process + workers | {unary['main_cpu_ms_per_step']:.3f} + "
        f"{unary['worker_cpu_ms_per_step']:.3f} ms |",
        f"| batched speedup (unary / batched turn) | {result['batched_speedup']:.2f}x |",
        f"| single in-process step, median (hides the load: not the ideal's unit) "
        f"| {result['in_process_single_step_ms']:.3f} ms |",
        f"| server memory per session | {result['memory_per_session_mb']:.2f} MB |",
        f"| create time (create + fork, all sessions, {THREADS} threads) | {result['create_s']:.1f} s |",
        f"| failed steps | {result['failed_steps']} |",
        "",
    ]
    (out / f"{name}.md").write_text("\n".join(lines))
    _say("\n".join(lines))
