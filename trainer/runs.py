"""What every training run shares, whichever driver runs it (`trainer.driver`, `trainer.async_driver`):
the environment servers it trains against (local ones started and stopped here), its task order, its
result and the trajectory metrics both drivers log."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from trainer.config import EnvConfig, TrainerConfig
from trainer.rollout import Trajectory
from trainer.rollout.local_server import LocalServer


@dataclass(frozen=True)
class TrainResult:
    """What a run produced."""

    output_dir: Path
    final_step: int
    checkpoint: str | None
    last_metrics: dict[str, float]


def trajectory_metrics(trajectories: Sequence[Trajectory], prefix: str = "rollout") -> dict[str, float]:
    """Success rate, mean turns and dropped share of a set of trajectories."""
    complete = [t for t in trajectories if not t.dropped]
    n = max(len(complete), 1)
    return {
        f"{prefix}/success_rate": sum(t.won for t in complete) / n,
        f"{prefix}/mean_turns": sum(t.num_turns for t in complete) / n,
        f"{prefix}/trajectories": float(len(trajectories)),
        f"{prefix}/dropped_ratio": (len(trajectories) - len(complete)) / max(len(trajectories), 1),
    }


class TaskSampler:
    """Cycles through the training tasks in a seeded shuffled order; each draw gets its own env seed."""

    def __init__(self, task_ids: Sequence[str], seed: int, start_draw: int = 0) -> None:
        if not task_ids:
            raise ValueError("no training tasks: check env.train_split / env.task_ids against the server's task list")
        self.task_ids = list(task_ids)
        self.rng = random.Random(seed)
        self.draw = 0
        self._order: list[str] = []
        for _ in range(start_draw):
            self._next()

    def _next(self) -> tuple[str, int]:
        if not self._order:
            self._order = self.task_ids[:]
            self.rng.shuffle(self._order)
        self.draw += 1
        return self._order.pop(), self.draw

    def sample(self, count: int) -> list[tuple[str, int]]:
        """`count` (task_id, seed) pairs."""
        return [self._next() for _ in range(count)]


class TaskSource(Protocol):
    """Anything that lists a split's task ids (a worker group, the async driver's actors)."""

    def task_ids(self, split: str, families: Sequence[str] = ()) -> list[str]: ...


def training_tasks(env: EnvConfig, workers: TaskSource) -> list[str]:
    """Task ids to train on: the explicit list, else the train split (first `max_tasks`)."""
    ids = list(env.task_ids) or workers.task_ids(env.train_split, env.families)
    return ids[: env.max_tasks] if env.max_tasks else ids


@contextlib.contextmanager
def env_targets(config: TrainerConfig) -> Iterator[list[str]]:
    """Server addresses; starts (and stops) a local server for each "local" entry, reachable from every
    node that may run a rollout actor (`env.local_host`); other targets pass through unchanged."""
    with contextlib.ExitStack() as stack:
        bind, advertise = local_server_host(config)
        targets = [
            stack.enter_context(
                LocalServer(
                    config.env.name,
                    host=bind,
                    advertise=advertise,
                    settings=config.env.server_settings,
                    prepare=tasks_to_prepare(config),
                )
            ).address
            if target == "local"
            else target
            for target in config.env.targets
        ]
        yield targets


def tasks_to_prepare(config: TrainerConfig) -> dict[str, int]:
    """What a local server should make from its start: the training tasks when `env.max_tasks` bounds them,
    and the held-out tasks when the run evaluates (the first N of their splits; none when `env.families`
    picks some tasks of a split)."""
    prepare: dict[str, int] = {}
    if config.env.families:
        return prepare
    if config.env.max_tasks and not config.env.task_ids:
        prepare[config.env.train_split] = config.env.max_tasks
    if config.eval.every:
        for split in config.env.held_out_splits():
            prepare[split] = max(prepare.get(split, 0), config.eval.num_tasks)
    return prepare


def local_server_host(config: TrainerConfig) -> tuple[str, str]:
    """(address "local" servers bind, host they are advertised at): loopback for a single machine; every
    interface and this node's routable address on a Ray cluster (`ray.address`), or `env.local_host`."""
    if config.env.local_host != "auto":
        return "0.0.0.0", config.env.local_host
    if config.ray.enabled and config.ray.address:
        from ray.util import get_node_ip_address

        return "0.0.0.0", get_node_ip_address()
    return "localhost", "localhost"
