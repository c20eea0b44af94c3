"""Statistics of a generated task set: the planner expert's solution lengths per task type, room sizes, speed."""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envhub.envs.alfworld.generator.bulk import Made
from envhub.envs.alfworld.generator.splits import task_types
from envhub.envs.alfworld.generator.tasks import TASK_TYPES
from envhub.envs.alfworld.taskset import GeneratedTaskSet

PUBLISHED_NOTE = (
    "ALFWorld publishes no per-type solution lengths of its planner expert: there are none in the alfworld 0.4.2 "
    "package (code, configs, data), and we found none in the ALFWorld paper, so only ours are shown. The planner "
    "sees the whole state, so its plan length follows the task's structure more than the room's size: go, take, "
    "go, put (plus open for closed receptacles; look: go, take, go, use), two more steps (go, clean/heat/cool) for "
    "the state-change tasks, and two round trips for pick two."
)


_DECLARATION = re.compile(r"^\s+[A-Za-z]\S* - (receptacle|object)$", re.MULTILINE)
"""A declared receptacle or object of the problem (goal variables start with "?")."""


def stats_jobs(seed: int, per_type: int) -> list[tuple[str, int]]:
    """The first `per_type` train indices of each task type."""
    order = task_types("train", seed)
    jobs = []
    for task_type in TASK_TYPES:
        indices = [i for i, t in enumerate(order) if t == task_type][:per_type]
        jobs += [("train", i) for i in indices]
    return jobs


def _summary(values: Sequence[int]) -> dict[str, Any]:
    return {
        "n": len(values),
        "min": min(values),
        "median": statistics.median(values),
        "mean": round(statistics.fmean(values), 2),
        "max": max(values),
        "histogram": {str(k): v for k, v in sorted(Counter(values).items())},
    }


def _room_counts(taskset: GeneratedTaskSet, split: str, index: int) -> tuple[int, int]:
    declarations = _DECLARATION.findall(taskset.record(split, index).pddl_problem)
    return declarations.count("receptacle"), declarations.count("object")


def _summary_float(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median": round(statistics.median(ordered), 3),
        "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 3),
        "mean": round(statistics.fmean(ordered), 3),
    }


def collect(made: Sequence[Made], taskset: GeneratedTaskSet, elapsed_s: float, workers: int) -> dict[str, Any]:
    """The statistics as a JSON-ready dict."""
    per_type: dict[str, Any] = {}
    for task_type in TASK_TYPES:
        games = [m for m in made if m.task_type == task_type]
        if not games:
            continue
        rooms = [_room_counts(taskset, m.split, m.index) for m in games]
        floorplans = {taskset.record(m.split, m.index).floorplan for m in games}
        per_type[task_type] = {
            "solution_length": _summary([m.solution_length for m in games]),
            "receptacles": _summary([r for r, _ in rooms]),
            "objects": _summary([o for _, o in rooms]),
            "draws_per_kept_game": round(statistics.fmean(m.attempts for m in games), 3),
            "floorplans": len(floorplans),
        }
    return {
        "taskset_version": taskset.version,
        "games": len(made),
        "generation": {
            "wall_s": round(elapsed_s, 1),
            "workers": workers,
            "worker_wall_s_per_game": round(elapsed_s * workers / max(1, len(made)), 3),
            "cpu_s_per_game": _summary_float([m.cpu_s for m in made]),
        },
        "per_type": per_type,
        "all_types_solution_length": _summary([m.solution_length for m in made]),
        "published": None,
        "published_note": PUBLISHED_NOTE,
    }


def to_markdown(stats: dict[str, Any]) -> str:
    """A readable table of `collect`'s result."""
    lines = [
        f"# ALFWorld generated task set: statistics ({stats['taskset_version']})",
        "",
        f"{stats['games']} train games, generated and planner-verified in {stats['generation']['wall_s']} s "
        f"with {stats['generation']['workers']} workers on a shared, busy 2-core machine; CPU per game (generate "
        f"+ planner check): median {stats['generation']['cpu_s_per_game']['median']} s, "
        f"p90 {stats['generation']['cpu_s_per_game']['p90']} s.",
        "",
        "| task type | games | planner solution length min / median / mean / max | receptacles (mean) "
        "| objects (mean) | draws per kept game | floor plans |",
        "|---|---|---|---|---|---|---|",
    ]
    for task_type, row in stats["per_type"].items():
        sol = row["solution_length"]
        lines.append(
            f"| {task_type} | {sol['n']} | {sol['min']} / {sol['median']} / {sol['mean']} / {sol['max']} "
            f"| {row['receptacles']['mean']} | {row['objects']['mean']} | {row['draws_per_kept_game']} "
            f"| {row['floorplans']} |"
        )
    lines += ["", "Solution-length histograms (length: games):", ""]
    for task_type, row in stats["per_type"].items():
        histogram = ", ".join(f"{k}: {v}" for k, v in row["solution_length"]["histogram"].items())
        lines.append(f"* {task_type}: {histogram}")
    lines += ["", "## Published numbers", "", stats["published_note"], ""]
    return "\n".join(lines)


def write_stats(
    made: Sequence[Made], taskset: GeneratedTaskSet, elapsed_s: float, workers: int, out: Path
) -> list[Path]:
    """Write alfworld-taskset.json and .md under `out`; returns their paths."""
    stats = collect(made, taskset, elapsed_s, workers)
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "alfworld-taskset.json", out / "alfworld-taskset.md"
    json_path.write_text(json.dumps(stats, indent=2) + "\n")
    md_path.write_text(to_markdown(stats))
    return [json_path, md_path]
