"""Held-out evaluation over one or more splits: each split's tasks, and the per-split and mean metrics.

The papers report ALFWorld in distribution (valid_seen, 140 games) and out of distribution (valid_unseen, 134)
and their mean; `env.eval_splits: [valid_seen, valid_unseen]` evaluates both in one report. With one split the
keys are the plain `eval/*` ones; with several, `eval/<split>/*` for each and `eval/*` their mean.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence

from trainer.config import TrainerConfig
from trainer.rollout import RolloutStats, SamplingSettings, Trajectory
from trainer.runs import TaskSource, trajectory_metrics

Play = Callable[[list[tuple[str, int]], SamplingSettings, int], tuple[list[Trajectory], RolloutStats]]
"""`play(tasks, sampling, episodes per task)`."""
"""Plays one episode of each (task id, env seed) with the policy under evaluation."""


def held_out_tasks(config: TrainerConfig, source: TaskSource) -> dict[str, list[str]]:
    """The first `eval.num_tasks` tasks of every held-out split (`env.eval_splits`, else `env.eval_split`), taken in
    turn from each of `eval.families_in_turn` when it names families."""
    tasks = {}
    for split in config.env.held_out_splits():
        if config.eval.families_in_turn:
            ids = in_turn([source.task_ids(split, (family,)) for family in config.eval.families_in_turn])
        else:
            ids = source.task_ids(split, config.env.families)
        ids = ids[: config.eval.num_tasks]
        if not ids:
            raise ValueError(f"held-out split {split!r} has no tasks on the server; set env.eval_split/eval_splits")
        tasks[split] = ids
    return tasks


def in_turn(columns: Sequence[Sequence[str]]) -> list[str]:
    """The items of `columns` taken in turn: the first of each column, then the second of each, and so on (a column
    that runs out is skipped)."""
    return [column[row] for row in range(max(map(len, columns), default=0)) for column in columns if row < len(column)]


def combine_splits(per_split: Mapping[str, Mapping[str, float]], prefix: str = "eval") -> dict[str, float]:
    """`{prefix}/<name>`: each metric's mean over the splits (each split weighs the same, as the papers' ID/OOD
    mean); with more than one split also `{prefix}/<split>/<name>` per split. `per_split` maps a split to metrics
    named without the prefix (`success_rate`, `mean_turns`, ...)."""
    if not per_split:
        raise ValueError("no held-out split was evaluated")
    names = list(next(iter(per_split.values())))
    out = {f"{prefix}/{name}": statistics.fmean(m[name] for m in per_split.values()) for name in names}
    if len(per_split) > 1:
        out.update({f"{prefix}/{split}/{name}": m[name] for split, m in per_split.items() for name in m})
    return out


def outcome_metrics(trajectories: Sequence[Trajectory], stats: RolloutStats) -> dict[str, float]:
    """Success rate, mean turns, trajectories, dropped share, invalid-turn and matched-turn ratios of one split's
    episodes."""
    metrics = {k.removeprefix("eval/"): v for k, v in trajectory_metrics(trajectories, "eval").items()}
    turns = max(stats.turns, 1)
    return {
        **metrics,
        "invalid_turn_ratio": stats.invalid_turns / turns,
        "matched_turn_ratio": stats.matched_turns / turns,
    }


def play_held_out(
    config: TrainerConfig, play: Play, tasks: Mapping[str, Sequence[str]]
) -> tuple[dict[str, float], list[Trajectory]]:
    """The periodic held-out protocol (sync and async drivers alike): `eval.samples` episodes per task of every split
    at `eval.temperature` with fixed seeds (`seed`, so successive evaluations compare); the `eval/*` metrics
    (`combine_splits`: the success is the mean over every episode) and every episode played."""
    sampling = SamplingSettings(
        max_new_tokens=config.rollout.max_new_tokens, temperature=config.eval.temperature, seed=config.seed
    )
    played: list[Trajectory] = []
    per_split = {}
    for split, task_ids in tasks.items():
        trajectories, stats = play([(task_id, config.seed) for task_id in task_ids], sampling, config.eval.samples)
        played += trajectories
        per_split[split] = outcome_metrics(trajectories, stats)
    return combine_splits(per_split), played
