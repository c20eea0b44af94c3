"""`envhub bench --profile latency`: step latency under concurrent load, with and without slow calls.

C clients (asyncio tasks on one channel) each step their own session back to back; in the
"churn" phases K more clients meanwhile create a session (cycling through the train tasks, so
games load), reset it and close it, over and over: the slow calls a trainer makes between
groups. "quiet" phases run the stepping clients alone. Phases alternate (quiet, churn, quiet,
churn, ...) so that both see the same machine load. Reported per phase: step p50, p99, max,
and p99 / p50 (the aim: p99 <= 3x the median while others create), plus the churn calls'
latencies. Writes `<out>/envhub-bench-latency-<environment>.json` and `.md`.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envhub.bench.procs import ServerProcess
from envhub.bench.rollout import SERVER_SETTINGS
from envhub.bench.run import PROFILES
from envhub.client import AsyncEnvhubClient

P99_TARGET = 3.0
"""The aim: step p99 under concurrent load at most this many times the median."""


@dataclass(frozen=True)
class LatencyBenchSettings:
    environment: str
    out: str
    clients: int = 32
    """Clients stepping their own session back to back."""
    churners: int = 4
    """Clients that create, reset and close sessions during the churn phases."""
    phase_s: float = 10.0
    rounds: int = 2
    """Rounds of (quiet, churn) phases."""
    workers: int = 2
    settings: Mapping[str, str] = field(default_factory=dict)
    """Server-side environment settings; empty: the rollout profile's `SERVER_SETTINGS`."""


def percentiles(samples_s: Sequence[float]) -> dict[str, float]:
    """p50 / p99 / max in ms, the p99 / p50 ratio, and the count."""
    ordered = sorted(samples_s)
    if not ordered:
        return {"n": 0}
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "n": len(ordered),
        "p50_ms": 1000 * p50,
        "p99_ms": 1000 * p99,
        "max_ms": 1000 * ordered[-1],
        "p99_over_p50": p99 / p50,
    }


class _Load:
    """The clients of one run and the latencies they record."""

    def __init__(self, client: AsyncEnvhubClient, environment: str, tasks: Sequence[str], actions: Sequence[str]):
        self.client, self.environment, self.tasks, self.actions = client, environment, tasks, actions
        self.loop = asyncio.get_running_loop()
        self.next_task = 0

    async def step_until(self, session_id: str, deadline: float, samples: list[float]) -> None:
        index = 0
        while self.loop.time() < deadline:
            started = self.loop.time()
            await self.client.step(session_id, self.actions[index % len(self.actions)])
            samples.append(self.loop.time() - started)
            index += 1

    async def churn_until(self, deadline: float, samples: dict[str, list[float]]) -> None:
        while self.loop.time() < deadline:
            task = self.tasks[self.next_task % len(self.tasks)]
            self.next_task += 1
            started = self.loop.time()
            session_id = (await self.client.create_session(self.environment, task=task, max_steps=10**6)).session_id
            created = self.loop.time()
            await self.client.reset_session(session_id)
            reset = self.loop.time()
            await self.client.close_session(session_id)
            samples["create"].append(created - started)
            samples["reset"].append(reset - created)
            samples["close"].append(self.loop.time() - reset)

    async def phase(self, sessions: Sequence[str], churners: int, seconds: float) -> dict[str, list[float]]:
        samples: dict[str, list[float]] = {"step": [], "create": [], "reset": [], "close": []}
        deadline = self.loop.time() + seconds
        await asyncio.gather(
            *(self.step_until(session_id, deadline, samples["step"]) for session_id in sessions),
            *(self.churn_until(deadline, samples) for _ in range(churners)),
        )
        return samples


