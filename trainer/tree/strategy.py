"""The `tree` rollout strategy (worker side): root episodes (`run`), then one level of continuations (`expand`).

`expand` forks each given episode at the turns `tree.select` picks: the session is put back into the state
the turn started from (`envhub.client.tree.fork_state`: a restore of the turn's snapshot and M - 1
ForkSession calls), and M continuations play from there to the end of their episodes, all of them in
lock-step through `GroupRollout.play`. A continuation re-samples the forked turn from the same prompt
with the student (every branch is on-policy) and keeps copies of the turns before it as context; every
turn names its state (`Turn.node`), so the copies and the originals are one state of the tree.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Sequence

from envhub.client import EnvView
from envhub.client.tree import fork_state
from trainer.branching.rollout import observation_before, resume_at, shared_turn
from trainer.prompts import PastStep
from trainer.rollout.group import Episode, GroupRollout, RolloutStats, SamplingSettings, TurnCallback, shorten
from trainer.rollout.strategies import RolloutParts
from trainer.rollout.types import Trajectory
from trainer.tree.select import TreeConfig, select_fork_turns


class TreeStrategy:
    """Root episodes (GroupRollout) and their continuations from forked states, on one worker's server."""

    def __init__(self, parts: RolloutParts, config: TreeConfig) -> None:
        self.group = GroupRollout(parts.port, parts.backend, parts.tokenizer, parts.renderer, parts.settings)
        if not parts.settings.snapshots:
            raise ValueError("tree rollouts fork recorded states: set rollout.snapshots: true")
        self.config = config
        self._nodes = itertools.count()

    def run(
        self,
        tasks: Sequence[tuple[str, int]],
        sampling: SamplingSettings,
        group_size: int | None = None,
        on_turn: TurnCallback | None = None,
    ) -> tuple[list[Trajectory], RolloutStats]:
        """`group_size` root episodes per task (GroupRollout), every turn naming its tree state."""
        roots, stats = self.group.run(tasks, sampling, group_size, on_turn)
        self._name_states(roots)
        return roots, stats

    def expand(
        self, episodes: list[Trajectory], sampling: SamplingSettings, select_seed: int
    ) -> tuple[list[Trajectory], RolloutStats]:
        """M continuations from each state `tree.select` picks in each of `episodes` (which this worker played)."""
        stats = RolloutStats()
        start = time.perf_counter()
        rng = random.Random(select_seed)
        plan = [(episode, turn) for episode in episodes for turn in select_fork_turns(episode, self.config, rng)]
        started = self.group.map(lambda pair: self._start(*pair), plan)
        for forked, _ in started:
            stats.forks += self.config.continuations
            stats.fork_s += forked
        children = [episode for _, fork in started for episode in fork]
        self.group.play(children, sampling, stats)
        stats.wall_s = time.perf_counter() - start
        played = [e.trajectory for e in children]
        self._name_states(played)
        return played, stats

    def _start(self, parent: Trajectory, turn: int) -> tuple[float, list[Episode]]:
        """(seconds the fork took, the M continuations of `parent` from the state its turn `turn` started from)."""
        forked_turn = parent.turns[turn]
        if forked_turn.snapshot is None:
            raise ValueError("the episode has no snapshot at its turns: set rollout.snapshots: true")
        forked = fork_state(self.group.port, forked_turn.snapshot, self.config.continuations)
        past = [
            PastStep(observation_before(parent, j), t.action or shorten(t.response_text))
            for j, t in enumerate(parent.turns[:turn])
        ]
        episodes = [
            Episode(
                trajectory=Trajectory(
                    task_id=parent.task_id,
                    group=parent.group,
                    seed=parent.seed,
                    turns=[shared_turn(t) for t in parent.turns[:turn]],
                    initial_observation=parent.initial_observation,
                    fork=(turn, 0),
                ),
                view=EnvView(
                    session_id=view.session_id,
                    text=observation_before(parent, turn),
                    task_description=view.task_description,
                    admissible=tuple(forked_turn.admissible),
                    score=view.score,
                ),
                task_description=view.task_description,
                past=list(past),
                snapshot=forked_turn.snapshot,
                resume=resume_at(forked_turn, 0, None),
            )
            for view in forked.views
        ]
        return forked.seconds, episodes

    def _name_states(self, trajectories: Sequence[Trajectory]) -> None:
        for trajectory in trajectories:
            for turn in trajectory.turns:
                if turn.node is None:
                    turn.node = next(self._nodes)

    def close(self) -> None:
        self.group.close()
