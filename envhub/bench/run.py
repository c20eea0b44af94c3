"""`envhub bench`: what serving an environment over gRPC costs, measured in one run.

* step latency p50/p99 over gRPC (server subprocess, one worker) versus the same `Session`
  stepped in this process: the ratio at the median is the protocol's overhead;
* steps/s from several client threads with 1 and 2 worker processes;
* steps/s with N concurrent sessions from one asyncio client, unary calls versus one
  SessionStream (2 workers; the ratio is against unary measured in the same run);
* restore latency versus replay depth (restore replays the action log);
* memory per session: RSS of the server's whole process tree (server, workers, JVMs)
  with N live sessions, divided by N (and the marginal cost per extra session).

Medians throughout (the machine is shared). Writes `<out>/envhub-bench-<environment>.json` and `.md`.
An environment is benchmarked with a `Profile` (a task and a cycle of non-terminal actions).
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from envhub.bench.procs import ServerProcess
from envhub.bench.streams import unary_vs_stream
from envhub.client import EnvhubClient, EnvhubError
from envhub.core.registry import kind_class
from envhub.core.session import Session


@dataclass(frozen=True)
class Profile:
    """How to benchmark one environment kind."""

    task_id: str
    actions: tuple[str, ...]
    """A cycle of actions that never ends the episode."""
    admissible_setup: tuple[str, ...] = ()
    """Actions played before the admissible-action latency figure (to reach a state with many)."""


PROFILES: dict[str, Profile] = {
    "scienceworld": Profile(
        "boil/0",
        ("look around", "inventory", "open door to kitchen", "look around", "close door to kitchen"),
        ("open door to kitchen", "go to kitchen"),  # the kitchen: ~2,700 admissible actions
    ),
    "alfworld": Profile("valid_seen/00000", ("look", "inventory", "examine the moon", "look")),
    "searchqa": Profile("nq/test/00000", ("<search>capital of France</search>", "no action", "<search>Euro</search>")),
    "webshop": Profile(
        "test/00000",
        ("search[wireless earbuds noise cancelling]", "click[next >]", "click[< prev]", "click[back to search]"),
    ),
}


@dataclass(frozen=True)
class BenchSettings:
    environment: str
    task_id: str | None
    out: str
    sessions: int = 50
    steps: int = 200
    throughput_s: float = 10.0
    threads: int = 4
    depths: tuple[int, ...] = (0, 10, 25, 50, 100)
    stream_sessions: int = 16
    """Concurrent sessions for the unary-versus-SessionStream throughput figure."""
    stream_s: float = 3.0
    """Seconds per round of that figure (5 rounds per mode)."""


LATENCY_TARGET = 1.05
"""The goal for gRPC / in-process step latency at the median."""


def _percentiles(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50_ms": 1000 * statistics.median(ordered), "p99_ms": 1000 * p99, "n": len(ordered)}


def _say(message: str) -> None:
    print(message, flush=True)


def step_latency(
    client: EnvhubClient,
    settings: BenchSettings,
    profile: Profile,
    task_id: str,
    admissible: bool = False,
    warmup: int = 20,
) -> tuple[dict[str, float], dict[str, float]]:
    """Step latency in this process (a `Session`) and over gRPC, alternating step by step
    so that both see the same machine load; returns (in_process, grpc) percentiles. With
    `admissible`, each step also lists the admissible actions (what an agent loop usually asks)."""
    kind = kind_class(settings.environment)()
    try:
        local = Session.start(kind, kind.task(task_id), seed=0, max_steps=10**6)
        session_id = client.create_session(settings.environment, task=task_id, seed=0, max_steps=10**6).session_id
        for action in profile.admissible_setup if admissible else ():
            local.step(action)
            client.step(session_id, action)

        def in_process(action: str) -> object:
            step = local.step(action)
            return (step, local.admissible_actions()) if admissible else step

        def remote(action: str) -> object:
            return client.step(session_id, action, admissible=admissible)

        samples: dict[str, list[float]] = {"in_process": [], "grpc": []}
        for index in range(warmup + settings.steps):  # one step each in turn: both see the same load
            action = profile.actions[index % len(profile.actions)]
            for name, step in (("in_process", in_process), ("grpc", remote)):
                started = time.perf_counter()
                step(action)
                if index >= warmup:
                    samples[name].append(time.perf_counter() - started)
        client.close_session(session_id)
        local.close()
        return _percentiles(samples["in_process"]), _percentiles(samples["grpc"])
    finally:
        kind.close()


def overhead(client: EnvhubClient, settings: BenchSettings, task_id: str, count: int = 200) -> dict[str, float]:
    """p50 (ms) of calls that do almost no environment work: the floor of the protocol's cost."""
    session_id = client.create_session(settings.environment, task=task_id).session_id

    def unknown_session() -> None:  # answered by the server process alone
        try:
            client.step("nosuchreplica.0", "look around")
        except EnvhubError:
            return

    floors = {}
    for name, call in (
        ("server_only_ms", unknown_session),
        ("server_and_worker_ms", lambda: client.snapshot(session_id)),
    ):
        samples = []
        for _ in range(count):
            started = time.perf_counter()
            call()
            samples.append(time.perf_counter() - started)
        floors[name] = 1000 * statistics.median(samples)
    client.close_session(session_id)
    return floors


