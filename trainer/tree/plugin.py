"""Tree rollouts as a plugin: the `tree` rollout strategy (worker side, driver step, `tree` config section,
what it needs of the config, its plot panels), registered here; nothing outside `trainer/tree` names it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from trainer.objectives.registry import get_objective
from trainer.rollout.strategies import Strategy, register_strategy
from trainer.tree.diagnostics import TREE_DIAGNOSTICS
from trainer.tree.select import TreeConfig
from trainer.tree.step import tree_step
from trainer.tree.strategy import TreeStrategy

if TYPE_CHECKING:
    from trainer.config import TrainerConfig


def tree_needs(config: TrainerConfig) -> Mapping[str, bool]:
    """What tree rollouts need of the rest of the config: remedy -> met."""
    tree = tree_config(config)
    return {
        "rollout.snapshots: true (forks restore the state a turn started from)": config.rollout.snapshots,
        f"rollout.top_logprobs: {tree.top_logprobs} (tree.select: entropy)": tree.select != "entropy"
        or config.rollout.top_logprobs >= tree.top_logprobs,
        "a teacher (models.teacher) for tree.select: disagreement": tree.select != "disagreement"
        or bool(config.models.teacher),
        "divopd.enabled: false (the asynchronous producers play root episodes only)": not config.divopd.enabled,
        "prompt.context: history (one learner row per distinct turn)": config.prompt.context == "history",
        "an objective without its own rollout shape (not branchopd)": get_objective(config.objective.name).name
        != "branchopd",
    }


TREE = Strategy(
    "tree",
    lambda parts: TreeStrategy(parts, tree_config(parts.config)),
    step=tree_step,
    section="tree",
    settings=TreeConfig,
    needs=tree_needs,
    plotted=TREE_DIAGNOSTICS,
)
"""Root episodes per task plus continuations from forks of their states (`tree`: TreeConfig)."""


def tree_config(config: TrainerConfig) -> TreeConfig:
    """The `tree` section of `config` as a `TreeConfig` (defaults for what it leaves out)."""
    tree: TreeConfig = TREE.settings_of(config)
    return tree


register_strategy(TREE)
