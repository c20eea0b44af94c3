"""Rollout strategies as plugins: `rollout.strategy` picks one, and it brings everything it needs.

A strategy registers one `Strategy` record (`register_strategy`, at import of its module):

* `build`: how every rollout worker makes it from `RolloutParts` (the worker's environment port,
  generation backend, tokenizer, prompt renderer, episode settings and the whole config); it must
  offer `run` and `close`. Further worker-side phases are its own methods, which the driver reaches
  with `RolloutWorker.play(TheStrategy.method, ...)`.
* `step`: the synchronous driver's training step with it (rollouts, teacher scores, metrics);
  None keeps the plain step (`trainer.driver.plain_step`).
* `section` / `settings`: the top-level config section it owns and the frozen dataclass of its
  settings (the section's keys are its fields; unknown keys and bad values are refused at load); the
  config accepts the section because a strategy owns it, and `python -m trainer.config` lists it.
* `needs`: what it requires of the rest of the config when selected, checked when the config loads
  (remedy -> whether it is met), so a misconfiguration fails at start with the fix in the message.
* `plotted`: metric keys its runs log that `training.png` should show.

Rollout workers also apply every registered trajectory hook (`register_hook`) to what they play:
a factory `RolloutParts -> hook or None` (None: off for this config), e.g. PBR's constraint detection.

Built in: `group` (`GroupRollout`: G forked sessions per task in lock-step). The modules of the other
built-in plugins are listed in `PLUGIN_MODULES` so every process (config check, Ray workers) imports
them before the first lookup; nothing outside a plugin's own package names it.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from envhub.client import SessionPort
from trainer.backends.base import GenerationBackend
from trainer.prompts import PromptRenderer
from trainer.rollout.group import GroupRollout, RolloutSettings, RolloutStats, SamplingSettings, TurnCallback
from trainer.rollout.types import Trajectory


class RolloutStrategy(Protocol):
    """What a rollout worker runs."""

    def run(
        self,
        tasks: Sequence[tuple[str, int]],
        sampling: SamplingSettings,
        group_size: int | None = None,
        on_turn: TurnCallback | None = None,
    ) -> tuple[list[Trajectory], RolloutStats]:
        """Trajectories for each (task id, env seed); `group_size` overrides the settings' G; `on_turn` hears
        after every lock-step turn how far the episodes got."""
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
TrajectoryHook = Callable[[list[Trajectory]], None]
"""Runs in the rollout worker on every batch of trajectories it plays (annotates them in place)."""
HookFactory = Callable[[RolloutParts], TrajectoryHook | None]


class DriverStep(Protocol):
    """One synchronous training step's rollouts: (trajectories to train on, metrics). `config` is the
    `TrainerConfig` and `workers` the `trainer.workers.WorkerGroup` (typed as such by each step; this
    module imports neither, so the config can import the registry)."""

    def __call__(
        self, config: Any, workers: Any, tasks: Sequence[tuple[str, int]], sampling: SamplingSettings, step: int
    ) -> tuple[list[Trajectory], dict[str, float]]: ...


def _no_needs(config: Any) -> Mapping[str, bool]:
    del config
    return {}


@dataclass(frozen=True)
class Strategy:
    """One registered rollout strategy and everything it brings (see the module docstring)."""

    name: str
    """Registry key, as written in `rollout.strategy`."""
    build: StrategyFactory
    """Builds the strategy in each rollout worker."""
    step: DriverStep | None = None
    """The synchronous driver's step with this strategy; None: the plain step."""
    section: str | None = None
    """Top-level config section the strategy owns (read with `config.section(name)`)."""
    settings: type[Any] | None = None
    """Frozen dataclass of the section (fields = keys, paper defaults); its `__post_init__` checks values."""
    needs: Callable[[Any], Mapping[str, bool]] = _no_needs
    """What it needs of the config when selected: remedy -> met."""
    plotted: tuple[str, ...] = ()
    """Metric keys its runs log that the training plot shows."""

    def __post_init__(self) -> None:
        if (self.section is None) != (self.settings is None):
            raise ValueError(f"rollout strategy {self.name!r}: give both a section and its settings, or neither")

    def missing(self, config: Any) -> list[str]:
        """The remedies of `needs` that `config` does not meet."""
        return [need for need, met in self.needs(config).items() if not met]

    def settings_from(self, values: Mapping[str, Any]) -> Any:
        """The settings of the section `values`; ValueError naming unknown keys and the valid ones."""
        if self.settings is None:
            raise ValueError(f"rollout strategy {self.name!r} has no config section")
        valid = [f.name for f in dataclasses.fields(self.settings)]
        unknown = sorted(set(values) - set(valid))
        if unknown:
            raise ValueError(f"unknown {self.section} setting(s) {', '.join(unknown)}; valid: {', '.join(valid)}")
        return self.settings(**values)

    def settings_of(self, config: Any) -> Any:
        """This strategy's settings in `config` (defaults when the section is absent)."""
        return self.settings_from(config.section(self.section or ""))


_STRATEGIES: dict[str, Strategy] = {}
_HOOKS: dict[str, HookFactory] = {}
PLUGIN_MODULES: list[str] = ["trainer.rollout.recovery", "trainer.branching.plugin", "trainer.tree.plugin"]
"""Modules that register further strategies and hooks; imported at the first lookup."""


def _load_modules() -> None:
    for module in PLUGIN_MODULES:  # a module imported before costs one sys.modules lookup
        importlib.import_module(module)


def register_strategy(strategy: Strategy) -> None:
    """Add a strategy; a name registers once, and a config section has one owner."""
    if strategy.name in _STRATEGIES:
        raise ValueError(f"rollout strategy {strategy.name!r} is already registered")
    owners = {s.section: s.name for s in _STRATEGIES.values() if s.section}
    if strategy.section in owners:
        raise ValueError(
            f"config section {strategy.section!r} already belongs to strategy {owners[strategy.section]!r}"
        )
    _STRATEGIES[strategy.name] = strategy


def register_hook(name: str, factory: HookFactory) -> None:
    """Add a trajectory hook factory (`RolloutParts -> hook or None`); a name registers once."""
    if name in _HOOKS:
        raise ValueError(f"trajectory hook {name!r} is already registered")
    _HOOKS[name] = factory


def strategy_names() -> tuple[str, ...]:
    """Every registered strategy name, sorted."""
    _load_modules()
    return tuple(sorted(_STRATEGIES))


def get_strategy(name: str) -> Strategy:
    """The strategy registered under `name`; ValueError listing the registered ones if none."""
    _load_modules()
    if name not in _STRATEGIES:
        raise ValueError(f"unknown rollout strategy {name!r}; registered: {', '.join(strategy_names())}")
    return _STRATEGIES[name]


def sections() -> dict[str, Strategy]:
    """Config section name -> the strategy that owns it."""
    _load_modules()
    return {s.section: s for s in _STRATEGIES.values() if s.section}


def make_strategy(name: str, parts: RolloutParts) -> RolloutStrategy:
    """The strategy registered under `name`, built from `parts`."""
    return get_strategy(name).build(parts)


def make_hooks(parts: RolloutParts) -> list[TrajectoryHook]:
    """The registered trajectory hooks that `parts.config` turns on, in registration order."""
    _load_modules()
    return [hook for factory in _HOOKS.values() if (hook := factory(parts)) is not None]


register_strategy(
    Strategy(
        "group",
        lambda parts: GroupRollout(parts.port, parts.backend, parts.tokenizer, parts.renderer, parts.settings),
    )
)
