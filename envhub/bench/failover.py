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
    recovery_only: bool = False
    """Only the kills of the default recovery (batched, cold and warm) and the restores alone: no overhead rows,
    no other recovery mode (the issue's "every kill within 3 s" measured over many kills in less time)."""
    compare_tree: str | None = None
    """Also kill replicas served from this envhub source tree (e.g. `git archive` of an earlier commit), cold and
    warm, their kills interleaved with this tree's, the client moving their sessions once the whole failed batch
    is answered (as before design note 037): a change before and after in one run."""


def _say(message: str) -> None:
    print(message, flush=True)


@contextlib.contextmanager
def _replicas(
    settings: FailoverBenchSettings, count: int = 2, tree: str | None = None
) -> Iterator[list[ServerProcess]]:
    os.environ["ENVHUB_SNAPSHOT_KEY"] = KEY
    chosen = SERVER_SETTINGS.get(settings.environment, {})
    extra = [item for key, value in chosen.items() for item in ("--set", f"{settings.environment}.{key}={value}")]
    try:
        with contextlib.ExitStack() as stack:
            yield [
                stack.enter_context(
                    ServerProcess(  # room for every session: the replica left takes the killed one's too
                        settings.environment,
                        settings.workers,
                        max_sessions=2 * settings.sessions + 256,
                        extra=extra,
                        source_tree=tree,
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
    tree: str | None = None,
    move_early: bool = True,
) -> dict[str, Any]:
    """Kill one replica after `before` turns (snapshots every `every` steps, each turn's taken before the
    next turn, so every session has the same steps to replay); the next turn's time from the kill, and
    whether every result equals the undisturbed twin's. `warm`: the twins play on the replica left, whose
    workers so hold every task (as in a fleet that served them before); else on a third server, so the
    replica left loads each of the killed one's tasks at its first restore. `tree`: the replicas served
    from that source tree. `move_early`: the client moves the killed replica's sessions once its share of the
    batch failed (else once the whole batch is answered, as before design note 037)."""
    with _replicas(settings, 2 if warm else 3, tree) as started:
        servers = started[:2]
        targets = [s.target for s in servers]
        transport = FailoverTransport.over(
            targets, every, concurrency=concurrency, batch_bytes=batch_bytes, move_early=move_early
        )
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
                transport.settle()  # the background snapshots this turn made due are in
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
        f"{'warm' if warm else 'cold'}{f' ({tree})' if tree else ''}: {on_killed} sessions on the killed replica, all "
        f"{len(ids)} stepping again {done - killed_at:.2f} s after the kill (results equal: {equal}; "
        + ", ".join(f"{name} {seconds:.2f}" for name, seconds in phases.items())
        + ")"
    )
    return {
        "concurrency": concurrency,
        "batch_bytes": batch_bytes,
        "warm": warm,
        "tree": tree,
        "move_early": move_early,
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
        "tree": runs[0]["tree"],
        "move_early": runs[0].get("move_early", True),
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


@dataclass(frozen=True)
class _Mode:
    """How one recovery mode's kills are run (see `_recovery`)."""

    warm: bool = False
    batch_bytes: int = moves.BATCH_BYTES
    every: int = SNAPSHOT_EVERY
    before: int = 3
    tree: str | None = None
    move_early: bool = True


def _modes(settings: FailoverBenchSettings, actions: list[str]) -> dict[str, dict[str, Any]]:
    """Every recovery mode, its kills interleaved (batched cold, batched warm, one call each cold, replay log
    cold, then again), so a shared machine's load drifting over the run weighs on every mode alike; the
    one-at-a-time baseline once, at the end. With `recovery_only`, batched cold and warm only; with a
    `compare_tree`, those two again on replicas served from it, the client moving sessions as that tree's did
    (once the whole failed batch is answered): the change before and after."""
    bound = max(settings.replay_bounds)
    modes = {"recovery": _Mode(), "recovery_warm": _Mode(warm=True)}
    if not settings.recovery_only:
        modes["recovery_unbatched"] = _Mode(batch_bytes=0)
        # the replay log at its longest: killed when its sessions are one step short of new snapshots
        modes["recovery_replay_log"] = _Mode(every=bound, before=bound - 1)
    if settings.compare_tree:
        modes["recovery_compare"] = _Mode(tree=settings.compare_tree, move_early=False)
        modes["recovery_warm_compare"] = _Mode(warm=True, tree=settings.compare_tree, move_early=False)
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    for _ in range(settings.kills):
        for name, mode in modes.items():
            runs[name].append(
                _recovery(
                    settings,
                    moves.CONCURRENCY,
                    actions,
                    mode.warm,
                    mode.batch_bytes,
                    mode.every,
                    mode.before,
                    mode.tree,
                    mode.move_early,
                )
            )
    if not settings.recovery_only:
        runs["recovery_serial"] = [_recovery(settings, 1, actions, False, 0)]
    return {name: _summary(kills) for name, kills in runs.items()}


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
    overhead: dict[str, float] = {}
    replay_log: list[dict[str, Any]] = []
    if not settings.recovery_only:
        _say(f"{settings.environment}: {settings.sessions} sessions over 2 replicas, overhead of failover")
        overhead = _overhead(settings, cycle)
        replay_log = [_replay_log_overhead(settings, cycle, bound) for bound in settings.replay_bounds]
    actions = [next(cycle) for _ in range(max(settings.replay_bounds) + 1)]
    _say(f"{settings.environment}: recovery of the sessions of a killed replica")
    modes = _modes(settings, actions)
    alone = _restores_alone(settings)
    parallel = modes["recovery"]
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
        "every_kill_within_target": all(
            kill["stepping_again_s"] <= TARGET_S
            for name in ("recovery", "recovery_warm")
            for kill in modes[name]["runs"]
        ),
    }
    if not settings.recovery_only:
        result["speedup"] = modes["recovery_serial"]["stepping_again_s"] / parallel["stepping_again_s"]
        result["batched_speedup"] = modes["recovery_unbatched"]["stepping_again_s"] / parallel["stepping_again_s"]
    _write(result, Path(settings.out))
    return result


def _overhead_lines(result: dict[str, Any]) -> list[str]:
    """The overhead rows: each mode's turn against the plain pool's, and the replay log alternated with it."""
    overhead = result["overhead_turn_s"]
    plain = overhead["plain pool"]
    return [
        "| turn while nothing fails (mean of the timed turns) | seconds | vs plain pool |",
        "|---|---|---|",
        *(
            f"| {name} | {seconds:.3f} | {seconds / plain:.2f}x |"
            for name, seconds in result["overhead_turn_s"].items()
        ),
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
    ]


def _label(name: str, run: dict[str, Any]) -> str:
    """A recovery mode's row name."""
    if name == "recovery_serial":
        return "one at a time (baseline), cold"
    if name == "recovery_replay_log":
        return f"replay log (snapshot every {run['snapshot_every']} steps), cold"
    how = "batched restores" if run["batch_bytes"] else "one restore call per session"
    tree = f", servers from {run['tree']}" if run["tree"] else ""
    late = "" if run.get("move_early", True) else ", moved after the failed batch"
    return f"{how} (concurrency {run['concurrency']}), {'warm' if run['warm'] else 'cold'}{tree}{late}"


def _write(result: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "envhub-failover-recovery.json").write_text(json.dumps(result, indent=2) + "\n")
    modes = [(_label(name, run), run) for name, run in result.items() if name.startswith("recovery")]
    replay = result.get("recovery_replay_log")
    lines = [
        f"# envhub bench --profile failover: {result['environment']}",
        "",
        f"{result['sessions']} sessions ({result['sessions'] // result['group_size']} tasks x G = "
        f"{result['group_size']}) over 2 replicas of {result['workers']} workers, settings "
        f"{result['settings'] or 'default'}, on {result['cpu_count']} cores shared with other work (load "
        f"average 1 min at the end: {result['load_average_1m']:.1f}). Every turn is one `step_many` of every session.",
        "",
        *(_overhead_lines(result) if result["overhead_turn_s"] else []),
        f"One replica SIGKILLed after 3 turns (snapshot every {result['snapshot_every_default']} steps"
        + (
            f"; the replay log: after {replay['snapshot_every'] - 1} turns, {replay['steps_to_replay']} steps to "
            "replay at most"
            if replay
            else ""
        )
        + "): the next turn, from the kill until every session has its step's result. Cold: the replica left had "
        "not held the killed one's tasks, so its first restore of each loads that game; warm: its workers held every "
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
    ]
    if "speedup" in result:
        lines += [
            f"Batched recovery (cold) takes {1 / result['batched_speedup']:.2f}x the time of one restore call per "
            f"session and {1 / result['speedup']:.2f}x the one-at-a-time baseline's.",
            "",
        ]
    lines += [
        f"Target: every session stepping again within {result['target_s']:.0f} s of the kill with 512 on the killed "
        f"replica ({result['recovery']['sessions_on_killed_replica']} here): "
        f"{'met' if result['every_kill_within_target'] else 'NOT met'} in every batched kill, cold and warm, of this "
        "tree.",
        "",
        f"Restores alone ({result['sessions'] // 2} snapshots onto one replica holding their tasks, nothing else "
        "running, median of 3, alternated): "
        + ", ".join(f"{mode} {seconds:.2f} s" for mode, seconds in result["restores_alone_s"].items())
        + ".",
        "",
    ]
    (out / "envhub-failover-recovery.md").write_text("\n".join(lines))
    _say("\n".join(lines))
