"""What a worker reports about its environment kind: metadata and the full task set.

The server process never builds an `EnvironmentKind` itself (a kind may start a JVM);
each worker sends a `KindCatalog` once at start-up, and the server answers ListEnvironments,
ListTasks and task selectors from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from envhub.core import errors
from envhub.core.environment import Capabilities, EnvironmentKind, TaskSpec


@dataclass(frozen=True)
class KindCatalog:
    """An environment kind's metadata and tasks, as plain picklable data."""

    name: str
    version: str
    description: str
    capabilities: Capabilities
    default_max_steps: int
    options: Mapping[str, str]
    splits: Mapping[str, tuple[TaskSpec, ...]]
    """Split name -> its tasks in index order (insertion order is the canonical split order)."""
    config: Mapping[str, str] = field(default_factory=dict)
    """The kind's server-side configuration, as text (`EnvironmentKind.config`)."""
    by_id: Mapping[str, TaskSpec] = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, kind: EnvironmentKind) -> KindCatalog:
        """Read everything the server needs from `kind` (called inside the worker)."""
        splits = {split: tuple(kind.tasks(split)) for split in kind.splits()}
        return cls(
            name=kind.name,
            version=kind.version,
            description=kind.description,
            capabilities=kind.capabilities,
            default_max_steps=kind.default_max_steps,
            options=dict(kind.options),
            splits=splits,
            config=dict(kind.config()),
            by_id={spec.task_id: spec for tasks in splits.values() for spec in tasks},
        )

    def task(self, task_id: str) -> TaskSpec:
        """The task with this id; INVALID_ARGUMENT (UNKNOWN_TASK) when there is none."""
        spec = self.by_id.get(task_id)
        if spec is None:
            raise errors.invalid_argument(
                f"{self.name} has no task {task_id!r}; see ListTasks", "UNKNOWN_TASK", task_id=task_id
            )
        return spec

    def at(self, split: str, index: int) -> TaskSpec:
        """The task at `index` of `split`; INVALID_ARGUMENT when either is out of range."""
        tasks = self.splits.get(split)
        if tasks is None:
            known = ", ".join(self.splits)
            raise errors.invalid_argument(
                f"{self.name} has no split {split!r}; splits: {known}", "UNKNOWN_SPLIT", split=split
            )
        if index >= len(tasks):
            raise errors.invalid_argument(
                f"index {index} is out of range for split {split!r} of {self.name} ({len(tasks)} tasks)",
                "INDEX_OUT_OF_RANGE",
                split=split,
                index=str(index),
            )
        return tasks[index]

    def listing(self, split: str) -> tuple[TaskSpec, ...]:
        """Tasks of one split, or of every split when `split` is empty."""
        if split:
            if split not in self.splits:
                raise errors.invalid_argument(f"{self.name} has no split {split!r}", "UNKNOWN_SPLIT", split=split)
            return self.splits[split]
        return tuple(spec for tasks in self.splits.values() for spec in tasks)
