"""`envhub bench --profile failover`: what failover costs while nothing fails, and how fast a killed
replica's sessions step again.

Two `envhub serve` replicas sharing a snapshot key, N sessions over both (N / G tasks, each created
once and forked G - 1 times, so each replica holds half), every turn one `step_many` of every
session. Overhead: the mean turn of a plain `EnvhubPool` (no failover) against
`FailoverTransport` with `snapshot_every` k in 1, 2, 4 (the snapshots every k steps are the whole
cost), all measured in the same run. Recovery: after 3 turns one replica is SIGKILLed and the next
turn is timed from the kill until every session, the killed replica's half included, has its
step's result (each checked to equal the result of an undisturbed twin played alongside, so
nothing is lost or applied twice); with the default recovery concurrency on a replica left that
had not held the killed one's tasks (cold: it loads each game at its first restore) and on one
whose workers held them (warm), each restoring in RestoreSnapshotBatch calls, and, cold, with one
RestoreSnapshot call per session (as before the batch RPC, same concurrency), the three modes' kills
interleaved; then moving sessions one at a time (the baseline); then restores alone, batched and not.
Writes `<out>/envhub-failover-recovery.json` and `.md`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envhub.bench.procs import ServerProcess
from envhub.bench.rollout import SERVER_SETTINGS
from envhub.bench.run import PROFILES
from envhub.client import EnvhubClient, EnvhubPool
from envhub.client import recovery as moves
from envhub.client.failover import REPLAY_BOUND, SNAPSHOT_EVERY, FailoverTransport

KEY = "envhub-bench-failover-key"
INTERVALS = (1, 2, 4)
REPLAY_BOUNDS = (REPLAY_BOUND,)
TARGET_S = 3.0
"""The issue's target: 512 sessions of a killed replica stepping again within 3 s of the kill."""


@dataclass(frozen=True)
class FailoverBenchSettings:
    environment: str
    out: str
    sessions: int = 1024
    """Over both replicas: half of them on the replica killed."""
    group_size: int = 8
    turns: int = 8
    """Timed turns per overhead mode (a multiple of every snapshot interval measured: each pays its snapshots)."""
    workers: int = 2
    kills: int = 5
    """Recoveries measured (each on fresh replicas, the modes interleaved) with the default concurrency:
    batched cold and warm, one restore call per session cold, replay log cold; the one-at-a-time baseline once."""
    replay_bounds: tuple[int, ...] = REPLAY_BOUNDS
    """Snapshot intervals of the replay-log protection measured (overhead: each over as many timed turns,
    so it pays one round of snapshots; recovery: the largest, killed just before its snapshots are due)."""


def _say(message: str) -> None:
    print(message, flush=True)


@contextlib.contextmanager
def _replicas(settings: FailoverBenchSettings, count: int = 2) -> Iterator[list[ServerProcess]]:
    os.environ["ENVHUB_SNAPSHOT_KEY"] = KEY
    chosen = SERVER_SETTINGS.get(settings.environment, {})
    extra = [item for key, value in chosen.items() for item in ("--set", f"{settings.environment}.{key}={value}")]
    try:
        with contextlib.ExitStack() as stack:
            yield [
                stack.enter_context(
                    ServerProcess(  # room for every session: the replica left takes the killed one's too
                        settings.environment, settings.workers, max_sessions=2 * settings.sessions + 256, extra=extra
                    )
                )
                for _ in range(count)
            ]
    finally:
        del os.environ["ENVHUB_SNAPSHOT_KEY"]


def _groups(client: EnvhubClient, settings: FailoverBenchSettings) -> dict[str, str]:
    """`sessions` sessions in groups (one create and G - 1 forks per task, the pool spreading the
    groups): session id -> its task."""
    tasks = itertools.cycle(task.task_id for task in client.list_tasks(settings.environment, "train"))
    ids: dict[str, str] = {}
    while len(ids) < settings.sessions:
        task = next(tasks)
        first = client.create_session(settings.environment, task, max_steps=10**6).session_id
        ids |= dict.fromkeys([first, *client.fork(first, settings.group_size - 1)], task)
    return ids


def _sessions(client: EnvhubClient, settings: FailoverBenchSettings) -> list[str]:
    return list(_groups(client, settings))


