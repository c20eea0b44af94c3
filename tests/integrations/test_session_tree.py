"""`envhub.client.tree` against a real ALFWorld server: continuations start in the forked state, and a replayed
plan from a fork ends as the uninterrupted episode did (ForkSession over the wire)."""

from __future__ import annotations

import pytest

from envhub.client import EnvView, Sessions
from envhub.client.tree import Branch, fork_state, play_tree

from .conftest import EXPERT_TASK


def test_fork_state_puts_every_session_in_the_recorded_state(alfworld_target: str, expert_plan: list[str]) -> None:
    port = Sessions.connect(alfworld_target, "alfworld")
    try:
        start = port.start(EXPERT_TASK)
        after = port.step(start.session_id, expert_plan[0])
        snapshot = port.snapshot(start.session_id)
        port.step(start.session_id, expert_plan[1])
        forked = fork_state(port, snapshot, 3)
        assert len({v.session_id for v in forked.views}) == 3 and forked.seconds > 0
        assert [v.text for v in forked.views] == [after.text] * 3
        for view in [start, *forked.views]:
            port.end(view.session_id)
    finally:
        port.close()


def test_play_tree_replays_the_plan_from_every_fork(alfworld_target: str, expert_plan: list[str]) -> None:
    def act(view: EnvView) -> str:
        return expert_plan[view.step_index]

    def fork_at(branch: Branch) -> list[int]:
        return [branch.fork_turn + 1] if branch.fork_turn + 1 < len(branch.actions) else []

    port = Sessions.connect(alfworld_target, "alfworld")
    try:
        tree = play_tree(port, EXPERT_TASK, act, fork_at, continuations=2, depth=2, max_steps=len(expert_plan))
    finally:
        port.close()
    root = tree.branches[0]
    assert root.won and root.actions == expert_plan
    assert len(tree.branches) == 1 + 2 + 4 and tree.forks == 6 and tree.fork_seconds > 0
    for branch in tree.branches[1:]:
        assert branch.parent is not None
        parent = tree.branches[branch.parent]
        assert branch.fork_turn == parent.fork_turn + 1
        assert branch.won and branch.actions == expert_plan
        assert [v.text for v in branch.views] == [v.text for v in root.views]


def test_a_fork_outside_the_branchs_own_turns_is_refused(alfworld_target: str, expert_plan: list[str]) -> None:
    port = Sessions.connect(alfworld_target, "alfworld")
    try:
        with pytest.raises(ValueError, match="outside the turns"):
            play_tree(port, EXPERT_TASK, lambda v: expert_plan[v.step_index], lambda b: [99], max_steps=3)
    finally:
        port.close()
