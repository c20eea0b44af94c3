"""`envhub bench --profile percall`: what one step costs through envhub's server front, beside the fastest
alternative, measured in one run.

The environment is the toy counter (`envhub.testing:ToyKind`, one worker), so nearly all the cost is
the serving path. For 1, 64 and 256 sessions stepping independently (each session one step at a time,
all at once, from one asyncio client) it measures steps/s and CPU per step of the server's front
process, of its worker process and of the client, for envhub's unary `Step`, one `SessionStream` and
unary steps through `AsyncEnvhubClient.coalesced()` (the steps of one loop turn as one StepBatch), `StepBatch`
(lock-step: one batch of every session per call, not like for like), for the baseline:
`envhub.bench.ws_echo`, a minimal WebSocket server (one connection per session, no framework), and for
the floor of a Python gRPC server: `envhub.bench.grpc_echo`'s trivial Step handler under grpc.aio and under
the synchronous server with a thread pool, driven by the same client loop as envhub's unary mode. Every
round runs every mode in turn (interleaved, so they share the load of a shared machine); figures are
medians over rounds, ratios medians of per-round ratios. Single-session p50/p99 alternate envhub and the
baseline step by step. With `front_profile`, one more server of each tree and one bare grpc.aio server run
under cProfile while 64 sessions step by unary calls (and this tree's once more while they step on one
SessionStream), and their profiles (top functions, time by package) are written beside the results. With
`asyncio_loop`, this tree's server also runs on asyncio's own event loop beside its default (uvloop where
installed). With an `environment` (e.g. alfworld), that environment's served/in-process step latency ratio is
measured too.

Writes `<out>/envhub-bench-percall.json`, `.md` and (with the profiles) `-profile.txt`, `-profile-stream.txt`,
`-profile-before.txt` (with a before tree), `-profile-asyncio.txt` (with `asyncio_loop`) and
`-profile-grpc-aio.txt`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pstats
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

from envhub.bench.grpc_echo import SYNC_THREADS
from envhub.bench.procs import PortFileProcess, ServerProcess, cpu_s, tree_pids
from envhub.client import AsyncEnvhubClient, EnvhubClient
from envhub.server import loops
from envhub.testing import REFERENCE

TOY, TASK, ACTION = "toy", "train-count/0", "inc"
"""The trivial environment's wire name, task and an action that never ends its episode."""


@dataclass(frozen=True)
class PercallSettings:
    out: str
    sessions: tuple[int, ...] = (1, 64, 256)
    phase_s: float = 1.5
    """Seconds each mode steps per round."""
    rounds: int = 5
    latency_steps: int = 400
    """Single-session steps per mode for p50/p99 (alternating envhub and the baseline step by step)."""
    front_profile: bool = True
    environment: str | None = None
    """Also measure this environment's served / in-process unary step latency (e.g. alfworld)."""
    before_tree: str | None = None
    """Another source tree of envhub (e.g. `git archive` of an earlier commit): its server runs beside this
    one, its modes (`before_*`) interleaved with this tree's, every figure measured for both."""
    client_loop: str = "asyncio"
    """The event loop the bench's client (every mode's, the baseline's included) runs on: asyncio (default, as
    in earlier runs) or uvloop (`envhub.server.loops`)."""
    asyncio_loop: bool = False
    """Also serve this tree on asyncio's own event loop (`--event-loop asyncio`, modes `asyncio_*`) beside its
    default (uvloop where installed), to tell the loop's share of a change from the rest."""


@dataclass(frozen=True)
class Served:
    """One envhub server of the bench: the source tree it is imported from (None: this one) and its flags."""

    tree: str | None = None
    flags: tuple[str, ...] = ()


def _served(settings: PercallSettings) -> dict[str, Served]:
    """The envhub servers the bench runs, by label (the prefix of their modes' names)."""
    servers = {"envhub": Served()}
    if settings.before_tree:
        servers["before"] = Served(settings.before_tree)
    if settings.asyncio_loop:
        servers["asyncio"] = Served(flags=("--event-loop", "asyncio"))
    return servers


StepAll = Callable[[int], Awaitable[int]]
"""Step the first n sessions once each (however the mode does it); returns the steps taken."""