def _turn(client: EnvhubClient, ids: list[str], action: str) -> tuple[float, list[Any]]:
    started = time.perf_counter()
    results = client.step_many([(session, action) for session in ids])
    return time.perf_counter() - started, results


def _failover_client(targets: list[str], every: int) -> Callable[[], EnvhubClient]:
    return lambda: EnvhubClient(FailoverTransport.over(targets, snapshot_every=every))


def _overhead(settings: FailoverBenchSettings, actions: Iterator[str]) -> dict[str, float]:
    """Mean turn time of each mode over `turns` turns (snapshots come every k turns: a median would
    hide them), on the same replicas and sessions' worth of work."""
    means: dict[str, float] = {}
    with _replicas(settings) as servers:
        targets = [server.target for server in servers]
        makers: list[tuple[str, Callable[[], EnvhubClient], int]] = [
            ("plain pool", lambda: EnvhubPool(targets), settings.turns)
        ]
        makers += [(f"failover k={k}", _failover_client(targets, k), settings.turns) for k in INTERVALS]
        for name, make, turns in makers:
            with make() as client:
                ids = _sessions(client, settings)
                _turn(client, ids, next(actions))  # untimed: caches warm
                times = [_turn(client, ids, next(actions))[0] for _ in range(turns)]
                means[name] = statistics.fmean(times)
                for session in ids:
                    client.close_session(session)
            _say(f"  {name}: turn {means[name]:.3f} s (mean of {turns})")
    return means


def _replay_log_overhead(settings: FailoverBenchSettings, actions: Iterator[str], bound: int) -> dict[str, Any]:
    """The replay log (snapshots at creation and every `bound` steps) against a plain pool on the same
    replicas, one turn of each per round (their order alternating), `bound` rounds or `turns` if more,
    so a shared machine's load weighs on both alike and the replay log pays one round of snapshots (a
    protected turn is timed until the snapshots it made due are taken): mean and median turn of each."""
    with _replicas(settings) as servers:
        targets = [server.target for server in servers]
        transport = FailoverTransport.over(targets, bound)
        with EnvhubPool(targets) as plain, EnvhubClient(transport) as protected:
            clients = {"plain pool": plain, "replay log": protected}
            ids = {name: _sessions(client, settings) for name, client in clients.items()}
            action = next(actions)
            for name, client in clients.items():  # untimed: caches warm
                _turn(client, ids[name], action)
            transport.settle()
            times: dict[str, list[float]] = {name: [] for name in clients}
            for round_ in range(max(bound, settings.turns)):
                action = next(actions)
                for name in list(clients) if round_ % 2 == 0 else list(reversed(clients)):
                    started = time.perf_counter()
                    _turn(clients[name], ids[name], action)
                    transport.settle()
                    times[name].append(time.perf_counter() - started)
            for name, client in clients.items():
                for session in ids[name]:
                    client.close_session(session)
    means = {name: statistics.fmean(seconds) for name, seconds in times.items()}
    medians = {name: statistics.median(seconds) for name, seconds in times.items()}
    plain_s, replay_s = means["plain pool"], means["replay log"]
    _say(
        f"  replay log k={bound} interleaved with a plain pool: {replay_s:.3f} vs {plain_s:.3f} s "
        f"({replay_s / plain_s:.2f}x)"
    )
    return {
        "bound": bound,
        "rounds": len(times["plain pool"]),
        "mean_turn_s": means,
        "median_turn_s": medians,
        "turns_s": times,
        "ratio_mean": replay_s / plain_s,
        "ratio_median": medians["replay log"] / medians["plain pool"],
    }


