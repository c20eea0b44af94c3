"""Speed, snapshot and memory benchmark of the ALFWorld kind, against stock ALFWorld in the same run.

    python -m envhub.bench.alfworld_engine               # writes docs/results/alfworld-bench.{json,md}
    python -m envhub.bench.alfworld_engine --quick       # fewer repetitions and games

* Speed on the largest of the first generated games with whole rooms (every receptacle of
  the floor plan, up to 30, and 30-50 other objects).
  Baseline: ALFWorld's own setup (`PddlEnv` + `AlfredDemangler` + `AlfredInfos`, its own
  library copy, no caches). envhub: the same engine with the `memo` caches and the shared
  library, through `Session`.
* Restore against depth: native restore from plain data alone (what another replica does),
  native restore of a state this process exported (a fork), and reset + verified replay.
* Fork of n copies (one export, n copies) against n restores from plain data.
* Memory: RSS per session with 200 live sessions in one fresh process, and per stock env.
* Experts: success rate and mean episode length of the observed and planner experts.

Medians of repeated timings, since the machine is shared.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import multiprocessing
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import textworld
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
from textworld.envs import PddlEnv

from envhub.bench import RESULTS
from envhub.core.session import Session, SessionState
from envhub.envs.alfworld import memo
from envhub.envs.alfworld.engine import forget_exported_states
from envhub.envs.alfworld.generator.scene import RoomSize
from envhub.envs.alfworld.kind import AlfWorldKind
from envhub.envs.alfworld.taskset import AlfredGame, GeneratedTaskSet

WHOLE_ROOM = RoomSize(min_receptacles=40, max_receptacles=40, min_distractors=30, max_distractors=50)
"""Every receptacle of the floor plan (none has 40) and 30-50 other objects, like ALFWorld's own games."""
DEPTHS = (1, 10, 20, 30)


def timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def median_ms(call: Callable[[], Any], repeat: int) -> float:
    return round(statistics.median(timed(call) for _ in range(repeat)) * 1000, 2)


def rss_mb() -> float:
    """Resident memory of this process in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def stock_env() -> Any:
    """ALFWorld's TextWorld environment as `AlfredTWEnv` builds it (without the batch/gym layer)."""
    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    return AlfredInfos(AlfredDemangler(PddlEnv(infos)))


def wandering(session: Session, depth: int) -> list[str]:
    """`depth` actions that move around without winning."""
    gotos = [a for a in session.admissible_actions() if a.startswith("go to ")]
    return [gotos[i % len(gotos)] if i % 3 else "look" for i in range(depth)]


def receptacles(game: AlfredGame) -> int:
    return int(game.game_json["pddl_problem"].count("(receptacleType "))


def bench_speed(kind: AlfWorldKind, games: Sequence[AlfredGame], repeat: int) -> dict[str, Any]:
    """Reset and step medians: stock ALFWorld without caches vs envhub."""
    rows = []
    for game in games:
        task = kind.task(game.task_id)
        plan_session = Session.start(kind, task, options={"expert": "planner"})
        actions = ["look", "inventory", *plan_session.expert_actions()]
        plan_session.close()
        memo.uninstall()
        env = stock_env()
        load_s = timed(functools.partial(env.load, game.game_json))
        stock_reset = median_ms(env.reset, repeat)
        stock_steps = [timed(functools.partial(env.step, a)) for a in actions]
        env.close()
        memo.install()
        session = Session.start(kind, task)
        session.reset()
        envhub_reset = median_ms(session.reset, repeat)
        envhub_steps = [timed(functools.partial(session.step, a)) for a in actions]
        session.close()
        rows.append(
            {
                "task_id": game.task_id,
                "receptacles": receptacles(game),
                "objects": game.game_json["pddl_problem"].count("(objectType "),
                "stock_load_ms": round(load_s * 1000, 1),
                "stock_reset_ms": stock_reset,
                "stock_step_ms": round(statistics.median(stock_steps) * 1000, 2),
                "envhub_reset_ms": envhub_reset,
                "envhub_step_ms": round(statistics.median(envhub_steps) * 1000, 2),
            }
        )
    summary = {key: round(statistics.median(r[key] for r in rows), 2) for key in rows[0] if key.endswith("_ms")}
    summary["reset_speedup"] = round(summary["stock_reset_ms"] / summary["envhub_reset_ms"], 1)
    summary["step_speedup"] = round(summary["stock_step_ms"] / summary["envhub_step_ms"], 1)
    return {"games": rows, "median": summary}


def restore_and_close(kind: AlfWorldKind, state: SessionState, *, cold: bool = False) -> None:
    """One restore; `cold` drops this process's exported copies first (a restore on another replica)."""
    if cold:
        forget_exported_states()
    Session.restore(kind, state).close()