@dataclass
class Mode:
    """One way of stepping sessions, and the process whose CPU is the server's front (and its workers)."""

    name: str
    step_all: StepAll
    front_pid: int
    worker_pids: Sequence[int]
    independent: bool = True
    """Each session steps on its own (False: the mode steps all sessions in one call)."""


async def _phase(mode: Mode, sessions: int, seconds: float) -> dict[str, float]:
    """Steps/s and CPU ms per step (front, worker, client) while `sessions` sessions step for `seconds`."""
    loop = asyncio.get_running_loop()
    counts = [0] * sessions
    front, worker, client = cpu_s(mode.front_pid), sum(map(cpu_s, mode.worker_pids)), time.process_time()
    started = loop.time()
    deadline = started + seconds

    async def one(index: int) -> None:
        while loop.time() < deadline:
            counts[index] += await mode.step_all(index)

    if mode.independent:
        await asyncio.gather(*(one(index) for index in range(sessions)))
    else:
        while loop.time() < deadline:
            counts[0] += await mode.step_all(sessions)
    elapsed, steps = loop.time() - started, max(1, sum(counts))
    return {
        "steps_per_s": steps / elapsed,
        "front_ms_per_step": 1000 * (cpu_s(mode.front_pid) - front) / steps,
        "worker_ms_per_step": 1000 * (sum(map(cpu_s, mode.worker_pids)) - worker) / steps,
        "client_ms_per_step": 1000 * (time.process_time() - client) / steps,
    }


