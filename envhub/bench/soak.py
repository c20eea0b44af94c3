"""`envhub bench --profile soak`: an hour of session churn per environment, watching for leaks.

Each environment gets its own `envhub serve` process (2 workers) holding the rollout bench's
session count (1,024; ScienceWorld 256) for `duration_s` of churn once they are created. Every
round steps every session once (one StepBatch) and then replaces a 32nd of them: closed, and
made again by a create, a fork of a live session, or a snapshot of one restored; another 32nd
(and every session whose episode ended) is reset. Every `sample_s` seconds
the server's process tree is sampled: resident memory, open file descriptors, threads (the JVM's
own for ScienceWorld), and worker restarts (`envhub_worker_restarts_total`). After a warm-up
(the first fifth of the run) each figure's least-squares slope per hour is reported next to its
mean, with the errors seen (none is expected). Several environments run at once, one thread
each, so `--env all` takes one `duration_s`. Writes `<out>/envhub-soak.json` and `.md`.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import socket
import statistics
import threading
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envhub.bench.procs import ServerProcess, tree_pids, tree_rss_mb
from envhub.bench.rollout import DEFAULT_SESSIONS, SERVER_SETTINGS
from envhub.bench.run import PROFILES
from envhub.client import EnvhubClient, EnvhubError

WARMUP_FRACTION = 0.2
"""Share of the run left out of the slopes (sessions being created, caches and heaps filling)."""
CHURN_FRACTION = 32
"""Every round a 1/CHURN_FRACTION of the sessions is replaced and another is reset."""
THREADS = 8
GROUP = 8
"""Sessions per task, as in the rollout bench (G)."""
"""Threads of the churn calls (closes, creates, forks, snapshots, restores, resets)."""
FIGURES = ("rss_mb", "fds", "threads", "jvm_threads", "worker_restarts")


@dataclass(frozen=True)
class SoakSettings:
    environments: tuple[str, ...]
    out: str
    duration_s: float = 3600.0
    sample_s: float = 30.0
    sessions: int | None = None
    """None: the rollout bench's count per environment (1,024; ScienceWorld 256)."""
    workers: int = 2

    def session_count(self, environment: str) -> int:
        return self.sessions or DEFAULT_SESSIONS.get(environment, 1024)


@dataclass
class _Run:
    """One environment's soak: its samples and counts."""

    environment: str
    sessions: int
    samples: list[dict[str, float]] = field(default_factory=list)
    operations: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    fill_s: float = 0.0
    """Seconds creating the sessions before the churn started."""


def free_port() -> int:
    """A port free on localhost now (for a server told to bind it)."""
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return int(probe.getsockname()[1])


def _proc_figure(pid: int, name: str) -> int:
    try:
        if name == "fds":
            return len(os.listdir(f"/proc/{pid}/fd"))
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except OSError:  # the process exited while we looked
        pass
    return 0


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _restarts(metrics_port: int) -> float:
    page = urllib.request.urlopen(f"http://localhost:{metrics_port}/metrics", timeout=30).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in page.splitlines() if line.startswith("envhub_worker_restarts"))


def _sample(server: ServerProcess, metrics_port: int, started: float) -> dict[str, float]:
    pids = tree_pids(server.process.pid)
    return {
        "t_s": time.monotonic() - started,
        "rss_mb": tree_rss_mb(server.process.pid),
        "fds": sum(_proc_figure(pid, "fds") for pid in pids),
        "threads": sum(_proc_figure(pid, "threads") for pid in pids),
        "jvm_threads": sum(_proc_figure(pid, "threads") for pid in pids if _comm(pid) == "java"),
        "worker_restarts": _restarts(metrics_port),
        "load_average_1m": os.getloadavg()[0],
    }


