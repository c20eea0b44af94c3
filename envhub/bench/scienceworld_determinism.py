"""Determinism study: which ScienceWorld tasks replay exactly.

For every task, a few variations and two action sequences each (the gold path and a
walk of random admissible actions, both played live through `ScienceWorldEnvironment`)
are replayed with the raw step in: a fresh simulator of the same JVM, two simulators of
one JVM stepped in turn (interleaved), and fresh JVMs. A task is deterministic when every
observation of every run equals the live run's. The same replays are done the upstream
way (load + raw step, no re-seeding) as the baseline.

    python -m envhub.bench.scienceworld_determinism   # writes docs/results/scienceworld-determinism.json

The committed result's nondeterministic tasks are `NONDETERMINISTIC_TASKS` in envhub/envs/scienceworld/kind.py,
which decides `TaskSpec.deterministic` (a test checks the two agree).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envhub.bench import RESULTS
from envhub.core.environment import TaskSpec
from envhub.core.session import observation_digest
from envhub.envs.scienceworld import catalog
from envhub.envs.scienceworld.environment import FIRST_ACTION, ScienceWorldEnvironment
from envhub.envs.scienceworld.expert import GoldPaths
from envhub.envs.scienceworld.jvm import DEFAULT_JAVA_OPTS, DEFAULT_SIMULATORS, Jvm, heap_options

DETERMINISM_PATH = RESULTS / "scienceworld-determinism.json"
UPSTREAM_JAVA_OPTS: tuple[str, ...] = ()
"""The scienceworld package launches its JVM without options."""
Trace = list[str]
"""Hex digests of the observations of one run (reset observation first)."""


@dataclass(frozen=True)
class Case:
    """One action sequence to replay on one task variation."""

    task: str
    variation: int
    source: str
    actions: tuple[str, ...]
    live: tuple[str, ...]
    won: bool

    @property
    def spec(self) -> TaskSpec:
        return TaskSpec(task_id=f"{self.task}/{self.variation}", split="", index=0, family=self.task)


def _digests(texts: Sequence[str]) -> Trace:
    return [observation_digest(text).hex() for text in texts]


Chooser = Callable[[int], str | None]
"""Picks the action of a step (None stops)."""


def play_live(env: ScienceWorldEnvironment, spec: TaskSpec, source: str, choose: Chooser, limit: int) -> Case:
    """Play up to `limit` actions picked by `choose(step)` with `env.step`."""
    texts = [env.reset(spec, seed=0, options={}).text]
    actions: list[str] = []
    won = False
    for step in range(limit):
        action = choose(step)
        if action is None:
            break
        result = env.step(action)
        actions.append(action)
        texts.append(result.observation.text)
        won = result.won
        if result.terminated:
            break
    name, _, variation = spec.task_id.rpartition("/")
    return Case(name, int(variation), source, tuple(actions), tuple(_digests(texts)), won)


def _follow(path: Sequence[str]) -> Chooser:
    return lambda step: path[step] if step < len(path) else None


def _walk(env: ScienceWorldEnvironment, rng: random.Random) -> Chooser:
    return lambda step: rng.choice(sorted(env.admissible_actions()))


def make_cases(jvm: Jvm, tasks: Sequence[tuple[str, int]], gold_steps: int, random_steps: int) -> list[Case]:
    """Play the gold path and a random admissible walk of every (task, variation)."""
    gold_paths = GoldPaths(jvm)
    env = ScienceWorldEnvironment(jvm, gold_paths)
    cases = []
    for name, variation in tasks:
        spec = TaskSpec(task_id=f"{name}/{variation}", split="", index=0, family=name)
        path = gold_paths.get(name, variation, "")
        cases.append(play_live(env, spec, "gold", _follow(path), gold_steps))
        cases.append(play_live(env, spec, "random", _walk(env, random.Random(spec.task_id)), random_steps))
        print(f"  played {name}/{variation}: gold {len(cases[-2].actions)} steps, won={cases[-2].won}", file=sys.stderr)
    env.close()
    return cases


def envhub_run(jvm: Jvm, case: Case) -> Trace:
    """Replay `case` the envhub way (re-seeded, own id counter) in a fresh simulator."""
    env = ScienceWorldEnvironment(jvm, GoldPaths(jvm))
    texts = [env.reset(case.spec, seed=0, options={}).text, *env.replay(case.actions)]
    env.close()
    return _digests(texts)


def envhub_interleaved(jvm: Jvm, case: Case) -> tuple[Trace, Trace]:
    """Replay `case` in two simulators of one JVM, one step each in turn."""
    envs = [ScienceWorldEnvironment(jvm, GoldPaths(jvm)) for _ in range(2)]
    traces: list[Trace] = [[env.reset(case.spec, seed=0, options={}).text] for env in envs]
    for action in case.actions:
        for env, trace in zip(envs, traces, strict=True):
            trace.extend(env.replay([action]))
    for env in envs:
        env.close()
    return _digests(traces[0]), _digests(traces[1])


def upstream_run(jvm: Jvm, case: Case) -> Trace:
    """Replay `case` as the scienceworld package does (load, raw steps, no re-seeding)."""
    simulator = jvm.new_simulator()
    simulator.load(case.task, case.variation, "", False)
    texts = [str(simulator.step(FIRST_ACTION))] + [str(simulator.step(action)) for action in case.actions]
    jvm.release(simulator)
    return _digests(texts)


def upstream_interleaved(jvm: Jvm, case: Case) -> tuple[Trace, Trace]:
    """The upstream way, two simulators of one JVM stepped in turn."""
    simulators = [jvm.new_simulator() for _ in range(2)]
    for simulator in simulators:
        simulator.load(case.task, case.variation, "", False)
    traces: list[Trace] = [[str(simulator.step(FIRST_ACTION))] for simulator in simulators]
    for action in case.actions:
        for simulator, trace in zip(simulators, traces, strict=True):
            trace.append(str(simulator.step(action)))
    for simulator in simulators:
        jvm.release(simulator)
    return _digests(traces[0]), _digests(traces[1])


def first_difference(reference: Trace, other: Trace) -> int | None:
    """Index of the first differing observation (None when equal)."""
    for index, (a, b) in enumerate(zip(reference, other, strict=False)):
        if a != b:
            return index
    return None if len(reference) == len(other) else min(len(reference), len(other))


def replay_everywhere(
    cases: Sequence[Case],
    jvms: int,
    java_opts: Sequence[str],
    run: Callable[[Jvm, Case], Trace],
    interleaved: Callable[[Jvm, Case], tuple[Trace, Trace]],
    reference: Callable[[Case], Trace] | None,
) -> list[dict[str, Any]]:
    """Run every case in `jvms` fresh JVMs (interleaved in the first) and compare the traces."""
    traces: list[dict[str, Trace]] = [{} for _ in cases]
    for jvm_index in range(jvms):
        jvm = Jvm(java_opts)
        try:
            for case, runs in zip(cases, traces, strict=True):
                runs[f"jvm{jvm_index}"] = run(jvm, case)
                if jvm_index == 0:
                    runs["interleaved_a"], runs["interleaved_b"] = interleaved(jvm, case)
        finally:
            jvm.close()
    rows = []
    for case, runs in zip(cases, traces, strict=True):
        base = reference(case) if reference else runs["jvm0"]
        diverged = {name: step for name, trace in runs.items() if (step := first_difference(base, trace)) is not None}
        rows.append(
            {
                "task": case.task,
                "variation": case.variation,
                "source": case.source,
                "steps": len(case.actions),
                "diverged_at": diverged,
            }
        )
    return rows


def summarize(cases: Sequence[Case], envhub: list[dict[str, Any]], upstream: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-task verdicts."""
    tasks: dict[str, Any] = {}
    for case, ours, theirs in zip(cases, envhub, upstream, strict=True):
        row = tasks.setdefault(
            case.task, {"deterministic": True, "upstream_deterministic": True, "gold_won": [], "cases": []}
        )
        row["deterministic"] &= not ours["diverged_at"]
        row["upstream_deterministic"] &= not theirs["diverged_at"]
        if case.source == "gold":
            row["gold_won"].append(case.won)
        row["cases"].append({**ours, "upstream_diverged_at": theirs["diverged_at"]})
    return tasks