def _percentiles(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50_ms": 1000 * statistics.median(ordered), "p99_ms": 1000 * p99, "n": len(ordered)}


async def _latency(modes: Sequence[Mode], steps: int, warmup: int = 50) -> dict[str, dict[str, float]]:
    """Single-session step latency of each mode, the modes alternating step by step."""
    samples: dict[str, list[float]] = {mode.name: [] for mode in modes}
    for index in range(warmup + steps):
        for mode in modes:
            started = time.perf_counter()
            await mode.step_all(0)
            if index >= warmup:
                samples[mode.name].append(time.perf_counter() - started)
    return {name: _percentiles(values) for name, values in samples.items()}


def _medians(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}


async def _envhub_modes(
    label: str,
    client: AsyncEnvhubClient,
    stream: AsyncEnvhubClient,
    coalesced: AsyncEnvhubClient,
    server: ServerProcess,
    most: int,
    pipelined: AsyncEnvhubClient | None = None,
) -> list[Mode]:
    """Unary, SessionStream, coalesced and StepBatch modes over `most` sessions of the toy kind on `server` (and
    coalesced with two batches in flight, `_coalesced_depth2`, through `pipelined` when given)."""
    starts = await asyncio.gather(
        *(client.create_session(TOY, task=TASK, seed=seed, max_steps=10**9) for seed in range(most))
    )
    ids = [start.session_id for start in starts]

    async def unary(index: int) -> int:
        await client.step(ids[index], ACTION)
        return 1

    async def streamed(index: int) -> int:
        await stream.step(ids[index], ACTION)
        return 1

    async def coalesce(index: int) -> int:
        await coalesced.step(ids[index], ACTION)
        return 1

    async def batch(count: int) -> int:
        await client.step_many([(session_id, ACTION) for session_id in ids[:count]])
        return count

    front = server.process.pid
    workers = [pid for pid in tree_pids(front) if pid != front]
    modes = [
        Mode(f"{label}_unary", unary, front, workers),
        Mode(f"{label}_stream", streamed, front, workers),
        Mode(f"{label}_coalesced", coalesce, front, workers),
        Mode(f"{label}_batch", batch, front, workers, independent=False),
    ]
    if pipelined is not None:

        async def pipeline(index: int) -> int:
            await pipelined.step(ids[index], ACTION)
            return 1

        modes.insert(3, Mode(f"{label}_coalesced_depth2", pipeline, front, workers))
    return modes


async def _floor_mode(name: str, server: PortFileProcess, stack: contextlib.AsyncExitStack) -> Mode:
    """A bare gRPC server's Step (`envhub.bench.grpc_echo`), driven by envhub's client as envhub's unary mode."""
    client = await stack.enter_async_context(AsyncEnvhubClient(server.target))

    async def unary(index: int) -> int:
        await client.step(f"s{index}", ACTION)
        return 1

    return Mode(name, unary, server.process.pid, ())


async def _compare(
    settings: PercallSettings,
    servers: dict[str, ServerProcess],
    baseline: PortFileProcess,
    floors: dict[str, PortFileProcess],
) -> dict[str, Any]:
    most = max(settings.sessions)
    modes: list[Mode] = []
    async with contextlib.AsyncExitStack() as stack:
        for label, server in servers.items():
            client = await stack.enter_async_context(AsyncEnvhubClient(server.target))
            stream = await stack.enter_async_context(client.stream())
            coalesced = await stack.enter_async_context(client.coalesced())
            pipelined = await stack.enter_async_context(client.coalesced(depth=2)) if label == "envhub" else None
            modes += await _envhub_modes(label, client, stream, coalesced, server, most, pipelined)
        for name, floor in floors.items():
            modes.append(await _floor_mode(name, floor, stack))
        sockets: list[ClientConnection] = [
            await stack.enter_async_context(connect(f"ws://127.0.0.1:{baseline.port}", compression=None))
            for _ in range(most)
        ]

        async def websocket(index: int) -> int:
            await sockets[index].send(ACTION)
            json.loads(await sockets[index].recv())
            return 1

        modes.append(Mode("websocket", websocket, baseline.process.pid, ()))
        print("single-session latency, modes alternating step by step...", flush=True)
        latency = await _latency([mode for mode in modes if mode.independent], settings.latency_steps)
        print(f"  {latency}", flush=True)
        for mode in modes:  # warm-up, not counted
            await _phase(mode, most, settings.phase_s / 2)
        rounds: dict[int, dict[str, list[dict[str, float]]]] = {
            n: {m.name: [] for m in modes} for n in settings.sessions
        }
        for round_index in range(settings.rounds):
            for count in settings.sessions:
                for mode in modes:
                    if not mode.independent and count == 1:
                        continue
                    figures = await _phase(mode, count, settings.phase_s)
                    rounds[count][mode.name].append(figures)
                    print(f"  round {round_index}, {count} sessions, {mode.name}: {_brief(figures)}", flush=True)
    return {"latency": latency, "sessions": {str(count): _summary(per_mode) for count, per_mode in rounds.items()}}


def _ratio(of: list[dict[str, float]], to: list[dict[str, float]]) -> float:
    """Median of the per-round ratios of steps/s."""
    return statistics.median(a["steps_per_s"] / b["steps_per_s"] for a, b in zip(of, to, strict=True))


def _summary(per_mode: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Medians per mode; each mode's steps/s against the WebSocket server, stream against unary, and this
    tree against the before tree."""
    measured = {name: values for name, values in per_mode.items() if values}
    ratios = {f"{name}_to_websocket": _ratio(values, measured["websocket"]) for name, values in measured.items()}
    del ratios["websocket_to_websocket"]
    for label in ("envhub", "before", "asyncio"):
        for way in ("stream", "coalesced", "coalesced_depth2"):
            if f"{label}_{way}" in measured:
                ratios[f"{label}_{way}_to_unary"] = _ratio(measured[f"{label}_{way}"], measured[f"{label}_unary"])
    for name, values in measured.items():
        for other in ("before", "asyncio"):
            if name.startswith("envhub_") and f"{other}_{name[7:]}" in measured:
                ratios[f"{name}_to_{other}"] = _ratio(values, measured[f"{other}_{name[7:]}"])
    return {
        "medians": {name: _medians(values) for name, values in measured.items()},
        "ratios": ratios,
        "rounds": measured,
    }


def _brief(figures: dict[str, float]) -> str:
    return (
        f"{figures['steps_per_s']:.0f} steps/s, CPU ms/step front {figures['front_ms_per_step']:.3f} "
        f"worker {figures['worker_ms_per_step']:.3f} client {figures['client_ms_per_step']:.3f}"
    )


def front_profile(served: Served = Served(), sessions: int = 64, seconds: float = 8.0, stream: bool = False) -> str:
    """Profile envhub's front process (cProfile, CPU time) while `sessions` sessions step by unary calls (with
    `stream`, on one SessionStream); returns the report."""
    with tempfile.TemporaryDirectory(prefix="envhub-percall-") as folder:
        stats_file = str(Path(folder) / "front.pstats")
        profiled = ("-m", "envhub.bench.profiled", stats_file)
        with ServerProcess(
            REFERENCE, max_sessions=sessions + 8, extra=served.flags, python_args=profiled, source_tree=served.tree
        ) as s:
            steps = asyncio.run(_profiled_steps(s, sessions, seconds, create=True, stream=stream))
        how = "steps on one SessionStream" if stream else "unary calls"
        return _profile_report(pstats.Stats(stats_file), steps, sessions, "envhub's front process", how)


def floor_profile(sessions: int = 64, seconds: float = 8.0) -> str:
    """Profile the bare grpc.aio server (`envhub.bench.grpc_echo aio`) the same way; returns the report."""
    with tempfile.TemporaryDirectory(prefix="envhub-percall-") as folder:
        stats_file = str(Path(folder) / "floor.pstats")
        line = [sys.executable, "-m", "envhub.bench.profiled", stats_file, "-m", "envhub.bench.grpc_echo", "aio"]
        with PortFileProcess(lambda port_file: [*line, port_file]) as server:
            steps = asyncio.run(_profiled_steps(server, sessions, seconds, create=False))
        what = "the bare grpc.aio server (grpc_echo aio)"
        return _profile_report(pstats.Stats(stats_file), steps, sessions, what, "unary calls")


async def _profiled_steps(
    server: PortFileProcess, sessions: int, seconds: float, create: bool, stream: bool = False
) -> int:
    """Unary steps (with `stream`: on one SessionStream) of `sessions` sessions for `seconds`, the server's
    profile on (SIGUSR1) only meanwhile; `create`: make (and then close) toy sessions, else name them (a bare
    server has none). Returns the steps."""
    async with AsyncEnvhubClient(server.target) as unary, contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(unary.stream()) if stream else unary
        if create:
            starts = await asyncio.gather(
                *(client.create_session(TOY, task=TASK, max_steps=10**9) for _ in range(sessions))
            )
            ids = [start.session_id for start in starts]
        else:
            ids = [f"s{index}" for index in range(sessions)]
        loop = asyncio.get_running_loop()
        server.process.send_signal(signal.SIGUSR1)  # profile from here (start-up left out)
        deadline, steps = loop.time() + seconds, [0]

        async def one(session_id: str) -> None:
            while loop.time() < deadline:
                await client.step(session_id, ACTION)
                steps[0] += 1

        await asyncio.gather(*(one(session_id) for session_id in ids))
        server.process.send_signal(signal.SIGUSR2)
        if create:
            await asyncio.gather(*(client.close_session(session_id) for session_id in ids))
        return steps[0]


def _package(filename: str) -> str:
    """A profile entry's file -> the package it belongs to (what the breakdown sums by)."""
    if filename == "~":
        return "builtins and C extensions (grpc's Cython core, protobuf's upb, pickle)"
    parts = Path(filename).parts
    for anchor in ("envhub", "grpc", "google", "prometheus_client", "asyncio", "multiprocessing"):
        if anchor in parts:
            index = parts.index(anchor)
            return ".".join(parts[index : index + (3 if anchor in ("envhub", "google") else 1)]).removesuffix(".py")
    return Path(filename).name


def _profile_report(stats: pstats.Stats, steps: int, sessions: int, what: str, how: str) -> str:
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in table.values())
    by_package: dict[str, float] = {}
    for (filename, _, _), entry in table.items():
        by_package[_package(filename)] = by_package.get(_package(filename), 0.0) + entry[2]
    lines = [
        f"cProfile (CPU time of the main thread) of {what} while {sessions} sessions stepped by "
        f"{how}: {steps} steps, {1000 * total / max(1, steps):.3f} ms of profiled CPU per step (cProfile "
        "inflates it; the shares are what matters). C code (grpc's Cython core, protobuf, pickle) counts as the "
        "own time of the Python-visible call that ran it: `Context.run` is the event loop (asyncio's or uvloop's) "
        "running a callback, mostly grpc.aio's Cython coroutines; uvloop's own C code shows under builtins.",
        "",
        "own time by package (share of the profiled total):",
    ]
    for name, seconds in sorted(by_package.items(), key=lambda item: -item[1])[:14]:
        lines.append(f"  {100 * seconds / total:5.1f}%  {1e6 * seconds / max(1, steps):7.1f} us/step  {name}")
    lines += ["", "top functions by own time:"]
    ranked = sorted(table.items(), key=lambda item: -item[1][2])[:30]
    for (filename, line, function), entry in ranked:
        where = f"{_package(filename)}:{line}" if filename != "~" else ""
        lines.append(f"  {100 * entry[2] / total:5.1f}%  {entry[1]:>8} calls  {function} {where}")
    return "\n".join(lines) + "\n"


