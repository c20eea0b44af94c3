"""Split design, mirroring ALFWorld: sizes per task type and the seen/unseen floor-plan partition."""

from __future__ import annotations

import functools
import random

from envhub.core.errors import not_found
from envhub.envs.alfworld.generator.layouts import floor_plan, floor_plan_numbers
from envhub.envs.alfworld.generator.tasks import TASK_TYPES, supports

SPLITS = ("train", "valid_seen", "valid_unseen")
UNSEEN_FLOOR_PLANS = (10, 219, 308, 424)
"""ALFRED's valid_unseen scenes (one kitchen, living room, bedroom, bathroom); never used by train or valid_seen."""
SPLIT_SIZES: dict[str, dict[str, int]] = {
    "train": dict(zip(TASK_TYPES, (790, 308, 650, 459, 533, 813), strict=True)),
    "valid_seen": dict(zip(TASK_TYPES, (35, 13, 27, 16, 25, 24), strict=True)),
    "valid_unseen": dict(zip(TASK_TYPES, (24, 18, 31, 23, 21, 17), strict=True)),
}
"""ALFWorld's game counts per split and task type (3553 / 140 / 134), in `TASK_TYPES` order."""


def check_split(split: str) -> None:
    """Raise NOT_FOUND (UNKNOWN_SPLIT) naming the known splits when `split` is not one."""
    if split not in SPLIT_SIZES:
        raise not_found(f"unknown split {split!r}; known splits: {', '.join(SPLITS)}", "UNKNOWN_SPLIT", split=split)


def split_size(split: str) -> int:
    """Number of games in a split."""
    check_split(split)
    return sum(SPLIT_SIZES[split].values())


def check_index(split: str, index: int, size: int) -> None:
    """Raise NOT_FOUND (TASK_NOT_FOUND) when `index` is outside a split of `size` games."""
    if not 0 <= index < size:
        raise not_found(
            f"index {index} is outside split {split!r} (0..{size - 1})", "TASK_NOT_FOUND", split=split, index=str(index)
        )


def floor_plans(split: str) -> tuple[int, ...]:
    """Floor plans a split draws rooms from: the unseen ones for valid_unseen, all others otherwise."""
    check_split(split)
    if split == "valid_unseen":
        return UNSEEN_FLOOR_PLANS
    return tuple(n for n in floor_plan_numbers() if n not in UNSEEN_FLOOR_PLANS)


@functools.cache
def task_types(split: str, seed: int) -> tuple[str, ...]:
    """The task type of every index of a split: ALFWorld's counts, in a seeded order."""
    order = [t for t in TASK_TYPES for _ in range(SPLIT_SIZES[split][t])]
    random.Random(f"envhub-alfworld/{seed}/{split}/order").shuffle(order)
    return tuple(order)


@functools.cache
def rooms_for(split: str, task_type: str) -> tuple[int, ...]:
    """Floor plans of the split where the task type can be played."""
    return tuple(n for n in floor_plans(split) if supports(floor_plan(n), task_type))
