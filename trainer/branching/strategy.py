"""The `branch` rollout strategy (BranchOPD): `run` plays one main trajectory per task, `branch` its forks.

Between the two the driver step has the teacher score the mains, because fork selection needs the
teacher's log-probs (the disagreement score D_t); see `trainer.branching.step`. Registered by
`trainer.branching.plugin`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from trainer.branching.rollout import BranchRollout
from trainer.branching.select import ForkConfig
from trainer.rollout.group import GroupRollout, RolloutStats, SamplingSettings, TurnCallback
from trainer.rollout.strategies import RolloutParts
from trainer.rollout.types import Trajectory


class BranchStrategy:
    """Main trajectories (GroupRollout with G = 1) and their branches (BranchRollout) on one worker's server."""

    def __init__(self, parts: RolloutParts, fork: ForkConfig) -> None:
        self.group = GroupRollout(parts.port, parts.backend, parts.tokenizer, parts.renderer, parts.settings)
        force = None
        if fork.force_token:
            force = int(parts.tokenizer.encode(fork.force_token, add_special_tokens=False)[0])
        self.branching = BranchRollout(self.group, fork, force)

    def run(
        self,
        tasks: Sequence[tuple[str, int]],
        sampling: SamplingSettings,
        group_size: int | None = None,
        on_turn: TurnCallback | None = None,
    ) -> tuple[list[Trajectory], RolloutStats]:
        """One main trajectory per task (`group_size` is ignored: BranchOPD's G is 1)."""
        del group_size
        return self.group.run(tasks, sampling, 1, on_turn)

    def branch(
        self, mains: list[Trajectory], sampling: SamplingSettings, select_seed: int
    ) -> tuple[list[Trajectory], RolloutStats]:
        """Continuations from the selected forks of `mains` (which must carry the teacher's log-probs)."""
        return self.branching.run(mains, sampling, random.Random(select_seed))

    def close(self) -> None:
        self.group.close()