def _recovery(
    settings: FailoverBenchSettings,
    concurrency: int,
    actions: list[str],
    warm: bool,
    batch_bytes: int,
    every: int = SNAPSHOT_EVERY,
    before: int = 3,
) -> dict[str, Any]:
    """Kill one replica after `before` turns (snapshots every `every` steps); the next turn's time from
    the kill, and whether every result equals the undisturbed twin's. `warm`: the twins play on the
    replica left, whose workers so hold every task (as in a fleet that served them before); else on a
    third server, so the replica left loads each of the killed one's tasks at its first restore."""
    with _replicas(settings, 2 if warm else 3) as started:
        servers = started[:2]
        targets = [s.target for s in servers]
        transport = FailoverTransport.over(targets, every, concurrency=concurrency, batch_bytes=batch_bytes)
        with EnvhubClient(transport) as client, EnvhubClient(started[-1].target) as twins:
            task_of = _groups(client, settings)
            ids = list(task_of)
            replica = {t.target: name for name, t in transport.pool.replicas.items()}[servers[0].target]
            on_killed = sum(session.startswith(replica + ".") for session in ids)
            # an undisturbed twin per task, stepped alike
            twin = {
                task: twins.create_session(settings.environment, task, max_steps=10**6).session_id
                for task in set(task_of.values())
            }
            for action in actions[:before]:
                _turn(client, ids, action)
                twins.step_many([(session, action) for session in twin.values()])
            transport.settle()  # the background snapshots of the last turn are in
            held = max(len(session.replay) for session in map(transport.tracked, ids) if session is not None)
            servers[0].process.kill()
            killed_at = time.perf_counter()
            results = client.step_many([(session, actions[before]) for session in ids])
            done = time.perf_counter()
            move = transport.last_move
            assert move is not None and move.replica == replica, "the killed replica's sessions moved"
            expected = dict(
                zip(twin, twins.step_many([(session, actions[before]) for session in twin.values()]), strict=True)
            )
            equal = all(result == expected[task_of[session]] for session, result in zip(ids, results, strict=True))
            for session in [*ids, *twin.values()]:
                (client if session in task_of else twins).close_session(session)
    phases = {
        "found_failed_s": move.started - killed_at,
        "restores_s": move.rebuilt.restore_s,
        "replay_s": move.rebuilt.replay_s,
        "step_sent_again_s": done - move.ended,
    }
    _say(
        f"  concurrency {concurrency}, {'batched' if batch_bytes else 'one restore call each'}, "
        f"{'warm' if warm else 'cold'}: {on_killed} sessions on the killed replica, all "
        f"{len(ids)} stepping again {done - killed_at:.2f} s after the kill (results equal: {equal}; "
        + ", ".join(f"{name} {seconds:.2f}" for name, seconds in phases.items())
        + ")"
    )
    return {
        "concurrency": concurrency,
        "batch_bytes": batch_bytes,
        "warm": warm,
        "snapshot_every": every,
        "steps_to_replay": held,
        "sessions_on_killed_replica": on_killed,
        "stepping_again_s": done - killed_at,
        "phases_s": phases,
        "recoveries": transport.recoveries,
        "results_equal_undisturbed": equal,
    }


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Recoveries of one mode, each on fresh replicas: each one, and the median and range of the time
    to step again."""
    seconds = [run["stepping_again_s"] for run in runs]
    return {
        "concurrency": runs[0]["concurrency"],
        "batch_bytes": runs[0]["batch_bytes"],
        "warm": runs[0]["warm"],
        "snapshot_every": runs[0]["snapshot_every"],
        "steps_to_replay": max(run["steps_to_replay"] for run in runs),
        "kills": len(runs),
        "sessions_on_killed_replica": min(run["sessions_on_killed_replica"] for run in runs),
        "stepping_again_s": statistics.median(seconds),
        "stepping_again_min_s": min(seconds),
        "stepping_again_max_s": max(seconds),
        "phases_median_s": {
            name: statistics.median(run["phases_s"][name] for run in runs) for name in runs[0]["phases_s"]
        },
        "results_equal_undisturbed": all(run["results_equal_undisturbed"] for run in runs),
        "runs": runs,
    }


def _modes(settings: FailoverBenchSettings, actions: list[str]) -> dict[str, dict[str, Any]]:
    """Every recovery mode, its kills interleaved (batched cold, one call each cold, batched warm, then
    again), so a shared machine's load drifting over the run weighs on every mode alike; the
    one-at-a-time baseline once, at the end."""
    bound = max(settings.replay_bounds)
    modes = {
        "recovery": (moves.CONCURRENCY, False, moves.BATCH_BYTES, SNAPSHOT_EVERY, 3),
        "recovery_unbatched": (moves.CONCURRENCY, False, 0, SNAPSHOT_EVERY, 3),
        "recovery_warm": (moves.CONCURRENCY, True, moves.BATCH_BYTES, SNAPSHOT_EVERY, 3),
        # the replay log at its longest: killed when its sessions are one step short of new snapshots
        "recovery_replay_log": (moves.CONCURRENCY, False, moves.BATCH_BYTES, bound, bound - 1),
    }
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    for _ in range(settings.kills):
        for mode, (concurrency, warm, batch_bytes, every, before) in modes.items():
            runs[mode].append(_recovery(settings, concurrency, actions, warm, batch_bytes, every, before))
    runs["recovery_serial"] = [_recovery(settings, 1, actions, False, 0)]
    return {mode: _summary(kills) for mode, kills in runs.items()}


def _restores_alone(settings: FailoverBenchSettings, repeats: int = 3) -> dict[str, float]:
    """Half the sessions' snapshots restored on one replica whose workers hold their tasks (warm) with
    nothing else running: in RestoreSnapshotBatch calls, and one RestoreSnapshot call each (both with
    the default concurrency), alternated `repeats` times; the median seconds of each."""
    modes = {"batched": moves.BATCH_BYTES, "one call each": 0}
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    with _replicas(settings, 1) as [server], EnvhubClient(server.target) as client:
        ids = _sessions(client, dataclasses.replace(settings, sessions=settings.sessions // 2))
        snapshots = [client.snapshot(session) for session in ids]
        for _ in range(repeats):
            for mode, batch_bytes in modes.items():
                started = time.perf_counter()
                starts = moves.restore_all(client.transport.send, snapshots, moves.CONCURRENCY, batch_bytes)
                times[mode].append(time.perf_counter() - started)
                for start in starts:
                    assert not isinstance(start, Exception), f"a restore failed: {start}"
                    client.close_session(start.session_id)
    medians = {mode: statistics.median(seconds) for mode, seconds in times.items()}
    _say("  restores alone, " + ", ".join(f"{mode} {seconds:.2f} s" for mode, seconds in medians.items()))
    return medians


def run_failover_bench(settings: FailoverBenchSettings) -> dict[str, Any]:
    """Run the failover profile; write and return its results."""
    profile = PROFILES[settings.environment]
    cycle = itertools.cycle(profile.actions)
    _say(f"{settings.environment}: {settings.sessions} sessions over 2 replicas, overhead of failover")
    overhead = _overhead(settings, cycle)
    replay_log = [_replay_log_overhead(settings, cycle, bound) for bound in settings.replay_bounds]
    actions = [next(cycle) for _ in range(max(settings.replay_bounds) + 1)]
    _say(f"{settings.environment}: recovery of the sessions of a killed replica")
    modes = _modes(settings, actions)
    parallel, unbatched, serial = modes["recovery"], modes["recovery_unbatched"], modes["recovery_serial"]
    alone = _restores_alone(settings)
    result = {
        "environment": settings.environment,
        "settings": SERVER_SETTINGS.get(settings.environment, {}),
        "sessions": settings.sessions,
        "group_size": settings.group_size,
        "workers": settings.workers,
        "cpu_count": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0],
        "overhead_turn_s": overhead,
        "replay_log_overhead": replay_log,
        "snapshot_every_default": SNAPSHOT_EVERY,
        **modes,
        "restores_alone_s": alone,
        "target_s": TARGET_S,
        "speedup": serial["stepping_again_s"] / parallel["stepping_again_s"],
        "batched_speedup": unbatched["stepping_again_s"] / parallel["stepping_again_s"],
    }
    _write(result, Path(settings.out))
    return result


def _write(result: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "envhub-failover-recovery.json").write_text(json.dumps(result, indent=2) + "\n")
    plain = result["overhead_turn_s"]["plain pool"]
    parallel, warm, serial = result["recovery"], result["recovery_warm"], result["recovery_serial"]
    unbatched, replay = result["recovery_unbatched"], result["recovery_replay_log"]
    modes = (
        (f"batched restores (concurrency {parallel['concurrency']}), cold", parallel),
        (f"batched restores (concurrency {warm['concurrency']}), warm", warm),
        (f"one restore call per session (concurrency {unbatched['concurrency']}), cold", unbatched),
        (f"replay log (snapshot every {replay['snapshot_every']} steps), cold", replay),
        ("one at a time (baseline), cold", serial),
    )
    lines = [
        f"# envhub bench --profile failover: {result['environment']}",
        "",
        f"{result['sessions']} sessions ({result['sessions'] // result['group_size']} tasks x G = "
        f"{result['group_size']}) over 2 replicas of {result['workers']} workers, settings "
        f"{result['settings'] or 'default'}, on {result['cpu_count']} cores shared with other work (load "
        f"average 1 min at the end: {result['load_average_1m']:.1f}). Every turn is one `step_many` of every session.",
        "",
        "| turn while nothing fails (mean of the timed turns) | seconds | vs plain pool |",
        "|---|---|---|",
    ]
    for name, seconds in result["overhead_turn_s"].items():
        lines.append(f"| {name} | {seconds:.3f} | {seconds / plain:.2f}x |")
    lines += [
        "",
        "The replay log (snapshots only at creation and every k steps; a killed replica's sessions restored "
        "from them and their steps since replayed) against a plain pool on the same replicas, one turn of each "
        "per round, their order alternating (a protected turn timed until the snapshots it made due are taken):",
        "",
        "| replay log k | rounds | plain pool turn: mean / median | replay log turn: mean / median | ratio of means "
        "| ratio of medians |",
        "|---|---|---|---|---|---|",
        *(
            f"| {row['bound']} | {row['rounds']} | {row['mean_turn_s']['plain pool']:.3f} / "
            f"{row['median_turn_s']['plain pool']:.3f} s | {row['mean_turn_s']['replay log']:.3f} / "
            f"{row['median_turn_s']['replay log']:.3f} s | {row['ratio_mean']:.2f}x | "
            f"{row['ratio_median']:.2f}x |"
            for row in result["replay_log_overhead"]
        ),
        "",
        f"One replica SIGKILLed after 3 turns (snapshot every {result['snapshot_every_default']} steps; the replay "
        f"log: after {replay['snapshot_every'] - 1} turns, {replay['steps_to_replay']} steps to replay at most): "
        "the next turn, from the kill until every session has its step's result. Cold: the replica left had not "
        "held the killed one's tasks, so its first restore of each loads that game; warm: its workers held every "
        "task already (as in a fleet that served them before). Each result is checked against an undisturbed twin:",
        "",
        "| recovery | kills | sessions on the killed replica | all stepping again after: median (min-max) | "
        "found failed | restores | replay | step sent again | results equal an undisturbed run |",
        "|---|---|---|---|---|---|---|---|---|",
        *(
            f"| {name} | {run['kills']} | {run['sessions_on_killed_replica']} | {run['stepping_again_s']:.2f} s "
            f"({run['stepping_again_min_s']:.2f}-{run['stepping_again_max_s']:.2f}) | "
            + " | ".join(f"{seconds:.2f} s" for seconds in run["phases_median_s"].values())
            + f" | {run['results_equal_undisturbed']} |"
            for name, run in modes
        ),
        "",
        "Every kill, seconds until all sessions stepped again: "
        + "; ".join(
            f"{name}: " + ", ".join(f"{kill['stepping_again_s']:.2f}" for kill in run["runs"]) for name, run in modes
        )
        + ".",
        "",
        "Phases (medians): found failed = from the kill until the failed batch and one probe said the replica is "
        "gone; restores = every held snapshot restored on the replica left; replay = the steps since the "
        "snapshots, in batched rounds; step sent again = the turn's step of every moved session, and the answers.",
        "",
        f"Batched recovery (cold) takes {1 / result['batched_speedup']:.2f}x the time of one restore call per "
        f"session and {1 / result['speedup']:.2f}x the one-at-a-time baseline's; "
        f"target: every session stepping again within {result['target_s']:.0f} s of the kill with 512 on the "
        f"killed replica ({parallel['sessions_on_killed_replica']} here; "
        f"{'met' if parallel['stepping_again_max_s'] <= result['target_s'] else 'NOT met'} in every cold kill).",
        "",
        f"Restores alone ({result['sessions'] // 2} snapshots onto one replica holding their tasks, nothing else "
        "running, median of 3, alternated): "
        + ", ".join(f"{mode} {seconds:.2f} s" for mode, seconds in result["restores_alone_s"].items())
        + ".",
        "",
    ]
    (out / "envhub-failover-recovery.md").write_text("\n".join(lines))
    _say("\n".join(lines))
