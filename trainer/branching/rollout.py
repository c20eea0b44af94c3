"""`BranchRollout`: BranchOPD continuations from forks of the main trajectories (paper 002 section 3.2).

For each selected fork (turn m, offset o) of a main trajectory: the session is restored from the
snapshot recorded at the start of turn m (`rollout.snapshots`) and forked k - 1 more times; each copy
keeps the main trajectory's first m turns (copied, nothing supervised) and continues turn m from
the main's prompt plus its first o response tokens, so the backend samples the fork token afresh
from pi_old and the episode plays to its end. Every branch of every task advances in lock-step
with the others through `GroupRollout.play` (one `generate` call per turn, steps sent concurrently).
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Sequence

from envhub.client import EnvView
from trainer.branching.select import ForkConfig, ForkPoint, MainTokens, flatten_turns, select_forks
from trainer.prompts import PastStep
from trainer.rollout.group import Episode, GroupRollout, Resume, RolloutStats, SamplingSettings, shorten
from trainer.rollout.types import Trajectory, Turn


def main_tokens(main: Trajectory) -> MainTokens:
    """The main trajectory's per-token arrays; it must carry top-k log-probs and teacher log-probs."""
    rows = []
    for index, turn in enumerate(main.turns):
        if turn.top_logprobs is None or turn.logp_teacher is None:
            raise ValueError(
                f"turn {index} of the main trajectory of {main.task_id} has no "
                f"{'top-k log-probs' if turn.top_logprobs is None else 'teacher log-probs'}: branching needs "
                "rollout.top_logprobs >= 1 and the teacher's scores of the main trajectory"
            )
        rows.append((turn.logp_old, turn.logp_teacher, [[lp for _, lp in top] for top in turn.top_logprobs]))
    return flatten_turns(rows)


def observation_before(main: Trajectory, turn: int) -> str:
    """What the agent saw when turn `turn` started."""
    return main.initial_observation if turn == 0 else main.turns[turn - 1].observation


def shared_turn(turn: Turn) -> Turn:
    """A branch's copy of a main-trajectory turn before its fork: kept as context, never supervised."""
    return dataclasses.replace(turn, supervise_from=len(turn.response_ids), constraints=[])


def resume_at(turn: Turn, offset: int, force_token: int | None) -> Resume:
    """Continue `turn` after its first `offset` tokens (after a forced token when given; that one is not trained)."""
    top = turn.top_logprobs[:offset] if turn.top_logprobs is not None else None
    prefix, logp = list(turn.response_ids[:offset]), list(turn.logp_old[:offset])
    if force_token is None:
        return Resume(turn.prompt_ids, prefix, logp, top, supervise_from=offset)
    return Resume(
        turn.prompt_ids,
        [*prefix, force_token],
        [*logp, 0.0],
        None if top is None else [*top, []],
        supervise_from=offset + 1,
    )


class BranchRollout:
    """Rollout strategy: k continuations from each selected fork of each main trajectory."""

    def __init__(self, group: GroupRollout, config: ForkConfig, force_token: int | None = None) -> None:
        if not group.settings.snapshots:
            raise ValueError("branching restores the session at the fork's turn: set rollout.snapshots: true")
        self.group = group
        self.config = config
        self.force_token = force_token

    def plan(self, mains: Sequence[Trajectory], rng: random.Random) -> list[tuple[Trajectory, ForkPoint]]:
        """(main, fork) pairs: the selected forks of every complete main trajectory."""
        return [
            (main, fork)
            for main in mains
            if not main.dropped and main.turns
            for fork in select_forks(main_tokens(main), self.config, rng)
        ]

    def run(
        self, mains: Sequence[Trajectory], sampling: SamplingSettings, rng: random.Random
    ) -> tuple[list[Trajectory], RolloutStats]:
        """Play every branch of `mains` to the end of its episode; branches come back grouped by fork."""
        stats = RolloutStats()
        start = time.perf_counter()
        started = self.group.map(lambda pair: self._start(*pair), self.plan(mains, rng))
        episodes = [episode for fork in started for episode in fork]
        self.group.play(episodes, sampling, stats)
        stats.wall_s = time.perf_counter() - start
        return [e.trajectory for e in episodes], stats

    def _start(self, main: Trajectory, fork: ForkPoint) -> list[Episode]:
        turn = main.turns[fork.turn]
        if turn.snapshot is None:
            raise ValueError("the main trajectory has no snapshot at its turns: set rollout.snapshots: true")
        restored = self.group.port.restore(turn.snapshot)
        count = self.config.continuations
        ids = [restored.session_id, *(self.group.port.fork(restored.session_id, count - 1) if count > 1 else [])]
        past = [
            PastStep(observation_before(main, j), t.action or shorten(t.response_text))
            for j, t in enumerate(main.turns[: fork.turn])
        ]
        return [
            Episode(
                trajectory=Trajectory(
                    task_id=main.task_id,
                    group=main.group,
                    seed=main.seed,
                    turns=[shared_turn(t) for t in main.turns[: fork.turn]],
                    initial_observation=main.initial_observation,
                    fork=(fork.turn, fork.offset),
                ),
                view=EnvView(
                    session_id=sid,
                    text=observation_before(main, fork.turn),
                    task_description=restored.task_description,
                    admissible=tuple(turn.admissible),
                    score=restored.score,
                ),
                task_description=restored.task_description,
                past=list(past),
                snapshot=turn.snapshot,
                resume=resume_at(turn, fork.offset, self.force_token),
            )
            for sid in ids
        ]
