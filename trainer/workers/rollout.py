"""The rollout role: an envhub client and a generation backend that play task groups."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

import torch

from trainer.config import TrainerConfig
from trainer.rollout import RolloutStats, SamplingSettings, Trajectory
from trainer.rollout.group import TurnCallback
from trainer.rollout.strategies import RolloutParts, make_hooks, make_strategy
from trainer.workers.executor import method_name
from trainer.workers.factory import make_env_port, make_generation_backend, make_renderer, rollout_settings

P = ParamSpec("P")
R = TypeVar("R")


Played = tuple[list[Trajectory], RolloutStats]


class RolloutWorker:
    """Holds an envhub client and a generation backend; plays tasks with the rollout strategy
    named by `rollout.strategy` (`trainer.rollout.strategies`), and applies the registered trajectory
    hooks to everything it plays."""

    def __init__(self, config: TrainerConfig, target: str, policy_path: str | None = None) -> None:
        from trainer.models.loading import load_tokenizer

        path = policy_path or config.models.student
        self.port = make_env_port(config, target)
        self.tokenizer = load_tokenizer(path)
        self.backend = make_generation_backend(config, path)
        parts = RolloutParts(
            self.port, self.backend, self.tokenizer, make_renderer(config), rollout_settings(config), config
        )
        self.rollout = make_strategy(config.rollout.strategy, parts)
        held_out = dataclasses.replace(parts, settings=rollout_settings(config, held_out=True))
        same = config.rollout.strategy == "group" and held_out.settings == parts.settings
        self.plain = self.rollout if same else make_strategy("group", held_out)
        """The `group` strategy for held-out play: no takeover, no branching, env.max_turns (as `trainer eval`)."""
        self.hooks = make_hooks(parts)

    def ready(self) -> bool:
        """Answers once the worker (and its engine) is built."""
        return True

    def run(
        self,
        tasks: Sequence[tuple[str, int]],
        sampling: SamplingSettings,
        group_size: int | None = None,
        on_turn: TurnCallback | None = None,
    ) -> Played:
        """`group_size` trajectories of each (task id, env seed), and the counters of the call (`on_turn`:
        progress after every lock-step turn, in this process only)."""
        return self._hooked(self.rollout.run(tasks, sampling, group_size, on_turn))

    def run_held_out(self, tasks: Sequence[tuple[str, int]], sampling: SamplingSettings, samples: int = 1) -> Played:
        """`samples` episodes of each (task id, env seed) with the plain `group` strategy, whatever `rollout.strategy`
        trains with: a held-out evaluation measures the policy alone (no teacher takeover, no branches)."""
        return self._hooked(self.plain.run(tasks, sampling, samples))

    def play(self, phase: Callable[Concatenate[Any, P], Played], *args: P.args, **kwargs: P.kwargs) -> Played:
        """A phase of this worker's strategy beyond `run`, by reference to the strategy's own method (e.g.
        continuations of trajectories the teacher scored); TypeError when the configured strategy has none."""
        method_name(type(self.rollout), phase)
        return self._hooked(phase(self.rollout, *args, **kwargs))

    def _hooked(self, played: Played) -> Played:
        for hook in self.hooks:
            hook(played[0])
        return played

    def update_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Load the learner's newest weights into the generation backend."""
        self.backend.update_weights(weights)

    def on_engine(self, method: Callable[Concatenate[Any, P], R], *args: P.args, **kwargs: P.kwargs) -> R:
        """`method` of this worker's generation backend, run where the backend lives: an engine's own API
        (vLLM's weight transfer, which `WeightSync` drives); TypeError when the backend has no such method."""
        method_name(type(self.backend), method)
        return method(self.backend, *args, **kwargs)

    def sleep(self, level: int) -> None:
        """Free the engine's GPU memory while the learner updates (colocated mode)."""
        self.backend.sleep(level)

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Reallocate what `sleep` freed (`tags`: "weights", "kv_cache"; None: all)."""
        self.backend.wake_up(tags)

    def task_ids(self, split: str, families: Sequence[str] = ()) -> list[str]:
        """Task ids of `split` on this worker's server (only `families` when given)."""
        return self.port.task_ids(split, families)

    def close(self) -> None:
        """Release the strategies' threads and sessions."""
        self.rollout.close()
        if self.plain is not self.rollout:
            self.plain.close()