def served_ratio(environment: str, served: Served = Served(), steps: int = 200) -> dict[str, Any]:
    """`environment`'s served / in-process unary step latency at p50 (the serving bench's measurement)."""
    from envhub.bench.run import PROFILES, BenchSettings, step_latency

    profile = PROFILES[environment]
    settings = BenchSettings(environment, None, "", steps=steps)
    server_process = ServerProcess(environment, workers=1, extra=served.flags, source_tree=served.tree)
    with server_process as server, EnvhubClient(server.target) as client:
        local, remote = step_latency(client, settings, profile, profile.task_id)
    return {"in_process": local, "grpc": remote, "ratio_p50": remote["p50_ms"] / local["p50_ms"]}


def _floor_server(kind: str) -> PortFileProcess:
    """`envhub.bench.grpc_echo` (a bare Python gRPC server, `kind` aio or sync) as a subprocess."""
    return PortFileProcess(lambda port_file: [sys.executable, "-m", "envhub.bench.grpc_echo", kind, port_file])


def run_percall_bench(settings: PercallSettings) -> dict[str, Any]:
    """Run every measurement, print as it goes, write JSON and markdown; returns the results."""
    out = Path(settings.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"settings": vars(settings), "load_average_at_start": os.getloadavg()[0]}
    most = max(settings.sessions)
    trees = _served(settings)
    with contextlib.ExitStack() as stack:
        servers = {
            label: stack.enter_context(
                ServerProcess(REFERENCE, max_sessions=most + 8, extra=served.flags, source_tree=served.tree)
            )
            for label, served in trees.items()
        }
        command = [sys.executable, "-m", "envhub.bench.ws_echo"]
        baseline = stack.enter_context(PortFileProcess(lambda port_file: [*command, port_file]))
        floors = {f"grpc_{kind}": stack.enter_context(_floor_server(kind)) for kind in ("aio", "sync")}
        results.update(loops.run(lambda: _compare(settings, servers, baseline, floors), settings.client_loop))
    if settings.environment:
        results["environment_ratio"] = {}
        for label, served in trees.items():
            print(f"{settings.environment} ({label}): served / in-process unary step latency...", flush=True)
            results["environment_ratio"][label] = served_ratio(settings.environment, served)
            print(f"  {results['environment_ratio'][label]}", flush=True)
    if settings.front_profile:
        for label, served in trees.items():
            print(f"profiling the front ({label}, cProfile) under 64 sessions of unary steps...", flush=True)
            report = front_profile(served)
            suffix = "" if label == "envhub" else f"-{label}"
            (out / f"envhub-bench-percall-profile{suffix}.txt").write_text(report)
            print(report, flush=True)
        print("profiling the front (envhub, cProfile) under 64 sessions of steps on one SessionStream...", flush=True)
        report = front_profile(stream=True)
        (out / "envhub-bench-percall-profile-stream.txt").write_text(report)
        print(report, flush=True)
        print("profiling the bare grpc.aio server (cProfile) under 64 sessions of unary steps...", flush=True)
        report = floor_profile()
        (out / "envhub-bench-percall-profile-grpc-aio.txt").write_text(report)
        print(report, flush=True)
    results["load_average_at_end"] = os.getloadavg()[0]
    (out / "envhub-bench-percall.json").write_text(json.dumps(results, indent=2) + "\n")
    text = _markdown(results)
    (out / "envhub-bench-percall.md").write_text(text)
    print(text)
    return results