def throughput(target: str, settings: BenchSettings, profile: Profile, task_id: str) -> float:
    """Steps/s with `settings.threads` client threads, each stepping its own session."""
    clients = [EnvhubClient(target) for _ in range(settings.threads)]
    sessions = [
        c.create_session(settings.environment, task=task_id, seed=i, max_steps=10**6).session_id
        for i, c in enumerate(clients)
    ]
    counts = [0] * len(clients)

    def drive(index: int, seconds: float) -> None:
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            clients[index].step(sessions[index], profile.actions[counts[index] % len(profile.actions)])
            counts[index] += 1

    def run_threads(seconds: float) -> float:
        started = time.perf_counter()
        threads = [threading.Thread(target=drive, args=(i, seconds)) for i in range(len(clients))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return time.perf_counter() - started

    run_threads(settings.throughput_s / 3)  # warm-up (JIT, caches), not counted
    counts[:] = [0] * len(clients)
    elapsed = run_threads(settings.throughput_s)
    for client, session_id in zip(clients, sessions, strict=True):
        client.close_session(session_id)
        client.close()
    return sum(counts) / elapsed


def restore_latency(client: EnvhubClient, settings: BenchSettings, profile: Profile, task_id: str) -> dict[int, float]:
    """Median restore time (ms) of a snapshot taken after `depth` steps, for each depth."""
    result: dict[int, float] = {}
    session_id = client.create_session(settings.environment, task=task_id, seed=0, max_steps=10**6).session_id
    done = 0
    for depth in settings.depths:
        while done < depth:
            client.step(session_id, profile.actions[done % len(profile.actions)])
            done += 1
        snapshot = client.snapshot(session_id)
        samples = []
        for _ in range(3):
            started = time.perf_counter()
            restored = client.restore(snapshot)
            samples.append(time.perf_counter() - started)
            client.close_session(restored.session_id)
        result[depth] = 1000 * statistics.median(samples)
        _say(f"  restore at depth {depth}: {result[depth]:.1f} ms")
    client.close_session(session_id)
    return result


def memory(
    server: ServerProcess, client: EnvhubClient, settings: BenchSettings, profile: Profile, task_id: str
) -> dict[str, float]:
    idle = server.rss_mb()
    sessions = []
    for index in range(settings.sessions):
        session_id = client.create_session(settings.environment, task=task_id, seed=index).session_id
        client.step(session_id, profile.actions[0])
        sessions.append(session_id)
    loaded = server.rss_mb()
    for session_id in sessions:
        client.close_session(session_id)
    return {
        "sessions": settings.sessions,
        "idle_tree_rss_mb": idle,
        "tree_rss_mb": loaded,
        "mb_per_session": loaded / settings.sessions,
        "marginal_mb_per_session": (loaded - idle) / settings.sessions,
    }


def run_bench(settings: BenchSettings) -> dict[str, Any]:
    """Run every measurement, print as it goes, write JSON and markdown; returns the results."""
    profile = PROFILES.get(settings.environment)
    if profile is None:
        raise SystemExit(f"no bench profile for {settings.environment!r}; add one to envhub.bench.run.PROFILES")
    task_id = settings.task_id or profile.task_id
    results: dict[str, Any] = {"environment": settings.environment, "task_id": task_id, "settings": vars(settings)}
    results["load_average_at_start"] = os.getloadavg()[0]
    server_1 = ServerProcess(settings.environment, workers=1, max_sessions=settings.sessions + 8)
    with server_1 as server, EnvhubClient(server.target) as client:
        _say(f"step latency in-process and over gRPC ({settings.steps} steps each of {task_id}, alternating)...")
        results["in_process"], results["grpc"] = step_latency(client, settings, profile, task_id)
        results["ratio_p50"] = results["grpc"]["p50_ms"] / results["in_process"]["p50_ms"]
        results["ratio_p99"] = results["grpc"]["p99_ms"] / results["in_process"]["p99_ms"]
        _say(f"  in-process {results['in_process']}")
        _say(f"  gRPC       {results['grpc']}; ratio at p50 {results['ratio_p50']:.3f}")
        results["overhead"] = overhead(client, settings, task_id)
        _say(f"  round trip with no environment work: {results['overhead']}")
        _say("the same with admissible actions listed at every step...")
        local, remote = step_latency(client, replace(settings, steps=settings.steps // 2), profile, task_id, True)
        results["in_process_admissible"], results["grpc_admissible"] = local, remote
        results["ratio_p50_admissible"] = remote["p50_ms"] / local["p50_ms"]
        _say(f"  in-process {local}\n  gRPC       {remote}; ratio at p50 {results['ratio_p50_admissible']:.3f}")
        _say("restore latency versus replay depth...")
        results["restore_ms_by_depth"] = restore_latency(client, settings, profile, task_id)
        _say(f"memory with {settings.sessions} sessions...")
        results["memory"] = memory(server, client, settings, profile, task_id)
        _say(f"  {results['memory']}")
    _say(f"steps/s with {settings.threads} client threads, fresh servers with 1 and 2 workers, alternating...")
    with ServerProcess(settings.environment, workers=1) as one, ServerProcess(settings.environment, workers=2) as two:
        rates: dict[int, list[float]] = {1: [], 2: []}
        for _ in range(2):
            for workers, server in ((1, one), (2, two)):
                rates[workers].append(throughput(server.target, settings, profile, task_id))
                _say(f"  {workers} worker(s): {rates[workers][-1]:.0f} steps/s")
        _say(
            f"steps/s with {settings.stream_sessions} concurrent sessions (2 workers): unary async vs SessionStream..."
        )
        results["concurrent"] = unary_vs_stream(
            two.target, settings.environment, task_id, profile.actions, settings.stream_sessions, settings.stream_s
        )
        _say(f"  SessionStream / unary: {results['concurrent']['ratio_stream_to_unary']:.3f}")
    results["steps_per_s_1_worker"] = statistics.median(rates[1])
    results["steps_per_s_2_workers"] = statistics.median(rates[2])
    _write(Path(settings.out), results)
    return results


def _floor_ratio(results: dict[str, Any], local: str) -> float:
    """(in-process p50 + the server-and-worker round trip) / in-process p50: the ratio on an idle machine."""
    in_process: float = results[local]["p50_ms"]
    return (in_process + results["overhead"]["server_and_worker_ms"]) / in_process


def _verdict(ratio: float) -> str:
    return f"target {LATENCY_TARGET} {'met' if ratio <= LATENCY_TARGET else 'not met'}"


def _write(out: Path, results: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"envhub-bench-{results['environment']}.json").write_text(json.dumps(results, indent=2) + "\n")
    memory, local, remote = results["memory"], results["in_process"], results["grpc"]
    concurrent, threads = results["concurrent"], results["settings"]["threads"]
    lines = [
        f"# envhub bench: {results['environment']} ({results['task_id']})",
        "",
        "| measure | value |",
        "| --- | --- |",
        f"| step p50 in-process / gRPC | {local['p50_ms']:.2f} ms / {remote['p50_ms']:.2f} ms |",
        f"| step p99 in-process / gRPC | {local['p99_ms']:.2f} ms / {remote['p99_ms']:.2f} ms |",
        f"| gRPC / in-process at p50 (p99) | {results['ratio_p50']:.3f} ({results['ratio_p99']:.3f}); "
        f"{_verdict(results['ratio_p50'])} |",
        f"| ratio implied by the round-trip floor, raw step / step + admissible actions | "
        f"{_floor_ratio(results, 'in_process'):.3f} / {_floor_ratio(results, 'in_process_admissible'):.3f} |",
        f"| round trip without environment work, p50: server only / server + worker | "
        f"{results['overhead']['server_only_ms']:.2f} ms / {results['overhead']['server_and_worker_ms']:.2f} ms |",
        f"| step + admissible actions, p50 in-process / gRPC | {results['in_process_admissible']['p50_ms']:.2f} ms"
        f" / {results['grpc_admissible']['p50_ms']:.2f} ms (ratio {results['ratio_p50_admissible']:.3f}; "
        f"{_verdict(results['ratio_p50_admissible'])}) |",
        f"| steps/s, {threads} client threads, 1 worker | {results['steps_per_s_1_worker']:.0f} |",
        f"| steps/s, {threads} client threads, 2 workers | {results['steps_per_s_2_workers']:.0f} |",
        f"| steps/s, {concurrent['sessions']} concurrent sessions, 2 workers: unary async / SessionStream | "
        f"{concurrent['unary_steps_per_s']:.0f} / {concurrent['stream_steps_per_s']:.0f} "
        f"(ratio {concurrent['ratio_stream_to_unary']:.3f}) |",
        *(f"| restore at depth {d} | {ms:.1f} ms |" for d, ms in results["restore_ms_by_depth"].items()),
        f"| process tree RSS, idle / {memory['sessions']} sessions | "
        f"{memory['idle_tree_rss_mb']:.0f} MB / {memory['tree_rss_mb']:.0f} MB |",
        f"| MB per session (total / marginal) | {memory['mb_per_session']:.1f} / "
        f"{memory['marginal_mb_per_session']:.1f} |",
        "",
        f"Medians on a shared {os.cpu_count()}-core machine (1-minute load average "
        f"{results['load_average_at_start']:.1f} at the start: single runs are noisy); regenerate with `envhub bench`.",
        "",
        f"Latency target {LATENCY_TARGET} (gRPC / in-process at p50): the fixed round trip (client, server, worker "
        f"pipe) alone gives {_floor_ratio(results, 'in_process'):.2f} for a raw step "
        f"({_verdict(_floor_ratio(results, 'in_process'))}) and {_floor_ratio(results, 'in_process_admissible'):.2f} "
        f"for a step with admissible actions, what an agent loop asks for "
        f"({_verdict(_floor_ratio(results, 'in_process_admissible'))}); measured ratios on a loaded machine swing "
        "both ways around these.",
    ]
    (out / f"envhub-bench-{results['environment']}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
