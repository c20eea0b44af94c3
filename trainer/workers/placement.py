"""Which GPUs each role gets: a Ray placement group and one slot (bundle, GPU share) per worker.

`plan_placement` is pure (tested without Ray); `RayExecutor.reserve` turns the plan's bundles into a
placement group and `RayExecutor.spawn(slot, ...)` schedules each actor into its bundle with its
`num_gpus`, so Ray sets the actor's `CUDA_VISIBLE_DEVICES` and the actor uses `cuda:0` inside.

* `learner_gpus: 0`: no placement group, no GPU requested (CPU runs, tests).
* `colocated`: one bundle of 1 GPU per learner rank; rollout worker `i` lives in bundle `i % N`, the
  teacher in the last bundle; every actor of the busiest bundle fits, each asks an equal share
  (verl's `1 / max_colocate_count`). vLLM sleeps while the learner updates (docs/gpu.md).
* `split`: a bundle per learner rank (1 GPU), per rollout engine (`rollout_gpus`) and for the
  teacher (`teacher_gpus`); each actor asks its whole bundle.

`gpu_loads` counts the vLLM engines and learner ranks that share each GPU, for the config-load check that
their memory fits (`TrainerConfig._check_gpu_memory`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol


class PlacementSettings(Protocol):
    """The fields of the `placement` section used here (`trainer.config.PlacementConfig`, which the config's GPU
    checks pass in: this module does not import the config)."""

    @property
    def mode(self) -> str: ...
    @property
    def learner_gpus(self) -> int: ...
    @property
    def rollout_gpus(self) -> int: ...
    @property
    def teacher_gpus(self) -> int: ...


@dataclass(frozen=True)
class Slot:
    """Where one actor goes: its bundle in the placement group (None: no group) and its GPU share."""

    bundle: int | None = None
    num_gpus: float = 0.0


@dataclass(frozen=True)
class PlacementPlan:
    """The placement group's bundles and a slot per worker."""

    bundles: list[dict[str, float]]
    learner: list[Slot]
    rollout: list[Slot]
    teacher: Slot | None


def plan_placement(config: PlacementSettings, rollout_workers: int, teacher: bool) -> PlacementPlan:
    """The bundles and slots for `rollout_workers` rollout workers, `learner_gpus` learner ranks and
    (when `teacher`) one teacher."""
    if rollout_workers < 1:
        raise ValueError("at least one rollout worker is needed")
    ranks = config.learner_gpus
    if ranks == 0:
        return PlacementPlan([], [Slot()], [Slot()] * rollout_workers, Slot() if teacher else None)
    if config.mode == "colocated":
        rollout_bundles = [i % ranks for i in range(rollout_workers)]
        teacher_bundle = ranks - 1
        occupants = [1 + rollout_bundles.count(b) + (teacher and b == teacher_bundle) for b in range(ranks)]
        share = math.floor(10_000 / max(occupants)) / 10_000  # Ray counts GPU fractions in 1e-4 units
        return PlacementPlan(
            [{"GPU": 1.0} for _ in range(ranks)],
            [Slot(b, share) for b in range(ranks)],
            [Slot(b, share) for b in rollout_bundles],
            Slot(teacher_bundle, share) if teacher else None,
        )
    bundles = [{"GPU": 1.0} for _ in range(ranks)]
    bundles += [{"GPU": float(config.rollout_gpus)} for _ in range(rollout_workers)]
    learner = [Slot(b, 1.0) for b in range(ranks)]
    rollout = [Slot(ranks + i, float(config.rollout_gpus)) for i in range(rollout_workers)]
    teacher_slot = None
    if teacher:
        bundles.append({"GPU": float(config.teacher_gpus)})
        teacher_slot = Slot(len(bundles) - 1, float(config.teacher_gpus))
    return PlacementPlan(bundles, learner, rollout, teacher_slot)


def gpu_loads(plan: PlacementPlan) -> list[tuple[int, int]]:
    """(vLLM engines, learner ranks) on each GPU of `plan`: per bundle (every GPU of a tensor-parallel
    bundle holds a shard of its engine); without a placement group, everything shares the one visible GPU."""
    engines = [*plan.rollout, *([plan.teacher] if plan.teacher else [])]
    if not plan.bundles:
        return [(len(engines), len(plan.learner))]
    return [
        (sum(s.bundle == b for s in engines), sum(s.bundle == b for s in plan.learner))
        for b in range(len(plan.bundles))
    ]
