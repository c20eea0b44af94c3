"""Rollout strategies by name: `rollout.strategy` in the config picks one; every rollout worker builds it.

A strategy turns (task id, env seed) pairs into trajectories. It is built from `RolloutParts` (the
worker's environment port, generation backend, tokenizer, prompt renderer, episode settings and the
whole config for strategy-specific sections) and must offer `run` and `close`. Built in: `group`
(`GroupRollout`: G forked sessions per task in lock-step). A new strategy (e.g. BranchOPD's branch
rollout, DivOPD's teacher-recovery rollout) lives in its own module that calls `register_strategy` at
import; list that module in `STRATEGY_MODULES` so every process (config check, Ray workers) imports it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from envhub.client import SessionPort
from trainer.backends.base import GenerationBackend
from trainer.prompts import PromptRenderer
from trainer.rollout.group import GroupRollout, RolloutSettings, RolloutStats, SamplingSettings
from trainer.rollout.types import Trajectory


class RolloutStrategy(Protocol):
    """What a rollout worker runs."""

    def run(
        self, tasks: Sequence[tuple[str, int]], sampling: SamplingSettings, group_size: int | None = None
    ) -> tuple[list[Trajectory], RolloutStats]:
        """Trajectories for each (task id, env seed); `group_size` overrides the settings' G."""
        ...

    def close(self) -> None:
        """Release threads and sessions."""
        ...


@dataclass(frozen=True)
class RolloutParts:
    """Everything a rollout worker holds that a strategy may use."""

    port: SessionPort
    backend: GenerationBackend
    tokenizer: Any
    renderer: PromptRenderer
    settings: RolloutSettings
    config: Any
    """The whole `TrainerConfig` (strategy-specific sections live there)."""


StrategyFactory = Callable[[RolloutParts], RolloutStrategy]

_STRATEGIES: dict[str, StrategyFactory] = {}
STRATEGY_MODULES: list[str] = ["trainer.rollout.recovery", "trainer.branching.strategy"]
"""Modules that register further strategies; imported at the first lookup."""
_modules_loaded = False


def _load_modules() -> None:
    global _modules_loaded
    if _modules_loaded:
        return
    _modules_loaded = True
    for module in STRATEGY_MODULES:
        importlib.import_module(module)


def register_strategy(name: str, factory: StrategyFactory) -> None:
    """Add a strategy; a name registers once."""
    if name in _STRATEGIES:
        raise ValueError(f"rollout strategy {name!r} is already registered")
    _STRATEGIES[name] = factory


def strategy_names() -> tuple[str, ...]:
    """Every registered strategy name, sorted."""
    _load_modules()
    return tuple(sorted(_STRATEGIES))


def make_strategy(name: str, parts: RolloutParts) -> RolloutStrategy:
    """The strategy registered under `name`, built from `parts`."""
    _load_modules()
    if name not in _STRATEGIES:
        raise ValueError(f"unknown rollout strategy {name!r}; registered: {', '.join(strategy_names())}")
    return _STRATEGIES[name](parts)


register_strategy(
    "group", lambda parts: GroupRollout(parts.port, parts.backend, parts.tokenizer, parts.renderer, parts.settings)
)