async def _run(target: str, settings: LatencyBenchSettings) -> dict[str, Any]:
    profile = PROFILES[settings.environment]
    async with AsyncEnvhubClient(target, timeout=600.0) as client:
        tasks = [task.task_id for task in await client.list_tasks(settings.environment, "train")]
        load = _Load(client, settings.environment, tasks, profile.actions)
        starts = await asyncio.gather(
            *(
                client.create_session(settings.environment, task=profile.task_id, seed=seed, max_steps=10**6)
                for seed in range(settings.clients)
            )
        )
        sessions = [start.session_id for start in starts]
        await load.phase(sessions, settings.churners, settings.phase_s / 2)  # warm-up, not counted
        merged: dict[str, dict[str, list[float]]] = {"quiet": {}, "churn": {}}
        for round_index in range(settings.rounds):
            for name in ("quiet", "churn"):
                samples = await load.phase(sessions, settings.churners if name == "churn" else 0, settings.phase_s)
                for kind, values in samples.items():
                    merged[name].setdefault(kind, []).extend(values)
                step = percentiles(samples["step"])
                print(
                    f"  round {round_index} {name}: step p50 {step['p50_ms']:.1f} ms, p99 {step['p99_ms']:.1f} ms, "
                    f"max {step['max_ms']:.1f} ms ({step['n']} steps, {len(samples['create'])} creates)",
                    flush=True,
                )
        await asyncio.gather(*(client.close_session(session_id) for session_id in sessions))
    return {name: {kind: percentiles(values) for kind, values in phase.items()} for name, phase in merged.items()}


def run_latency_bench(settings: LatencyBenchSettings) -> dict[str, Any]:
    """Run the latency profile against a fresh server; write and return its results."""
    environment = settings.environment
    chosen = dict(settings.settings or SERVER_SETTINGS.get(environment, {}))
    extra = [item for key, value in chosen.items() for item in ("--set", f"{environment}.{key}={value}")]
    sessions = settings.clients + settings.churners + 8
    with ServerProcess(environment, workers=settings.workers, max_sessions=sessions, extra=extra) as server:
        phases = asyncio.run(_run(server.target, settings))
    result = {
        "environment": environment,
        "settings": {**asdict(settings), "settings": chosen},
        "load_average_1m": os.getloadavg()[0],
        "phases": phases,
        "p99_target": P99_TARGET,
        "p99_over_p50_under_churn": phases["churn"]["step"]["p99_over_p50"],
        "churn_p99_over_quiet_p50": phases["churn"]["step"]["p99_ms"] / phases["quiet"]["step"]["p50_ms"],
    }
    _write(result, Path(settings.out))
    return result


def _row(name: str, figures: Mapping[str, float]) -> str:
    if not figures.get("n"):
        return f"| {name} | 0 | - | - | - | - |"
    return (
        f"| {name} | {figures['n']:.0f} | {figures['p50_ms']:.1f} | {figures['p99_ms']:.1f} | "
        f"{figures['max_ms']:.1f} | {figures['p99_over_p50']:.2f} |"
    )


def _write(result: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    name = f"envhub-bench-latency-{result['environment']}"
    (out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    settings, phases = result["settings"], result["phases"]
    ratio = result["p99_over_p50_under_churn"]
    lines = [
        f"# envhub bench --profile latency: {result['environment']}",
        "",
        f"{settings['clients']} clients step their own session back to back; in the churn phases "
        f"{settings['churners']} more clients create (cycling through the train tasks), reset and close "
        f"sessions meanwhile. {settings['workers']} workers, settings {settings['settings'] or 'default'}, "
        f"{settings['rounds']} rounds of {settings['phase_s']:.0f} s quiet + {settings['phase_s']:.0f} s churn, "
        f"alternating. Load average (1 min) at the end: {result['load_average_1m']:.1f} (shared machine).",
        "",
        "| phase / call | n | p50 ms | p99 ms | max ms | p99 / p50 |",
        "|---|---:|---:|---:|---:|---:|",
        _row("quiet: step", phases["quiet"]["step"]),
        _row("churn: step", phases["churn"]["step"]),
        *(_row(f"churn: {call}", phases["churn"][call]) for call in ("create", "reset", "close")),
        "",
        f"Step p99 / p50 under churn: **{ratio:.2f}** (target <= {result['p99_target']:.0f}: "
        f"{'met' if ratio <= result['p99_target'] else 'not met'}); against the quiet phases' median: "
        f"{result['churn_p99_over_quiet_p50']:.2f}.",
        "",
    ]
    (out / f"{name}.md").write_text("\n".join(lines))
    print("\n".join(lines), flush=True)
