"""`envhub bench --profile ready`: how fast a fresh server is ready on a cache `envhub prepare` built.

In one run (ALFWorld, generated games):

* **cold generation**: `envhub prepare --niceness 0` of `games` cold games with 1 and with 2 processes
  (their priority is not what this compares: at a lower one, other work on a shared machine decides),
  `repeats` times each, interleaved (the order alternates), each into a fresh cache: medians, the
  speed-up, and the load average around each run (the machine is shared);
* **steps meanwhile**: a server with `playing` sessions on prepared games steps StepBatch turns,
  quiet and while `envhub prepare` makes `beside` cold games next to it at its lower priority: turn p50 and
  p99 in both phases;
* **ready**: `envhub serve` started `ready_runs` times on a cache holding the `tasks` games, each
  timed from the process's start to all `sessions` sessions created (`group` per task: a create and
  its forks); with `cold_baseline`, once on a cold cache (the server makes the games itself).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from envhub.bench.latency import percentiles
from envhub.bench.procs import ServerProcess
from envhub.client import EnvhubClient, Sessions
from envhub.prepare import CACHE_ENV, prepare

ENVIRONMENT = "alfworld"
THREADS = 16
"""Client threads creating sessions (each a create then its forks)."""


@dataclass(frozen=True)
class ReadyBenchSettings:
    """What the profile measures (defaults: the issue's 1,024 sessions of 128 tasks on 2 workers)."""

    out: str = "docs/results"
    sessions: int = 1024
    tasks: int = 128
    group: int = 8
    workers: int = 2
    """Server worker processes."""
    games: int = 12
    """Cold games per generation run."""
    repeats: int = 2
    """Generation runs per process count."""
    playing: int = 64
    """Sessions stepping while games are made beside them."""
    beside: int = 16
    """Cold games made beside them (by `envhub prepare` at its default lower priority; enough to outlast its start)."""
    ready_runs: int = 3
    cold_baseline: bool = False
    """Also time a fresh server on a cold cache (it makes the 128 games itself: minutes on 2 cores)."""


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _load() -> float:
    return os.getloadavg()[0]


def _generation(settings: ReadyBenchSettings) -> dict[str, Any]:
    """Cold generation with 1 and 2 processes, interleaved."""
    runs: list[dict[str, Any]] = []
    for repeat in range(settings.repeats):
        for workers in (1, 2) if repeat % 2 == 0 else (2, 1):
            with tempfile.TemporaryDirectory(prefix="envhub-ready-gen-") as cache:
                load = _load()
                report = prepare(
                    ENVIRONMENT, cache=cache, counts={"train": settings.games}, workers=workers, niceness=0
                )
                runs.append(
                    {
                        "workers": workers,
                        "games": report.made,
                        "seconds": report.seconds,
                        "load_before": load,
                        "load_after": _load(),
                    }
                )
                _say(f"  generation: {runs[-1]}")
    medians = {
        str(workers): statistics.median(run["seconds"] for run in runs if run["workers"] == workers)
        for workers in (1, 2)
    }
    return {"runs": runs, "median_s": medians, "speedup_2_over_1": medians["1"] / medians["2"]}


def _create_all(target: str, tasks: Sequence[str], group: int) -> list[str]:
    with EnvhubClient(target, timeout=900.0) as client:
        port = Sessions(client, ENVIRONMENT, admissible=False)

        def one(task_id: str) -> list[str]:
            first = port.start(task_id, max_steps=10**6)
            return [first.session_id, *(port.fork(first.session_id, group - 1) if group > 1 else [])]

        with ThreadPoolExecutor(THREADS) as threads:
            return [session_id for made in threads.map(one, tasks) for session_id in made]


def _ready(settings: ReadyBenchSettings, cache: str, tasks: Sequence[str]) -> dict[str, Any]:
    """One fresh server on `cache`: seconds to serving and to every session created."""
    os.environ[CACHE_ENV] = cache
    load = _load()
    started = time.perf_counter()
    extra = ["--idle-timeout", "36000"]
    with ServerProcess(ENVIRONMENT, settings.workers, max_sessions=settings.sessions + 64, extra=extra) as server:
        serving = time.perf_counter() - started
        made = _create_all(server.target, tasks, settings.group)
        ready = time.perf_counter() - started
    return {"serving_s": serving, "ready_s": ready, "sessions": len(made), "load_before": load, "load_after": _load()}


def _turns(client: EnvhubClient, ids: Sequence[str], seconds: float) -> list[float]:
    """StepBatch turns over `ids` for about `seconds`; each turn's wall time (s)."""
    samples: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline or len(samples) < 5:
        started = time.perf_counter()
        client.step_many([(session_id, "look") for session_id in ids], return_errors=True)
        samples.append(time.perf_counter() - started)
    return samples


def _steps_meanwhile(settings: ReadyBenchSettings, cache: str, tasks: Sequence[str]) -> dict[str, Any]:
    """Turns of `playing` sessions quiet, then while `envhub prepare` (2 processes) makes cold games."""
    os.environ[CACHE_ENV] = cache
    extra = ["--idle-timeout", "36000"]
    with (
        ServerProcess(ENVIRONMENT, settings.workers, max_sessions=settings.playing + 64, extra=extra) as server,
        EnvhubClient(server.target, timeout=900.0) as client,
        tempfile.TemporaryDirectory(prefix="envhub-ready-busy-") as cold,
    ):
        group = max(1, settings.playing // len(tasks))
        ids = _create_all(server.target, tasks[: settings.playing // group], group)
        quiet = _turns(client, ids, 20.0)
        command = [sys.executable, "-m", "envhub.cli", "--log-level", "WARNING", "prepare", "--env", ENVIRONMENT]
        command += ["--cache", cold, "--tasks", f"train:{settings.beside}", "--workers", "2"]
        busy: list[float] = []
        load = _load()
        with subprocess.Popen(command, stdout=subprocess.DEVNULL) as preparing:
            while preparing.poll() is None:
                busy += _turns(client, ids, 1.0)
        if preparing.returncode != 0:
            raise RuntimeError(f"envhub prepare beside the playing sessions failed (exit {preparing.returncode})")
        return {
            "sessions": len(ids),
            "quiet_ms": percentiles(quiet),
            "while_preparing_ms": percentiles(busy),
            "load_while_preparing": [load, _load()],
        }


def run_ready_bench(settings: ReadyBenchSettings) -> dict[str, Any]:
    """Run the profile; write and return its results."""
    previous = os.environ.get(CACHE_ENV)
    result: dict[str, Any] = {
        "settings": asdict(settings),
        "cpus": os.cpu_count(),
        "load_average_start": os.getloadavg(),
    }
    tasks = [f"train/{index:05d}" for index in range(settings.tasks)]
    try:
        _say(f"cold generation: {settings.games} games, 1 vs 2 processes, {settings.repeats} runs each...")
        result["generation"] = _generation(settings)
        with tempfile.TemporaryDirectory(prefix="envhub-ready-") as cache:
            _say(f"envhub prepare: {settings.tasks} games...")
            report = prepare(ENVIRONMENT, cache=cache, counts={"train": settings.tasks}, niceness=0)
            result["prepare"] = asdict(report)
            _say(f"steps of {settings.playing} sessions quiet and while games are made...")
            result["steps_meanwhile"] = _steps_meanwhile(settings, cache, tasks)
            result["ready"] = []
            for _ in range(settings.ready_runs):
                result["ready"].append(_ready(settings, cache, tasks))
                _say(f"  ready: {result['ready'][-1]}")
        result["ready_median_s"] = statistics.median(run["ready_s"] for run in result["ready"])
        if settings.cold_baseline:
            with tempfile.TemporaryDirectory(prefix="envhub-ready-cold-") as cold:
                result["ready_cold"] = _ready(settings, cold, tasks)
                _say(f"  ready cold: {result['ready_cold']}")
    finally:
        if previous is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = previous
    result["load_average_end"] = os.getloadavg()
    _write(result, Path(settings.out))
    return result


def markdown(result: Mapping[str, Any]) -> str:
    """The results page."""
    s = result["settings"]
    gen = result["generation"]
    meanwhile = result["steps_meanwhile"]
    slowdown = meanwhile["while_preparing_ms"]["p50_ms"] / meanwhile["quiet_ms"]["p50_ms"]
    lines = [
        "# envhub bench --profile ready: alfworld",
        "",
        f"`envhub bench --profile ready` on {result['cpus']} CPUs, load average "
        f"{result['load_average_start'][0]:.2f} at the start, {result['load_average_end'][0]:.2f} at the end "
        "(a machine shared with other engineers: medians, and the load around each run).",
        "",
        f"## Cold generation ({s['games']} games, {s['repeats']} runs per process count, interleaved)",
        "",
        "| processes | seconds | load before / after |",
        "|---|---|---|",
        *(
            f"| {run['workers']} | {run['seconds']:.1f} | {run['load_before']:.2f} / {run['load_after']:.2f} |"
            for run in gen["runs"]
        ),
        "",
        f"Median: 1 process {gen['median_s']['1']:.1f} s, 2 processes {gen['median_s']['2']:.1f} s: "
        f"**{gen['speedup_2_over_1']:.2f}x** (goal >= 1.8x).",
        "",
        f"## Steps of {meanwhile['sessions']} playing sessions while games are made beside them",
        "",
        "| phase | turns | turn p50 ms | p99 ms |",
        "|---|---|---|---|",
        *(
            f"| {name} | {meanwhile[key]['n']} | {meanwhile[key]['p50_ms']:.1f} | {meanwhile[key]['p99_ms']:.1f} |"
            for name, key in (("quiet", "quiet_ms"), ("envhub prepare beside (2 processes)", "while_preparing_ms"))
        ),
        "",
        f"Turn p50 while preparing / quiet: **{slowdown:.2f}x** "
        f"(load {meanwhile['load_while_preparing'][0]:.2f} -> {meanwhile['load_while_preparing'][1]:.2f}).",
        "",
        f"## Ready: {s['sessions']} sessions of {s['tasks']} tasks on a fresh server ({s['workers']} workers)",
        "",
        f"Cache prepared by `envhub prepare --tasks train:{s['tasks']}`: {result['prepare']['seconds']:.1f} s "
        f"({result['prepare']['workers']} processes).",
        "",
        "| cache | serving s | all sessions created s | load before / after |",
        "|---|---|---|---|",
        *(
            f"| prepared | {run['serving_s']:.1f} | {run['ready_s']:.1f} | {run['load_before']:.2f} / "
            f"{run['load_after']:.2f} |"
            for run in result["ready"]
        ),
    ]
    if "ready_cold" in result:
        cold = result["ready_cold"]
        lines.append(
            f"| cold (baseline) | {cold['serving_s']:.1f} | {cold['ready_s']:.1f} | {cold['load_before']:.2f} / "
            f"{cold['load_after']:.2f} |"
        )
    lines += ["", f"Median ready on a prepared cache: **{result['ready_median_s']:.1f} s** (goal <= 10 s).", ""]
    return "\n".join(lines)


def _write(result: Mapping[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "envhub-bench-ready-alfworld.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    (out / "envhub-bench-ready-alfworld.md").write_text(markdown(result))
    _say(markdown(result))