def bench_restore(kind: AlfWorldKind, game: AlfredGame, repeat: int) -> dict[str, Any]:
    """Restore latency against episode depth: native (plain data / copy) vs reset + verified replay."""
    rows = []
    for depth in DEPTHS:
        session = Session.start(kind, kind.task(game.task_id))
        for action in wandering(session, depth):
            session.step(action)
        state = session.state()
        replay_state = dataclasses.replace(state, native_state="")
        rebuild_ms = median_ms(functools.partial(restore_and_close, kind, state, cold=True), repeat)
        session.state()  # export again: the copy timing below restores this process's copy
        rows.append(
            {
                "depth": depth,
                "native_bytes": len(state.native_state),
                "native_rebuild_ms": rebuild_ms,
                "native_copy_ms": median_ms(functools.partial(restore_and_close, kind, state), repeat),
                "replay_ms": median_ms(functools.partial(restore_and_close, kind, replay_state), max(3, repeat // 2)),
            }
        )
        session.close()
    deepest = rows[-1]
    return {
        "task_id": game.task_id,
        "rows": rows,
        "replay_over_native_rebuild_at_30": round(deepest["replay_ms"] / deepest["native_rebuild_ms"], 1),
        "native_rebuild_growth_1_to_30": round(deepest["native_rebuild_ms"] / rows[0]["native_rebuild_ms"], 2),
    }


def bench_fork(kind: AlfWorldKind, game: AlfredGame, copies: int, repeat: int) -> dict[str, Any]:
    """n copies of a live session (Session.fork) against n restores from plain data."""
    session = Session.start(kind, kind.task(game.task_id))
    for action in wandering(session, 10):
        session.step(action)
    state = session.state()

    def fork() -> None:
        for child in [session.fork() for _ in range(copies)]:
            child.close()

    def restores() -> None:
        for _ in range(copies):
            restore_and_close(kind, state, cold=True)

    result = {"copies": copies, "fork_ms": median_ms(fork, repeat), "restores_ms": median_ms(restores, repeat)}
    result["restores_over_fork"] = round(result["restores_ms"] / result["fork_ms"], 1)
    session.close()
    return result


def _memory_child(kind_of_run: str, count: int, cache_dir: str, queue: Any) -> None:
    """In a fresh process: RSS growth for `count` envhub sessions, or `count` stock environments."""
    taskset = GeneratedTaskSet(cache_dir=Path(cache_dir))
    games = [taskset.game("train", i) for i in range(min(count, 20))]
    if kind_of_run == "envhub":
        kind = AlfWorldKind(taskset=taskset)
        Session.start(kind, kind.task(games[0].task_id)).close()  # library and imports loaded
        before = rss_mb()
        sessions = [Session.start(kind, kind.task(games[i % len(games)].task_id)) for i in range(count)]
        for session in sessions:
            session.step("look")
        queue.put({"sessions": count, "rss_before_mb": round(before, 1), "per_session_mb": (rss_mb() - before) / count})
        return
    stock_env().close()
    before = rss_mb()
    envs = []
    for i in range(count):
        env = stock_env()
        env.load(games[i % len(games)].game_json)
        env.reset()
        env.step("look")
        envs.append(env)
    queue.put({"envs": count, "rss_before_mb": round(before, 1), "per_env_mb": (rss_mb() - before) / count})


def bench_memory(sessions: int, stock_envs: int, cache_dir: Path) -> dict[str, Any]:
    """RSS per session (envhub, `sessions` live) and per stock env, each in a fresh process."""
    context = multiprocessing.get_context("spawn")
    out = {}
    for name, count in (("envhub", sessions), ("stock", stock_envs)):
        queue = context.Queue()
        child = context.Process(target=_memory_child, args=(name, count, str(cache_dir), queue))
        child.start()
        out[name] = queue.get(timeout=1800)
        child.join()
    return out


def bench_experts(kind: AlfWorldKind, room: str, split: str, games: int) -> dict[str, Any]:
    """Success rate and mean length of the observed and planner experts per task type."""
    table: dict[str, dict[str, list[tuple[bool, int]]]] = {}
    for index in range(games):
        task = kind.tasks(split)[index]
        for expert in ("observed", "planner"):
            session = Session.start(kind, task, options={"expert": expert})
            won = False
            while not session.done:
                hint = session.expert_actions()
                if not hint:
                    break
                won = session.step(hint[0]).result.won
            table.setdefault(task.family, {}).setdefault(expert, []).append((won, session.step_index))
            session.close()
    summary = {}
    for family, by_expert in sorted(table.items()):
        summary[family] = {
            expert: {
                "games": len(runs),
                "success": round(sum(w for w, _ in runs) / len(runs), 3),
                "mean_steps_when_won": round(statistics.mean([n for w, n in runs if w] or [0]), 1),
            }
            for expert, runs in by_expert.items()
        }
    return {"room": room, "split": split, "games": games, "by_task_type": summary}


def markdown(result: dict[str, Any]) -> str:
    """The results as a markdown page."""
    speed, restore, fork, memory = result["speed"], result["restore"], result["fork"], result["memory"]
    lines = [
        "# ALFWorld benchmark",
        "",
        f"Generated by `python -m envhub.bench.alfworld_engine` ({result['when']}); "
        "medians on a shared 2-core machine.",
        "",
        "## Reset and step (generated games with whole rooms: every receptacle of the floor plan)",
        "",
        "| game | receptacles | objects | stock reset ms | envhub reset ms | stock step ms | envhub step ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in speed["games"]:
        lines.append(
            f"| {r['task_id']} | {r['receptacles']} | {r['objects']} | {r['stock_reset_ms']} | {r['envhub_reset_ms']} "
            f"| {r['stock_step_ms']} | {r['envhub_step_ms']} |"
        )
    m = speed["median"]
    lines += [
        "",
        f"Median: reset {m['stock_reset_ms']} -> {m['envhub_reset_ms']} ms ({m['reset_speedup']}x), "
        f"step {m['stock_step_ms']} -> {m['envhub_step_ms']} ms ({m['step_speedup']}x).",
        "",
        f"## Restore against depth ({restore['task_id']})",
        "",
        "| depth | native state bytes | native restore, plain data (ms) | native restore, copy (ms) "
        "| reset + replay (ms) |",
        "|---|---|---|---|---|",
    ]
    for r in restore["rows"]:
        lines.append(
            f"| {r['depth']} | {r['native_bytes']} | {r['native_rebuild_ms']} | {r['native_copy_ms']} "
            f"| {r['replay_ms']} |"
        )
    lines += [
        "",
        f"At depth 30, reset + replay takes {restore['replay_over_native_rebuild_at_30']}x the native restore; "
        f"native restore at depth 30 / depth 1: {restore['native_rebuild_growth_1_to_30']}.",
        "",
        "## Fork",
        "",
        f"{fork['copies']} copies of a live session: {fork['fork_ms']} ms; {fork['copies']} restores from plain "
        f"data: {fork['restores_ms']} ms ({fork['restores_over_fork']}x).",
        "",
        "## Memory",
        "",
        f"envhub: {memory['envhub']['per_session_mb']:.2f} MB RSS per session with "
        f"{memory['envhub']['sessions']} live sessions in one process (one shared fast-downward library). "
        f"Stock ALFWorld: {memory['stock']['per_env_mb']:.2f} MB per environment (each also copies the 34 MB "
        "libdownward.so to /tmp).",
    ]
    for experts in result.get("experts", []):
        lines += [
            "",
            f"## Experts ({experts['room']} rooms, {experts['split']}, first {experts['games']} games, 50-step limit)",
            "",
            "| task type | games | observed success | observed mean steps | planner success | planner mean steps |",
            "|---|---|---|---|---|---|",
        ]
        for family, row in experts["by_task_type"].items():
            o, p = row["observed"], row["planner"]
            lines.append(
                f"| {family} | {o['games']} | {o['success']} | {o['mean_steps_when_won']} | {p['success']} "
                f"| {p['mean_steps_when_won']} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, games and sessions")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for alfworld-bench.{json,md}")
    parser.add_argument("--expert-games", type=int, default=140, help="games per expert run (0 skips it)")
    parser.add_argument("--expert-split", default="valid_seen")
    args = parser.parse_args(argv)
    repeat = 3 if args.quick else 7
    whole_room = GeneratedTaskSet(room=WHOLE_ROOM)
    whole_room_kind = AlfWorldKind(taskset=whole_room)
    scanned = [whole_room.game("train", i) for i in range(6 if args.quick else 16)]
    games = sorted(scanned, key=receptacles, reverse=True)[: 2 if args.quick else 4]
    result: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M")}
    result["speed"] = bench_speed(whole_room_kind, games, repeat)
    print(json.dumps(result["speed"]["median"]))
    result["restore"] = bench_restore(whole_room_kind, games[0], repeat)
    print(json.dumps(result["restore"]))
    result["fork"] = bench_fork(whole_room_kind, games[0], 8, repeat)
    print(json.dumps(result["fork"]))
    default = GeneratedTaskSet()
    result["memory"] = bench_memory(50 if args.quick else 200, 5 if args.quick else 10, default.cache_dir.parent)
    print(json.dumps(result["memory"]))
    if args.expert_games:
        result["experts"] = [
            bench_experts(
                AlfWorldKind(taskset=default), "default (5-10 receptacles)", args.expert_split, args.expert_games
            ),
            bench_experts(whole_room_kind, "whole", args.expert_split, max(1, args.expert_games // 4)),
        ]
        print(json.dumps(result["experts"]))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "alfworld-bench.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "alfworld-bench.md").write_text(markdown(result))
    print(f"wrote {args.out / 'alfworld-bench.md'}")


if __name__ == "__main__":
    main()
