"""Attach the frozen teacher's log-probs to every student turn (one batched `score` call)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainer.rollout.types import Trajectory


def attach_teacher_logprobs(trajectories: Sequence[Trajectory], scorer: Any, listed: bool = False) -> int:
    """Score each supervised student turn's response under `scorer` (a `ScoringBackend`), and with `listed` every
    listed reply of the turns drawn among them (`score_replies`, reply-level OPD); returns response tokens scored."""
    turns = [turn for t in trajectories if not t.dropped for turn in t.turns if turn.supervised]
    if not turns:
        return 0
    if listed and (drawn := [turn for turn in turns if turn.listed]):
        totals = scorer.score_replies([turn.prompt_ids for turn in drawn], [turn.listed for turn in drawn])
        for turn, scores in zip(drawn, totals, strict=True):
            turn.listed_logp_teacher = list(scores)
    scores = scorer.score([turn.prompt_ids for turn in turns], [turn.response_ids for turn in turns])
    for turn, logp in zip(turns, scores, strict=True):
        if len(logp) != len(turn.response_ids):
            raise ValueError(f"teacher returned {len(logp)} log-probs for {len(turn.response_ids)} response tokens")
        turn.logp_teacher = list(logp)
    return sum(len(turn.response_ids) for turn in turns)