GOALS = (
    "issue 38's goals: envhub_unary server CPU (front + worker) <= 0.25 ms/step; envhub_unary steps/s >= 1.0x the "
    "baseline at 64 and 256 sessions; envhub_stream >= 2x envhub_unary; single-session envhub_unary p50 <= 0.5 ms"
)


def _markdown(results: dict[str, Any]) -> str:
    settings = results["settings"]
    lines = [
        "# envhub bench: per-call cost (toy environment, 1 worker) beside a minimal WebSocket server",
        "",
        "Modes: `envhub_*` this tree's server"
        + (f", `before_*` the server of `{settings['before_tree']}`" if settings["before_tree"] else "")
        + (", `asyncio_*` this tree's server on asyncio's own event loop" if settings.get("asyncio_loop") else "")
        + "; `_unary` one Step call per step, `_stream` one SessionStream for all sessions, `_coalesced` unary "
        "steps through `AsyncEnvhubClient.coalesced()` (the steps of one loop turn as one StepBatch; "
        "`_coalesced_depth2`: `coalesced(depth=2)`, split so that two batches are in flight), `_batch` one "
        "StepBatch of every session per call (lock-step, not like for like); `websocket` the baseline "
        "(`envhub.bench.ws_echo`: one WebSocket connection per session, no framework, no workers); `grpc_aio` and "
        "`grpc_sync` the floor of a Python gRPC server (`envhub.bench.grpc_echo`: envhub's Step RPC with a trivial "
        "handler, grpc.aio or the synchronous server with a thread pool of "
        f"{SYNC_THREADS}, driven by envhub's client as `envhub_unary`).",
        "",
        "| sessions | mode | steps/s | vs WebSocket | vs before | CPU ms/step: front | worker | server | client |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for count, block in results["sessions"].items():
        ratios = block["ratios"]
        for name, figures in block["medians"].items():
            to_ws, to_before = ratios.get(f"{name}_to_websocket"), ratios.get(f"{name}_to_before")
            server = figures["front_ms_per_step"] + figures["worker_ms_per_step"]
            lines.append(
                f"| {count} | {name} | {figures['steps_per_s']:.0f} | {'' if to_ws is None else f'{to_ws:.2f}x'} | "
                f"{'' if to_before is None else f'{to_before:.2f}x'} | {figures['front_ms_per_step']:.3f} | "
                f"{figures['worker_ms_per_step']:.3f} | {server:.3f} | {figures['client_ms_per_step']:.3f} |"
            )
    lines += ["", "| single session | p50 ms | p99 ms |", "| --- | --- | --- |"]
    lines += [f"| {name} | {v['p50_ms']:.3f} | {v['p99_ms']:.3f} |" for name, v in results["latency"].items()]
    lines.append("")
    for count, block in results["sessions"].items():
        pairs = [(key, value) for key, value in block["ratios"].items() if key.endswith("_to_unary")]
        lines.append(
            f"SessionStream and coalesced / unary steps/s at {count} sessions: "
            + ", ".join(f"{k} {v:.2f}x" for k, v in pairs)
        )
        on_asyncio = [(key, value) for key, value in block["ratios"].items() if key.endswith("_to_asyncio")]
        if on_asyncio:
            lines.append(
                f"This tree's server on its default loop / on asyncio's, steps/s at {count} sessions: "
                + ", ".join(f"{k} {v:.2f}x" for k, v in on_asyncio)
            )
    for label, ratio in results.get("environment_ratio", {}).items():
        lines += [
            "",
            f"{settings['environment']} ({label}): unary step p50 served {ratio['grpc']['p50_ms']:.2f} ms / in-process "
            f"{ratio['in_process']['p50_ms']:.2f} ms = {ratio['ratio_p50']:.3f}",
        ]
    lines += [
        "",
        f"{GOALS}.",
        "",
        f"Medians of {settings['rounds']} interleaved rounds of {settings['phase_s']} s per mode on a shared "
        f"{os.cpu_count()}-core machine, the client on {settings.get('client_loop', 'asyncio')}'s event loop "
        f"(1-minute load average {results['load_average_at_start']:.1f} at the start, "
        f"{results['load_average_at_end']:.1f} at the end); ratios are medians of per-round ratios. Regenerate with "
        "`envhub bench --profile percall` (`--env alfworld` adds its served/in-process ratio, `--compare-tree DIR` "
        "a server from another checkout, `--compare-loops` this tree's server on asyncio's loop, `--client-loop "
        "uvloop` the client on uvloop).",
    ]
    return "\n".join(lines) + "\n"