def _slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per hour."""
    if len(points) < 2:
        return 0.0
    mean_t = statistics.fmean(t for t, _ in points)
    mean_v = statistics.fmean(v for _, v in points)
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return 0.0
    return 3600.0 * sum((t - mean_t) * (v - mean_v) for t, v in points) / spread


class _Churn:
    """The client side of one environment's soak."""

    def __init__(self, client: EnvhubClient, run: _Run) -> None:
        self.client, self.run = client, run
        tasks = [task.task_id for task in client.list_tasks(run.environment, "train")]
        self.tasks = tasks[: max(1, run.sessions // GROUP)]
        """The tasks of the rollout bench (N / G of them): what a churn creates plays (no new game to make)."""
        self.actions = itertools.cycle(PROFILES[run.environment].actions)
        self.random = random.Random(0)
        self.ids: list[str] = []
        self.ended: list[str] = []
        """Sessions whose episode ended in the last round (reset in the next)."""

    def _call(self, name: str, call: Any) -> Any:
        self.run.operations[name] += 1
        try:
            return call()
        except EnvhubError as error:
            self.run.errors[f"{name} {error.code.name} {error.reason}"] += 1
            return None

    def _create(self, _: int) -> list[str]:
        task = self.random.choice(self.tasks)
        start = self._call("create", lambda: self.client.create_session(self.run.environment, task, max_steps=10**6))
        return [start.session_id] if start else []

    def _fork(self, _: int) -> list[str]:
        source = self.random.choice(self.ids)
        return self._call("fork", lambda: self.client.fork(source, 1)) or []

    def _restore(self, _: int) -> list[str]:
        source = self.random.choice(self.ids)
        snapshot = self._call("snapshot", lambda: self.client.snapshot(source))
        start = snapshot and self._call("restore", lambda: self.client.restore(snapshot))
        return [start.session_id] if start else []

    def _group(self, task: str) -> list[str]:
        start = self._call("create", lambda: self.client.create_session(self.run.environment, task, max_steps=10**6))
        if start is None:
            return []
        return [start.session_id, *(self._call("fork", lambda: self.client.fork(start.session_id, GROUP - 1)) or [])]

    def fill(self, threads: ThreadPoolExecutor) -> None:
        """`sessions` sessions as the rollout bench makes them: per task one create and G - 1 forks."""
        self.ids = [i for ids in threads.map(self._group, self.tasks) for i in ids][: self.run.sessions]
        while len(self.ids) < self.run.sessions:  # creates refused: make up the count
            self.ids += self._create(0)

    def round(self, threads: ThreadPoolExecutor) -> None:
        """Step every session once, then replace and reset a 32nd of them each."""
        action = next(self.actions)
        results = self._call("step", lambda: self.client.step_many([(i, action) for i in self.ids], return_errors=True))
        for session_id, result in zip(self.ids, results or [], strict=False):
            if isinstance(result, EnvhubError):
                self.run.errors[f"step {result.code.name} {result.reason}"] += 1
            elif result.terminated or result.truncated:
                self.ended.append(session_id)
        count = max(1, len(self.ids) // CHURN_FRACTION)
        self.random.shuffle(self.ids)
        leaving, self.ids = self.ids[:count], self.ids[count:]
        list(threads.map(lambda i: self._call("close", lambda: self.client.close_session(i)), leaving))
        makers = [self._create, self._fork, self._restore]
        made = threads.map(lambda n: makers[n % len(makers)](n), range(count))
        self.ids += [i for ids in made for i in ids]
        resets = set(self.ids[:count]) | (set(self.ended) - set(leaving))
        list(threads.map(lambda i: self._call("reset", lambda: self.client.reset_session(i)), sorted(resets)))
        self.ended = []
        self.run.operations["round"] += 1


def _soak(environment: str, settings: SoakSettings) -> _Run:
    run = _Run(environment, settings.session_count(environment))
    chosen = SERVER_SETTINGS.get(environment, {})
    metrics_port = free_port()
    extra = [item for key, value in chosen.items() for item in ("--set", f"{environment}.{key}={value}")]
    extra += ["--metrics-port", str(metrics_port), "--idle-timeout", str(10 * settings.duration_s)]
    server = ServerProcess(environment, workers=settings.workers, max_sessions=run.sessions + 64, extra=extra)
    with server, EnvhubClient(server.target, timeout=600.0) as client, ThreadPoolExecutor(THREADS) as threads:
        churn = _Churn(client, run)
        filling = time.monotonic()
        churn.fill(threads)
        started = time.monotonic()  # the churn's clock: `duration_s` of it, samples timed from here
        run.fill_s = started - filling
        print(f"soak {environment}: {len(churn.ids)} sessions after {run.fill_s:.0f} s", flush=True)
        next_sample = started
        while time.monotonic() - started < settings.duration_s:
            churn.round(threads)
            if time.monotonic() >= next_sample:
                run.samples.append(_sample(server, metrics_port, started))
                next_sample += settings.sample_s
                sample = run.samples[-1]
                print(
                    f"soak {environment} {sample['t_s']:.0f} s: {sample['rss_mb']:.0f} MB, {sample['fds']:.0f} fds, "
                    f"{sample['threads']:.0f} threads, {run.operations['round']} rounds, {sum(run.errors.values())} "
                    "errors",
                    flush=True,
                )
        run.samples.append(_sample(server, metrics_port, started))
    return run


def _summary(run: _Run, settings: SoakSettings) -> dict[str, Any]:
    warm = [s for s in run.samples if s["t_s"] >= WARMUP_FRACTION * settings.duration_s] or run.samples
    figures = {}
    for name in FIGURES:
        points = [(s["t_s"], s[name]) for s in warm]
        mean = statistics.fmean(v for _, v in points)
        slope = _slope_per_hour(points)
        figures[name] = {
            "mean": mean,
            "first": points[0][1],
            "last": points[-1][1],
            "slope_per_hour": slope,
            "slope_percent_of_mean_per_hour": 100.0 * slope / mean if mean else 0.0,
        }
    return {
        "environment": run.environment,
        "sessions": run.sessions,
        "fill_s": run.fill_s,
        "duration_s": settings.duration_s,
        "load_average_1m_median": statistics.median(s["load_average_1m"] for s in run.samples),
        "settings": SERVER_SETTINGS.get(run.environment, {}),
        "figures": figures,
        "operations": dict(run.operations),
        "errors": dict(run.errors),
        "samples": run.samples,
    }


def run_soak(settings: SoakSettings) -> dict[str, Any]:
    """Soak every environment of `settings` at once; write and return the results."""
    runs: dict[str, _Run] = {}
    failures: dict[str, BaseException] = {}

    def one(environment: str) -> None:
        try:
            runs[environment] = _soak(environment, settings)
        except BaseException as error:  # reported after the others' results are written, not lost in a thread
            failures[environment] = error
            return
        with lock:  # each environment's result is written as soon as it is in
            _write(_merged(Path(settings.out), _summary(runs[environment], settings), settings), Path(settings.out))

    lock = threading.Lock()

    workers = [threading.Thread(target=one, args=(name,)) for name in settings.environments]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if failures:
        raise RuntimeError(f"soak failed: {failures}")
    result: dict[str, Any] = json.loads((Path(settings.out) / "envhub-soak.json").read_text())
    return result


def _merged(out: Path, summary: dict[str, Any], settings: SoakSettings) -> dict[str, Any]:
    """The results file with `summary` in place of any earlier result of its environment (runs of
    some environments add up)."""
    path = out / "envhub-soak.json"
    result = json.loads(path.read_text()) if path.exists() else {"environments": []}
    others = [env for env in result["environments"] if env["environment"] != summary["environment"]]
    order = list(PROFILES)
    result.update(
        {
            "duration_s": settings.duration_s,
            "sample_s": settings.sample_s,
            "warmup_fraction": WARMUP_FRACTION,
            "workers": settings.workers,
            "cpu_count": os.cpu_count(),
            "environments": sorted([*others, summary], key=lambda env: order.index(env["environment"])),
        }
    )
    return result


def _write(result: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "envhub-soak.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# envhub bench --profile soak",
        "",
        f"Each environment's server ({result['workers']} workers) holds the rollout bench's session count "
        f"({GROUP} per task) through its minutes of churn, on {result['cpu_count']} cores shared with other work "
        "(environments soaked together share them too; the load column is the median 1-minute load average "
        "during the run). Each round steps every session once "
        f"(StepBatch), then closes 1/{CHURN_FRACTION} of them and makes as many again (create, fork, snapshot + "
        f"restore in turn) and resets another 1/{CHURN_FRACTION} (and every session whose episode ended). "
        f"Slopes are least squares over the samples after the first {result['warmup_fraction']:.0%} of the "
        f"churn (one every {result['sample_s']:.0f} s), per hour.",
        "",
        "| environment | sessions | minutes | load | rounds | RSS MB (mean; slope/h) | fds (mean; slope/h) "
        "| threads (mean; slope/h) | JVM threads (mean; slope/h) | worker restarts | calls | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for env in result["environments"]:
        f = env["figures"]

        def cell(name: str, f: dict[str, Any] = f) -> str:
            mean, slope, percent = (
                f[name][key] for key in ("mean", "slope_per_hour", "slope_percent_of_mean_per_hour")
            )
            return f"{mean:.0f}; {slope:+.1f} ({percent:+.1f}%)"

        calls = sum(count for name, count in env["operations"].items() if name != "round")
        lines.append(
            f"| {env['environment']} | {env['sessions']} | {env['duration_s'] / 60:.0f} "
            f"| {env['load_average_1m_median']:.1f} | {env['operations'].get('round', 0)} | {cell('rss_mb')} "
            f"| {cell('fds')} | {cell('threads')} | {cell('jvm_threads') if f['jvm_threads']['mean'] else '-'} "
            f"| {f['worker_restarts']['last']:.0f} | {calls} | {sum(env['errors'].values())} |"
        )
    for env in result["environments"]:
        if env["errors"]:
            lines += ["", f"Errors ({env['environment']}): {env['errors']}"]
    lines.append("")
    (out / "envhub-soak.md").write_text("\n".join(lines))
    print("\n".join(lines), flush=True)
