"""The batch's `TurnStates` from its trajectories: tree states, anchor states and turns to go of each turn.

A turn's state is `(group, Turn.node)` when the rollout named it (a tree rollout: a branch's copy of a shared
turn names the same node as the original) and a state of its own otherwise; a group's trajectories start
from one root. Anchor states are `(group, observation the turn started from, admissible actions)`.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

import torch

from trainer.objectives.states import TurnStates
from trainer.rollout.types import Trajectory, Turn


@dataclass(frozen=True)
class TurnPlace:
    """Where one turn sits: the state it leads to, its anchor state, the turns after it."""

    after: int
    anchor: int
    to_go: int


class StateIndex:
    """Collects the states of a batch's trajectories, then the `TurnStates` of its supervised turns."""

    def __init__(self) -> None:
        self._states: dict[Hashable, int] = {}
        self._parent: list[int] = []
        self._anchors: dict[Hashable, int] = {}
        self._places: dict[int, TurnPlace] = {}
        self._leaves: list[int] = []

    def _state(self, key: Hashable, parent: int) -> int:
        if key not in self._states:
            self._states[key] = len(self._parent)
            self._parent.append(parent)
        return self._states[key]

    def add(self, index: int, trajectory: Trajectory) -> None:
        """The states of trajectory `index` of the batch (call in batch order)."""
        state = self._state(("root", trajectory.group), -1)
        for k, turn in enumerate(trajectory.turns):
            seen = trajectory.initial_observation if k == 0 else trajectory.turns[k - 1].observation
            anchor_key = (trajectory.group, seen, tuple(turn.admissible))
            anchor = self._anchors.setdefault(anchor_key, len(self._anchors))
            key = ("node", trajectory.group, turn.node) if turn.node is not None else ("turn", index, k)
            state = self._state(key, state)
            self._places[id(turn)] = TurnPlace(state, anchor, len(trajectory.turns) - 1 - k)
        self._leaves.append(state)

    def build(self, supervised: Sequence[Turn]) -> TurnStates:
        """`TurnStates` for the supervised turns in turn-id order (each must belong to an added trajectory)."""
        places = [self._places[id(turn)] for turn in supervised]

        def column(values: Iterable[int]) -> torch.Tensor:
            return torch.tensor(list(values), dtype=torch.long)

        return TurnStates(
            parent=column(self._parent),
            after=column(p.after for p in places),
            leaf=column(self._leaves),
            anchor=column(p.anchor for p in places),
            to_go=column(p.to_go for p in places),
        )
