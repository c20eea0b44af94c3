"""BranchOPD as a plugin: the `branch` rollout strategy (worker side, driver step, `branch` config section,
what it needs of the config, its plot panels) and the PBR trajectory hook, registered here; nothing
outside `trainer/branching` names them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING

from trainer.branching.diagnostics import BRANCH_DIAGNOSTICS
from trainer.branching.rules import annotate_constraints, make_rules
from trainer.branching.select import ForkConfig
from trainer.branching.step import branch_step
from trainer.branching.strategy import BranchStrategy
from trainer.objectives.registry import get_objective
from trainer.rollout.strategies import RolloutParts, Strategy, TrajectoryHook, register_hook, register_strategy

if TYPE_CHECKING:
    from trainer.config import TrainerConfig


def branch_needs(config: TrainerConfig) -> Mapping[str, bool]:
    """What BranchOPD needs of the rest of the config: remedy -> met."""
    fork = fork_config(config)
    return {
        "rollout.snapshots: true (forks restore the session at their turn)": config.rollout.snapshots,
        f"rollout.top_logprobs: {fork.top_logprobs} (fork entropy)": config.rollout.top_logprobs >= fork.top_logprobs,
        "rollout.group_size: 1 (one main trajectory per task)": config.rollout.group_size == 1,
        "an objective with a teacher (fork disagreement), e.g. branchopd": get_objective(
            config.objective.name
        ).needs_teacher,
        "divopd.enabled: false (the asynchronous producers play main trajectories only)": not config.divopd.enabled,
    }


BRANCH = Strategy(
    "branch",
    lambda parts: BranchStrategy(parts, fork_config(parts.config)),
    step=branch_step,
    section="branch",
    settings=ForkConfig,
    needs=branch_needs,
    plotted=BRANCH_DIAGNOSTICS,
)
"""BranchOPD's main trajectory per task plus continuations from its forks (`branch`: ForkConfig)."""


def fork_config(config: TrainerConfig) -> ForkConfig:
    """The `branch` section of `config` as a `ForkConfig` (paper defaults for what it leaves out)."""
    fork: ForkConfig = BRANCH.settings_of(config)
    return fork


def pbr_hook(parts: RolloutParts) -> TrajectoryHook | None:
    """PBR detection (`pbr.rules`) on every supervised turn a rollout worker plays; None when PBR is off."""
    names: Sequence[str] = parts.config.pbr.rules
    return partial(annotate_constraints, rules=make_rules(names, parts.tokenizer)) if names else None


register_strategy(BRANCH)
register_hook("pbr", pbr_hook)
