"""`TurnStates`: where each supervised turn of a `TokenBatch` sits among the states of its task group.

States form one tree per group: its root is the group's start state, a turn leads from its parent
state to a new one, and a trajectory ends in its leaf state. A group of G independent episodes is a
root with G chains; a tree rollout (`trainer.tree`) adds forks, and its branches' copies of a shared
prefix lead to the same states as the turns they copy. Anchor states (GiGPO) are identical
observations within a group, tree or not. The tree credits of `trainer.objectives.credit` read these.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.errors import BatchError


@dataclass
class TurnStates:
    """K states of the batch's groups and, per supervised turn u (its `turn_ids` value), where it goes."""

    parent: torch.Tensor
    """(K,) long: the state each state was reached from; -1 for a group's root; parent[s] < s."""
    after: torch.Tensor
    """(U,) long: the state supervised turn u leads to (its parent is the state the turn started from)."""
    leaf: torch.Tensor
    """(T,) long: the state each trajectory ends in."""
    anchor: torch.Tensor
    """(U,) long: anchor-state id of the state turn u started from (same group, same observation)."""
    to_go: torch.Tensor
    """(U,) long: turns that follow turn u in its trajectory (0 for its last turn)."""

    def __post_init__(self) -> None:
        states = self.parent.numel()
        if bool((self.parent >= torch.arange(states, device=self.parent.device)).any()):
            raise BatchError("TurnStates.parent: a state's parent must have a smaller id", field="states")
        for name in ("after", "leaf"):
            value = getattr(self, name)
            if value.numel() and (int(value.min()) < 0 or int(value.max()) >= states):
                raise BatchError(f"TurnStates.{name}: state ids must lie in 0..{states - 1}", field="states")
        if not (self.after.shape == self.anchor.shape == self.to_go.shape):
            raise BatchError("TurnStates: after, anchor and to_go need one entry per supervised turn", field="states")

    @property
    def num_turns(self) -> int:
        """U, the number of supervised turns."""
        return int(self.after.numel())

    def to(self, device: torch.device | str) -> TurnStates:
        return TurnStates(*(t.to(device) for t in (self.parent, self.after, self.leaf, self.anchor, self.to_go)))

    def values(self, rewards: torch.Tensor) -> torch.Tensor:
        """V(s), (K,): the mean outcome of the trajectories whose leaf lies under s (their Monte Carlo value)."""
        r = rewards.to(torch.float64)
        total = torch.zeros(self.parent.numel(), dtype=r.dtype, device=r.device)
        count = torch.zeros_like(total)
        node = self.leaf.clone()
        while bool((live := node >= 0).any()):
            total.index_add_(0, node[live], r[live])
            count.index_add_(0, node[live], torch.ones_like(r[live]))
            node = torch.where(live, self.parent[node.clamp(min=0)], node)
        return total / count.clamp(min=1.0)
