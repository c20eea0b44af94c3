"""The ScienceWorld task catalog: 30 tasks and their train/dev/test variations, plus the DivOPD paper's task-type
split.

The variation lists come from the jar (`getVariationsTrain/Dev/Test`) and are shipped
as `catalog.json`, so listing tasks needs no JVM. `python -m
envhub.envs.scienceworld.catalog` regenerates the file; a test checks it against the jar.

The type split (DivOPD Table 6: "Training and evaluation use disjoint task types. Within each type, we retain the
first half of the official variation IDs before applying a fixed shuffle") is the split set `type-train` (17
training types) / `type-heldout` (13 held-out types): a task type is in exactly one of them. Each keeps the first
half (rounded down) of its type's variation ids 0..N-1 as the jar numbers them, and each split is shuffled once
with `random.Random(TYPE_SPLIT_SEED)`. A task is the same game under every split that lists it (`boil/3` is in
`train` and in `type-train`).
"""

from __future__ import annotations

import json
import random
import sys
from functools import cache
from pathlib import Path
from typing import Any

from scienceworld.constants import TASKS
from scienceworld.utils import infer_task

from envhub.core.environment import TaskSpec
from envhub.envs.scienceworld.jvm import Jvm

CATALOG_PATH = Path(__file__).with_name("catalog.json")
SPLITS: tuple[str, ...] = ("train", "dev", "test")
"""The jar's own variation splits."""
TRAINING_TYPES: tuple[str, ...] = (
    "boil",
    "melt",
    "change-the-state-of-matter-of",
    "use-thermometer",
    "measure-melting-point-known-substance",
    "power-component",
    "test-conductivity",
    "find-living-thing",
    "find-plant",
    "grow-plant",
    "chemistry-mix",
    "chemistry-mix-paint-secondary-color",
    "lifespan-shortest-lived",
    "identify-life-stages-2",
    "inclined-plane-determine-angle",
    "inclined-plane-friction-named-surfaces",
    "mendelian-genetics-known-plant",
)
"""DivOPD Table 6's 17 training task types, in the table's order."""
HELD_OUT_TYPES: tuple[str, ...] = (
    "freeze",
    "measure-melting-point-unknown-substance",
    "power-component-renewable-vs-nonrenewable-energy",
    "test-conductivity-of-unknown-substances",
    "find-non-living-thing",
    "find-animal",
    "grow-fruit",
    "chemistry-mix-paint-tertiary-color",
    "lifespan-longest-lived",
    "lifespan-longest-lived-then-shortest-lived",
    "identify-life-stages-1",
    "inclined-plane-friction-unnamed-surfaces",
    "mendelian-genetics-unknown-plant",
)
"""DivOPD Table 6's 13 held-out evaluation task types."""
TYPE_SPLITS: dict[str, tuple[str, ...]] = {"type-train": TRAINING_TYPES, "type-heldout": HELD_OUT_TYPES}
"""The task-type split set: split name -> its task types."""
TYPE_SPLIT_SEED = 0
"""Seed of each type split's fixed shuffle (the paper does not give its seed)."""


def read_from_jar(jvm: Jvm) -> dict[str, Any]:
    """Task names and per-split variation lists, as the jar reports them."""
    simulator = jvm.new_simulator()
    jar_names = set(simulator.getTaskNames())
    tasks = []
    for entry in TASKS:  # the paper's order: 1-1 boil ... 10-2
        name = infer_task(entry["task_name"])
        if name not in jar_names:
            raise RuntimeError(f"task {name!r} of the scienceworld package is not in its jar")
        # The variation getters read only the task name field: no need to load the task.
        getattr(simulator, "taskStr_$eq")(name)
        tasks.append(
            {
                "name": name,
                "paper_id": entry["task_id"],
                "title": f"{entry['topic']}: {entry['task']}",
                "variations": int(simulator.getTaskMaxVariations(name)),
                "train": [int(v) for v in simulator.getVariationsTrain()],
                "dev": [int(v) for v in simulator.getVariationsDev()],
                "test": [int(v) for v in simulator.getVariationsTest()],
            }
        )
    return {"tasks": tasks}


@cache
def load_catalog() -> dict[str, Any]:
    """The shipped catalog."""
    catalog: dict[str, Any] = json.loads(CATALOG_PATH.read_text())
    return catalog


def task_specs(nondeterministic: frozenset[str]) -> dict[str, list[TaskSpec]]:
    """TaskSpecs per split: the jar's splits ordered by task then variation, then the type splits (shuffled);
    `nondeterministic` holds task names."""
    specs: dict[str, list[TaskSpec]] = {split: [] for split in (*SPLITS, *TYPE_SPLITS)}

    def add(split: str, name: str, variation: int) -> None:
        deterministic = name not in nondeterministic
        index = len(specs[split])
        specs[split].append(TaskSpec(f"{name}/{variation}", split, index, name, deterministic=deterministic))

    tasks = {task["name"]: task for task in load_catalog()["tasks"]}
    for task in tasks.values():
        for split in SPLITS:
            for variation in task[split]:
                add(split, task["name"], variation)
    for split, types in TYPE_SPLITS.items():
        chosen = [(name, variation) for name in types for variation in range(tasks[name]["variations"] // 2)]
        random.Random(TYPE_SPLIT_SEED).shuffle(chosen)
        for name, variation in chosen:
            add(split, name, variation)
    return specs


def main() -> None:
    """Regenerate catalog.json from the installed jar."""
    jvm = Jvm()
    try:
        catalog = read_from_jar(jvm)
    finally:
        jvm.close()
    lines = ",\n".join(json.dumps(task) for task in catalog["tasks"])
    CATALOG_PATH.write_text('{"tasks": [\n' + lines + "\n]}\n")
    counts = {split: sum(len(t[split]) for t in catalog["tasks"]) for split in SPLITS}
    print(f"wrote {CATALOG_PATH}: {len(catalog['tasks'])} tasks, {counts}", file=sys.stderr)


if __name__ == "__main__":
    main()
