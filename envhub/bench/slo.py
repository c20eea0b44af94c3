"""`envhub bench --profile slo`: what one replica serves, and each operation's latency there, in one run.

For one environment and each session count N (1,024 and 4,096 by default):

* a fresh server (2 workers) comes to hold N sessions the way a trainer makes them: N / G groups
  (G = 8; the groups cycle over at most `TASKS` tasks, whose data is made beforehand), each one
  create and G - 1 forks (`Sessions.start_group`), from 16 threads. Meanwhile 8 clients step
  sessions of the groups made so far, back to back: the step latency while sessions are created;
* then, with all N live: `turns` turns of StepBatch over every session (per-step figure: the batch's
  time / its steps), unary steps from 16 threads, and CreateSnapshot then RestoreSnapshot of
  `SNAPSHOTS` sessions;
* memory per session: the server's process tree RSS with the N sessions, less its RSS before them, / N;
* in this process, same run: the same operations on one worker's share (N / workers sessions, created
  the same way) with `Session`: create, fork, step, snapshot (`Session.state`), restore
  (`Session.restore`); beside each served figure.

ALFWorld also gets the engine's figures (design note 015): CPU per step with 1, 8, 64 and 512
sessions held in one process on the same steps, and the 1,024-session turn's efficiency against a
lone session's in-process step. Writes `<out>/envhub-bench-slo-<environment>.json` and `.md`.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import os
import statistics
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envhub.bench.latency import percentiles
from envhub.bench.procs import ServerProcess
from envhub.bench.run import PROFILES
from envhub.client import EnvhubClient, EnvhubError, Sessions
from envhub.core.environment import EnvironmentKind
from envhub.core.registry import build_kind
from envhub.core.session import Session

TASKS = 128
"""Distinct tasks the groups cycle over (the papers' 128 per rollout)."""
GROUP = 8
THREADS = 16
STEPPERS = 8
"""Clients stepping back to back while sessions are created."""
SNAPSHOTS = 200
MAX_BATCH = 4096
"""Steps per StepBatch call (the server's cap)."""
P99_TARGET = 3.0
QUIET_S = 3.0
"""Comparison of start modes: seconds the steppers go on alone after each creation (steps with no start)."""
HELD = (1, 8, 64, 512)
"""ALFWorld engine figure: sessions held in one process."""


@dataclass(frozen=True)
class SloBenchSettings:
    environment: str
    out: str
    sessions: tuple[int, ...] = (1024, 4096)
    workers: int = 2
    turns: int = 3
    compare_rounds: int = 3
    """Rounds of the start modes' comparison per session count (0: none)."""
    compare_tree: str | None = None
    """Compare this tree's servers with ones served from this envhub source tree (e.g. `git archive` of main)
    instead of the start thread with inline starts."""
    settings: Mapping[str, str] = field(default_factory=dict)
    """Server-side environment settings (default: the environment's defaults; ALFWorld: whole rooms)."""


def _say(message: str) -> None:
    print(message, flush=True)


@contextlib.contextmanager
def _timer(samples: list[float]) -> Iterator[None]:
    """Append the block's wall time to `samples`."""
    started = time.perf_counter()
    yield
    samples.append(time.perf_counter() - started)


class _Steppers:
    """Clients stepping sessions of the groups made so far, back to back, until stopped."""

    def __init__(self, client: EnvhubClient, actions: Sequence[str]) -> None:
        self._client = client
        self._actions = actions
        self._sessions: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.samples: list[float] = []
        """Step times while sessions are created."""
        self.quiet_samples: list[float] = []
        """Step times after, with no creation (`quiet`)."""
        self._into = self.samples
        self._threads = [threading.Thread(target=self._run, args=(index,), daemon=True) for index in range(STEPPERS)]

    def offer(self, session_id: str) -> bool:
        """Take a session to step (no other caller may step it) while fewer than `STEPPERS` are taken."""
        with self._lock:
            if len(self._sessions) >= STEPPERS:
                return False
            self._sessions.append(session_id)
            if len(self._sessions) == STEPPERS:
                for thread in self._threads:
                    thread.start()
            return True

    def _run(self, index: int) -> None:
        session_id = self._sessions[index]
        for count in itertools.count():
            if self._stop.is_set():
                return
            with _timer(self._into):
                self._client.step(session_id, self._actions[count % len(self._actions)])

    def quiet(self, seconds: float) -> None:
        """Record the next `seconds` of steps as `quiet_samples` (no session is being created)."""
        self._into = self.quiet_samples
        time.sleep(seconds)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            if thread.is_alive():
                thread.join()


def _create_while_stepping(
    client: EnvhubClient, environment: str, tasks: Sequence[str], sessions: int, quiet_s: float = 0.0
) -> tuple[list[str], float, _Steppers, dict[str, list[float]]]:
    """Make `sessions` sessions in groups from `THREADS` threads while `STEPPERS` clients step; then, with
    `quiet_s`, the steppers go on alone that long. Returns the ids (the steppers' left out), the creation's
    wall time, the steppers (their `samples`: while creating; `quiet`: after) and the create and fork times."""
    port = Sessions(client, environment, admissible=False)
    steppers = _Steppers(client, PROFILES[environment].actions)
    samples: dict[str, list[float]] = {"create": [], "fork": []}

    def group(index: int) -> list[str]:
        with _timer(samples["create"]):
            first = port.start(tasks[index % len(tasks)], max_steps=10**6)
        with _timer(samples["fork"]):
            forks = port.fork(first.session_id, GROUP - 1)
        return [first.session_id, *forks[:-1]] if steppers.offer(forks[-1]) else [first.session_id, *forks]

    started = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as threads:
        ids = [session_id for made in threads.map(group, range(sessions // GROUP)) for session_id in made]
    create_s = time.perf_counter() - started
    if quiet_s:
        steppers.quiet(quiet_s)
    steppers.stop()
    return ids, create_s, steppers, samples


def _served(server: ServerProcess, environment: str, tasks: Sequence[str], sessions: int, turns: int) -> dict[str, Any]:
    """Every served figure at `sessions` live sessions."""
    actions = PROFILES[environment].actions
    with EnvhubClient(server.target, timeout=900.0) as client:
        idle_mb = server.rss_mb()
        ids, create_s, steppers, made = _create_while_stepping(client, environment, tasks, sessions)
        samples: dict[str, list[float]] = {**made, **{name: [] for name in ("batch", "step", "snapshot", "restore")}}
        memory_mb = server.rss_mb() - idle_mb
        cpu_before = server.cpu_s()
        failures = 0
        for turn in range(turns):
            action = actions[turn % len(actions)]
            for start in range(0, len(ids), MAX_BATCH):
                chunk = ids[start : start + MAX_BATCH]
                with _timer(samples["batch"]):
                    results = client.step_many([(session_id, action) for session_id in chunk], return_errors=True)
                samples["batch"][-1] /= len(chunk)
                failures += sum(isinstance(result, EnvhubError) for result in results)
        cpu_after = server.cpu_s()
        batch_cpu_ms = 1000 * (sum(cpu_after) - sum(cpu_before)) / (turns * len(ids))

        def step(session_id: str) -> None:
            with _timer(samples["step"]):
                client.step(session_id, actions[0])

        with ThreadPoolExecutor(THREADS) as threads:
            list(threads.map(step, ids[:: max(1, len(ids) // 400)]))
        for session_id in ids[:: max(1, len(ids) // SNAPSHOTS)]:
            with _timer(samples["snapshot"]):
                snapshot = client.snapshot(session_id)
            with _timer(samples["restore"]):
                restored = client.restore(snapshot)
            client.close_session(restored.session_id)
    fork_each = [duration / (GROUP - 1) for duration in samples["fork"]]
    return {
        "sessions": len(ids) + STEPPERS,
        "create_all_s": create_s,
        "memory_per_session_mb": memory_mb / (len(ids) + STEPPERS),
        "failed_steps": failures,
        "batch_server_cpu_ms_per_step": batch_cpu_ms,
        "step_while_creating": percentiles(steppers.samples),
        **{name: percentiles(values) for name, values in samples.items() if name != "fork"},
        "fork": percentiles(fork_each),
    }


@dataclass(frozen=True)
class _StartMode:
    """One side of the comparison: the server's extra flags and the source tree it is served from."""

    flags: tuple[str, ...] = ()
    tree: str | None = None


def _start_modes(compare_tree: str | None) -> dict[str, _StartMode]:
    """Before and after, in the order they alternate: the start thread against inline starts, or with
    `compare_tree`, servers from that tree against this tree's."""
    if compare_tree:
        return {"before": _StartMode(tree=compare_tree), "this tree": _StartMode()}
    return {"inline": _StartMode(flags=("--inline-starts",)), "thread": _StartMode()}


def _starts_compared(
    environment: str,
    tasks: Sequence[str],
    sessions: int,
    workers: int,
    extra: Sequence[str],
    rounds: int,
    compare_tree: str | None = None,
) -> dict[str, Any]:
    """Steps while sessions are created, in the two `_start_modes`, alternating on fresh servers, `rounds` each;
    after each creation the steppers go on `QUIET_S` alone (steps with no start)."""
    chosen = _start_modes(compare_tree)
    modes: dict[str, list[dict[str, Any]]] = {mode: [] for mode in chosen}
    for _ in range(rounds):
        for mode, how in chosen.items():
            server = ServerProcess(
                environment, workers, max_sessions=sessions + 64, extra=[*extra, *how.flags], source_tree=how.tree
            )
            with server, EnvhubClient(server.target, timeout=900.0) as client:
                _, create_s, steppers, made = _create_while_stepping(client, environment, tasks, sessions, QUIET_S)
            figures: dict[str, Any] = {
                "create_all_s": create_s,
                "step_while_creating": percentiles(steppers.samples),
                "step_quiet": percentiles(steppers.quiet_samples),
                "create": percentiles(made["create"]),
            }
            modes[mode].append(figures)
            ratio = figures["step_while_creating"]["p99_over_p50"]
            _say(f"  {sessions} sessions, {mode} starts: step p99 / p50 while creating {ratio:.2f}")
    summary = {
        mode: {
            "p99_over_p50_median": statistics.median(run["step_while_creating"]["p99_over_p50"] for run in runs),
            "quiet_p99_over_p50_median": statistics.median(
                run["step_quiet"].get("p99_over_p50", float("nan")) for run in runs
            ),
            "p50_ms_median": statistics.median(run["step_while_creating"]["p50_ms"] for run in runs),
            "p99_ms_median": statistics.median(run["step_while_creating"]["p99_ms"] for run in runs),
            "create_all_s_median": statistics.median(run["create_all_s"] for run in runs),
        }
        for mode, runs in modes.items()
    }
    return {"rounds": modes, "summary": summary, "compare_tree": compare_tree}


def _in_process(kind: EnvironmentKind, environment: str, tasks: Sequence[str], sessions: int) -> dict[str, Any]:
    """The same operations in this process on one worker's share of `sessions`."""
    actions = PROFILES[environment].actions
    samples: dict[str, list[float]] = {name: [] for name in ("create", "fork", "step", "snapshot", "restore")}
    live: list[Session] = []
    for index in range(max(1, sessions // GROUP)):
        task = kind.task(tasks[index % len(tasks)])
        with _timer(samples["create"]):
            first = Session.start(kind, task, max_steps=10**6)
        with _timer(samples["fork"]):
            live += [first, *(first.fork() for _ in range(GROUP - 1))]
    samples["fork"] = [duration / (GROUP - 1) for duration in samples["fork"]]
    cpu = time.process_time()
    for action in actions[:3]:
        for session in live:
            with _timer(samples["step"]):
                session.step(action)
    step_cpu_ms = 1000 * (time.process_time() - cpu) / (3 * len(live))
    for session in live[:: max(1, len(live) // SNAPSHOTS)]:
        with _timer(samples["snapshot"]):
            state = session.state()
        with _timer(samples["restore"]):
            restored = Session.restore(kind, state)
        restored.close()
    for session in live:
        session.close()
    return {"sessions": len(live), "step_cpu_ms": step_cpu_ms, **{k: percentiles(v) for k, v in samples.items()}}


def held_step_cpu_ms(kind: EnvironmentKind, tasks: Sequence[str], held: int) -> float:
    """CPU ms per step with `held` sessions held in this process, on the same steps whatever `held`:
    every task's group of 8 (one session per task when `held` is 1) steps 3 turns, `held` sessions at a time."""
    actions = PROFILES["alfworld"].actions[:3]
    size = 1 if held == 1 else GROUP
    per_round = max(1, held // size)
    cpu, steps = 0.0, 0
    for start in range(0, len(tasks), per_round):
        live: list[Session] = []
        for task_id in tasks[start : start + per_round]:
            first = Session.start(kind, kind.task(task_id), max_steps=10**6)
            live += [first, *(first.fork() for _ in range(size - 1))]
        for action in actions:
            started = time.process_time()
            for session in live:
                session.step(action)
            cpu += time.process_time() - started
            steps += len(live)
        for session in live:
            session.close()
    return 1000 * cpu / steps


def _engine(kind: EnvironmentKind, tasks: Sequence[str]) -> dict[str, Any]:
    """ALFWorld's per-step CPU against sessions held (medians of 3 passes, after one to warm)."""
    chosen = list(tasks[: HELD[-1] // GROUP])
    for held in HELD:
        held_step_cpu_ms(kind, chosen, held)
    passes = {held: [held_step_cpu_ms(kind, chosen, held) for _ in range(3)] for held in HELD}
    cpu = {held: statistics.median(values) for held, values in passes.items()}
    return {
        "tasks": len(chosen),
        "cpu_ms_per_step": cpu,
        "ratio_512_to_8": cpu[512] / cpu[8],
        "ratio_sessions_to_lone": max(cpu[held] for held in HELD[1:]) / cpu[1],
    }


def run_slo_bench(settings: SloBenchSettings) -> dict[str, Any]:
    """Run the profile for one environment; write and return its results."""
    environment = settings.environment
    chosen = dict(settings.settings)
    extra = [item for key, value in chosen.items() for item in ("--set", f"{environment}.{key}={value}")]
    extra += ["--idle-timeout", "36000"]  # no session is reaped while thousands are made
    kind = build_kind(environment, chosen)
    if kind.gc_thresholds is not None:  # as each worker does: the in-process figures run the workers' code
        gc.set_threshold(*kind.gc_thresholds)
    split = "train" if "train" in kind.splits() else kind.task(PROFILES[environment].task_id).split
    tasks = [spec.task_id for spec in kind.tasks(split)][:TASKS]
    _say(f"{environment}: preparing {len(tasks)} tasks...")
    for task_id in tasks:
        spec = kind.task(task_id)
        if not kind.prepared(spec):
            kind.prepare(spec)
    result: dict[str, Any] = {
        "environment": environment,
        "settings": {**asdict(settings), "settings": chosen},
        "load_average_start": os.getloadavg(),
        "runs": {},
    }
    if environment == "alfworld":
        _say("alfworld: engine step CPU with 1, 8, 64, 512 sessions held...")
        result["engine"] = _engine(kind, tasks)
        _say(f"  {result['engine']}")
    gc.collect()
    gc.freeze()  # this process's own objects (the kind's tasks): its collections then never stall its steppers
    for sessions in settings.sessions:
        _say(f"{environment}: {sessions} sessions on a fresh server ({settings.workers} workers)...")
        compared = (
            _starts_compared(
                environment, tasks, sessions, settings.workers, extra, settings.compare_rounds, settings.compare_tree
            )
            if settings.compare_rounds
            else None
        )
        with ServerProcess(environment, settings.workers, max_sessions=sessions + 64, extra=extra) as server:
            served = _served(server, environment, tasks, sessions, settings.turns)
        local = _in_process(kind, environment, tasks, sessions // settings.workers)
        result["runs"][str(sessions)] = {"served": served, "in_process": local, "starts_compared": compared}
        _say(f"  served {json.dumps(served)[:400]}...")
    kind.close()
    result["load_average_end"] = os.getloadavg()
    if environment == "alfworld" and "1024" in result["runs"]:
        run = result["runs"]["1024"]["served"]
        lone_ms = result["engine"]["cpu_ms_per_step"][1]
        cores = min(settings.workers, os.cpu_count() or 1)
        result["turn_efficiency_1024"] = {
            "lone_in_process_cpu_ms": lone_ms,
            "batched_turn_s": run["batch"]["p50_ms"] * run["sessions"] / 1000,
            "wall": lone_ms / cores / run["batch"]["p50_ms"],
            "cpu": lone_ms / run["batch_server_cpu_ms_per_step"],
        }
    _write(result, Path(settings.out))
    return result


def _cell(figures: Mapping[str, float]) -> str:
    if not figures.get("n"):
        return "-"
    return f"{figures['p50_ms']:.2f} / {figures['p99_ms']:.2f} / {figures['max_ms']:.2f}"


def markdown(result: Mapping[str, Any]) -> str:
    """The result as a page."""
    environment = result["environment"]
    lines = [
        f"# envhub bench --profile slo: {environment}",
        "",
        f"One server, {result['settings']['workers']} workers, settings {result['settings']['settings'] or 'default'}; "
        f"groups of {GROUP} (one create + {GROUP - 1} forks) over {TASKS} tasks, made from {THREADS} threads while "
        f"{STEPPERS} clients step; then StepBatch turns, unary steps, {SNAPSHOTS} snapshots and restores. "
        f"In-process: the same on one worker's share with `Session`, same run. Load average (1 min) "
        f"{result['load_average_start'][0]:.1f} at the start, {result['load_average_end'][0]:.1f} at the end "
        "(a shared 2-core machine: ratios measured in the run are what count).",
        "",
        "p50 / p99 / max, ms:",
        "",
        "| sessions | operation | served | in-process |",
        "|---:|---|---|---|",
    ]
    for sessions, run in result["runs"].items():
        served, local = run["served"], run["in_process"]
        rows = [
            ("step while sessions are created", served["step_while_creating"], None),
            ("step, StepBatch (per step)", served["batch"], local["step"]),
            ("step, unary (16 threads)", served["step"], local["step"]),
            ("create", served["create"], local["create"]),
            ("fork (per copy)", served["fork"], local["fork"]),
            ("snapshot", served["snapshot"], local["snapshot"]),
            ("restore", served["restore"], local["restore"]),
        ]
        for name, mine, theirs in rows:
            lines.append(f"| {sessions} | {name} | {_cell(mine)} | {_cell(theirs) if theirs else '-'} |")
        creating = served["step_while_creating"]
        ratio = creating.get("p99_over_p50", float("nan"))
        lines += [
            f"| {sessions} | memory per session | {served['memory_per_session_mb']:.3f} MB | - |",
            f"| {sessions} | all sessions created in | {served['create_all_s']:.1f} s | - |",
            f"| {sessions} | step p99 / p50 while creating (target <= {P99_TARGET:.0f}) | {ratio:.2f} "
            f"({'met' if ratio <= P99_TARGET else 'not met'}) | - |",
            f"| {sessions} | failed steps | {served['failed_steps']} | - |",
        ]
    lines += _compared_lines(result)
    if "engine" in result:
        engine = result["engine"]
        cpu = engine["cpu_ms_per_step"]
        lines += [
            "",
            f"## ALFWorld engine: CPU per step with N sessions held in one process ({engine['tasks']} tasks x "
            f"{GROUP}, the same steps each time; design note 015)",
            "",
            "| sessions held | " + " | ".join(str(held) for held in cpu) + " |",
            "|---|" + "---:|" * len(cpu),
            "| CPU ms / step | " + " | ".join(f"{value:.3f}" for value in cpu.values()) + " |",
            "",
            f"512 / 8: **{engine['ratio_512_to_8']:.2f}** (target <= 1.2); with sessions / lone (the dearest "
            f"of 8, 64, 512 against 1): **{engine['ratio_sessions_to_lone']:.2f}** (target <= 1.5).",
        ]
    if "turn_efficiency_1024" in result:
        turn = result["turn_efficiency_1024"]
        lines += [
            "",
            f"1,024-session turn (StepBatch): {turn['batched_turn_s']:.3f} s; against a lone session's in-process "
            f"step ({turn['lone_in_process_cpu_ms']:.3f} ms CPU) on 2 cores: efficiency **{turn['wall']:.2f}** "
            f"(wall; target >= 0.8), **{turn['cpu']:.2f}** in CPU (lone in-process CPU / server CPU per step).",
        ]
    return "\n".join(lines) + "\n"


def _compared_lines(result: Mapping[str, Any]) -> list[str]:
    """The start modes' comparison, when the run made one."""
    runs = {sessions: run["starts_compared"] for sessions, run in result["runs"].items() if run.get("starts_compared")}
    if not runs:
        return []
    tree = next(iter(runs.values())).get("compare_tree")
    if tree:
        title = f"this tree against servers from {tree}"
        how = f"servers from `{tree}` and from this tree"
    else:
        title = "start thread against inline starts (design note 031)"
        how = (
            "`--inline-starts` (creates, restores and forks on each worker's stepping thread, as before) and the "
            "start thread"
        )
    lines = [
        "",
        f"## Steps while sessions are created: {title}",
        "",
        f"Fresh servers, alternating {how}, the same groups each time; after each creation the {STEPPERS} "
        f"steppers go on alone for {QUIET_S:.0f} s (steps with no start: what CPU sharing alone costs). "
        "Per round: step p50 / p99 ms while creating, p99 / p50 while creating, p99 / p50 after; all sessions "
        "created in (s).",
        "",
        "| sessions | servers | round | step p50 / p99 ms while creating | p99 / p50 while creating | "
        "p99 / p50 after (no creates) | created in s |",
        "|---:|---|---:|---|---:|---:|---:|",
    ]
    for sessions, compared in runs.items():
        for mode, rounds in compared["rounds"].items():
            for number, run in enumerate(rounds, start=1):
                creating, quiet = run["step_while_creating"], run["step_quiet"]
                lines.append(
                    f"| {sessions} | {mode} | {number} | {creating['p50_ms']:.2f} / {creating['p99_ms']:.2f} | "
                    f"{creating['p99_over_p50']:.2f} | {quiet.get('p99_over_p50', float('nan')):.2f} | "
                    f"{run['create_all_s']:.1f} |"
                )
    lines += ["", "Medians over rounds:", ""]
    for sessions, compared in runs.items():
        (before_name, before), (after_name, after) = compared["summary"].items()
        verdict = "met" if after["p99_over_p50_median"] <= P99_TARGET else "not met"
        lines.append(
            f"* {sessions} sessions: step p99 / p50 while creating, {before_name} "
            f"{before['p99_over_p50_median']:.2f} -> {after_name} **{after['p99_over_p50_median']:.2f}** "
            f"(target <= {P99_TARGET:.0f}: {verdict}); p99 {before['p99_ms_median']:.1f} -> "
            f"{after['p99_ms_median']:.1f} ms, p50 {before['p50_ms_median']:.2f} -> {after['p50_ms_median']:.2f} ms; "
            f"with no creates {before['quiet_p99_over_p50_median']:.2f} / {after['quiet_p99_over_p50_median']:.2f}; "
            f"created in {before['create_all_s_median']:.1f} -> {after['create_all_s_median']:.1f} s."
        )
    return lines


def _write(result: Mapping[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    name = f"envhub-bench-slo-{result['environment']}"
    (out / f"{name}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    (out / f"{name}.md").write_text(markdown(result))
    _say(markdown(result))
