"""Trees of continuations from live sessions, over any `SessionPort` (ForkSession on the wire).

`fork_state` puts M sessions into the state a snapshot recorded (one restore, M - 1 forks). `play_tree`
plays an episode with a policy, then M continuations from each state `fork_at` picks, recursively to
`depth` levels: what the `tree` rollout strategy does in the trainer (docs/tree-rollouts.md), for any
framework that has a policy callable.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from envhub.client.sessions import SessionPort
from envhub.client.types import EnvView

Policy = Callable[[EnvView], str]
"""The action to send in the state a view shows."""
ForkRule = Callable[["Branch"], Sequence[int]]
"""Which turns of a played branch to fork at (the state each started from), among those it played itself."""


@dataclass(frozen=True)
class Forked:
    """Sessions in one recorded state, and the seconds the restore and forks took."""

    views: list[EnvView]
    seconds: float


def fork_state(port: SessionPort, snapshot: bytes, count: int) -> Forked:
    """`count` live sessions in the state `snapshot` recorded: one restore, then `count - 1` forks of it."""
    start = time.perf_counter()
    restored = port.restore(snapshot)
    ids = port.fork(restored.session_id, count - 1) if count > 1 else []
    views = [restored, *(dataclasses.replace(restored, session_id=sid) for sid in ids)]
    return Forked(views, time.perf_counter() - start)


@dataclass
class Branch:
    """One root-to-leaf episode of a tree: the views it saw (views[0]: where it started), its actions."""

    views: list[EnvView]
    actions: list[str] = field(default_factory=list)
    snapshots: list[bytes] = field(default_factory=list)
    """Snapshot of the state each of its turns started from."""
    parent: int | None = None
    """Index of the branch it forked from (None: the root episode)."""
    fork_turn: int = 0
    """The turn it was forked at: turns before it are its parent's."""

    @property
    def won(self) -> bool:
        return self.views[-1].won


@dataclass
class Tree:
    """The branches of a tree, root first, and its forking cost."""

    branches: list[Branch]
    forks: int = 0
    """Sessions put into a recorded state (restores plus forks)."""
    fork_seconds: float = 0.0


def play_tree(
    port: SessionPort,
    task_id: str,
    act: Policy,
    fork_at: ForkRule,
    *,
    continuations: int = 2,
    depth: int = 1,
    seed: int = 0,
    max_steps: int = 50,
) -> Tree:
    """The root episode of `task_id` and, `depth` levels deep, `continuations` more from each state `fork_at`
    picks of each branch of the level before; every session is ended."""
    view = port.start(task_id, seed=seed, max_steps=max_steps)
    root = Branch([view])
    _play(port, root, act, max_steps)
    tree = Tree([root])
    frontier = [0]
    for _ in range(depth):
        level = []
        for index in frontier:
            branch = tree.branches[index]
            for turn in fork_at(branch):
                if turn < branch.fork_turn or turn >= len(branch.actions):
                    raise ValueError(f"fork turn {turn} outside the turns branch {index} played itself")
                forked = fork_state(port, branch.snapshots[turn], continuations)
                tree.forks += len(forked.views)
                tree.fork_seconds += forked.seconds
                for start in forked.views:
                    child = Branch(
                        [*branch.views[:turn], start],
                        list(branch.actions[:turn]),
                        list(branch.snapshots[:turn]),
                        parent=index,
                        fork_turn=turn,
                    )
                    _play(port, child, act, max_steps)
                    level.append(len(tree.branches))
                    tree.branches.append(child)
        frontier = level
    return tree


def _play(port: SessionPort, branch: Branch, act: Policy, max_steps: int) -> None:
    """Step `branch` from its last view to the end of its episode (or `max_steps`), then end its session."""
    session = branch.views[-1].session_id
    try:
        while not branch.views[-1].done and len(branch.actions) < max_steps:
            branch.snapshots.append(port.snapshot(session))
            action = act(branch.views[-1])
            branch.actions.append(action)
            branch.views.append(port.step(session, action))
    finally:
        port.end(session)