def render_table(result: dict[str, Any]) -> str:
    """A markdown table of a study result (for the docs)."""
    lines = [
        "| task | envhub replay exact | upstream replay exact | gold path wins (envhub) | first divergence (envhub) |",
        "|------|:---:|:---:|:---:|---|",
    ]
    for name, row in result["tasks"].items():
        diverged = [
            f"{case['variation']} {case['source']} @{min(case['diverged_at'].values())}"
            for case in row["cases"]
            if case["diverged_at"]
        ]
        wins = f"{sum(row['gold_won'])}/{len(row['gold_won'])}"
        ours, theirs = ("yes" if row[key] else "**no**" for key in ("deterministic", "upstream_deterministic"))
        lines.append(f"| {name} | {ours} | {theirs} | {wins} | {'; '.join(diverged) or '-'} |")
    summary = result["summary"]
    lines.append("")
    lines.append(
        f"Exact on {summary['deterministic']}/{summary['tasks']} tasks with envhub, "
        f"{summary['upstream_deterministic']}/{summary['tasks']} the upstream way."
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the study and write the JSON result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variations", type=int, default=2, help="variations per task (first train, first test, ...)")
    parser.add_argument("--gold-steps", type=int, default=150)
    parser.add_argument("--random-steps", type=int, default=15)
    parser.add_argument("--jvms", type=int, default=2, help="fresh JVMs to replay in (besides the one played in)")
    parser.add_argument("--tasks", nargs="*", help="task names (default: all 30)")
    parser.add_argument("--java-opt", action="append", help="JVM option (repeat); default: the kind's")
    parser.add_argument("--out", type=Path, default=DETERMINISM_PATH)
    parser.add_argument("--table", action="store_true", help="print the markdown table of --out and exit")
    args = parser.parse_args(argv)
    if args.table:
        print(render_table(json.loads(args.out.read_text())))
        return
    java_opts = heap_options(args.java_opt or DEFAULT_JAVA_OPTS, DEFAULT_SIMULATORS)
    started = time.monotonic()
    selected: list[tuple[str, int]] = []
    for task in catalog.load_catalog()["tasks"]:
        if args.tasks and task["name"] not in args.tasks:
            continue
        pool = [task["train"][0], task["test"][0], *task["train"][1:], *task["dev"]]
        selected.extend((task["name"], variation) for variation in pool[: args.variations])
    play_jvm = Jvm(java_opts)
    try:
        cases = make_cases(play_jvm, selected, args.gold_steps, args.random_steps)
    finally:
        play_jvm.close()
    print(f"played {len(cases)} cases in {time.monotonic() - started:.0f} s; replaying", file=sys.stderr)
    live = {id(case): list(case.live) for case in cases}
    envhub = replay_everywhere(cases, args.jvms, java_opts, envhub_run, envhub_interleaved, lambda c: live[id(c)])
    print(f"replayed the envhub way at {time.monotonic() - started:.0f} s", file=sys.stderr)
    upstream = replay_everywhere(cases, args.jvms, UPSTREAM_JAVA_OPTS, upstream_run, upstream_interleaved, None)
    tasks = summarize(cases, envhub, upstream)
    result = {
        "study": {
            "java_opts": list(java_opts),
            "upstream_java_opts": list(UPSTREAM_JAVA_OPTS),
            "variations_per_task": args.variations,
            "gold_steps": args.gold_steps,
            "random_steps": args.random_steps,
            "jvms": args.jvms,
            "seconds": round(time.monotonic() - started),
        },
        "summary": {
            "tasks": len(tasks),
            "deterministic": sum(row["deterministic"] for row in tasks.values()),
            "upstream_deterministic": sum(row["upstream_deterministic"] for row in tasks.values()),
            "nondeterministic": sorted(name for name, row in tasks.items() if not row["deterministic"]),
        },
        "tasks": tasks,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1), file=sys.stderr)


if __name__ == "__main__":
    main()
