"""The ScienceWorld task catalog: 30 tasks and their train/dev/test variations.

The variation lists come from the jar (`getVariationsTrain/Dev/Test`) and are shipped
as `catalog.json`, so listing tasks needs no JVM. `python -m
envhub.envs.scienceworld.catalog` regenerates the file; a test checks it against the jar.
"""

from __future__ import annotations

import json
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
    """TaskSpecs per split, ordered by task then variation; `nondeterministic` holds task names."""
    specs: dict[str, list[TaskSpec]] = {split: [] for split in SPLITS}
    for task in load_catalog()["tasks"]:
        for split in SPLITS:
            for variation in task[split]:
                specs[split].append(
                    TaskSpec(
                        task_id=f"{task['name']}/{variation}",
                        split=split,
                        index=len(specs[split]),
                        family=task["name"],
                        deterministic=task["name"] not in nondeterministic,
                    )
                )
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
