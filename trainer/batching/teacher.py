"""Attach the frozen teacher's log-probs to every student turn (batched `score_replies` and `score` calls)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from trainer.rollout.types import Trajectory


def attach_teacher_logprobs(
    trajectories: Sequence[Trajectory], scorer: Any, listed: bool = False, top_k: int = 0
) -> int:
    """Score each supervised student turn's response under `scorer` (a `ScoringBackend`), and with `listed` every
    listed reply of the turns drawn among them (`score_replies`, reply-level OPD: a turn whose response is one of its
    listed replies takes that reply's token log-probs from the same forward); with `top_k` the other turns also get
    the scorer's `top_k` most likely tokens at each response token (`Turn.teacher_top`); returns response tokens
    scored."""
    turns = [turn for t in trajectories if not t.dropped for turn in t.turns if turn.supervised]
    if not turns:
        return 0
    rest = turns
    if listed and (drawn := [turn for turn in turns if turn.listed]):
        per_token = scorer.score_replies([turn.prompt_ids for turn in drawn], [turn.listed for turn in drawn])
        taken: set[int] = set()
        for turn, replies in zip(drawn, per_token, strict=True):
            turn.listed_logp_teacher = [math.fsum(reply) for reply in replies]
            chosen = turn.drawn_index()
            if chosen is not None:
                turn.logp_teacher = list(replies[chosen])
                taken.add(id(turn))
        rest = [turn for turn in turns if id(turn) not in taken]
    if rest:
        prompts, responses = [turn.prompt_ids for turn in rest], [turn.response_ids for turn in rest]
        scores, tops = scorer.score_top(prompts, responses, top_k) if top_k else (scorer.score(prompts, responses), [])
        for index, (turn, logp) in enumerate(zip(rest, scores, strict=True)):
            if len(logp) != len(turn.response_ids):
                raise ValueError(f"teacher returned {len(logp)} log-probs for {len(turn.response_ids)} response tokens")
            turn.logp_teacher = list(logp)
            if top_k:
                turn.teacher_top = tops[index]
    return sum(len(turn.response_ids) for turn in turns)
