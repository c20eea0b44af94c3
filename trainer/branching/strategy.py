"""The `branch` rollout strategy (BranchOPD): `run` plays one main trajectory per task, `branch` its forks.

Between the two the driver has the teacher score the mains, because fork selection needs the
teacher's log-probs (the disagreement score D_t); see `trainer.branching.step`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from trainer.branching.rollout import BranchRollout
from trainer.rollout.group import GroupRollout, RolloutStats, SamplingSettings
from trainer.rollout.strategies import RolloutParts, register_strategy
from trainer.rollout.types import Trajectory


class BranchStrategy:
    """Main trajectories (GroupRollout with G = 1) and their branches (BranchRollout) on one worker's server."""

    def __init__(self, parts: RolloutParts) -> None:
        self.group = GroupRollout(parts.port, parts.backend, parts.tokenizer, parts.renderer, parts.settings)
        fork = parts.config.fork_config()
        force = None
        if fork.force_token:
            force = int(parts.tokenizer.encode(fork.force_token, add_special_tokens=False)[0])
        self.branching = BranchRollout(self.group, fork, force)

    def run(
        self, tasks: Sequence[tuple[str, int]], sampling: SamplingSettings, group_size: int | None = None
    ) -> tuple[list[Trajectory], RolloutStats]:
        """One main trajectory per task (`group_size` is ignored: BranchOPD's G is 1)."""
        del group_size
        return self.group.run(tasks, sampling, 1)

    def branch(
        self, mains: list[Trajectory], sampling: SamplingSettings, select_seed: int
    ) -> tuple[list[Trajectory], RolloutStats]:
        """Continuations from the selected forks of `mains` (which must carry the teacher's log-probs)."""
        return self.branching.run(mains, sampling, random.Random(select_seed))

    def close(self) -> None:
        self.group.close()


register_strategy("branch", BranchStrategy)
