"""`SyncGroups`: the step's trajectories (all turns of all groups) -> one `TokenBatch`.

`history` context: one row per student turn (its rendered prompt + response). `full` context:
one row per trajectory, the last turn's prompt (which contains every earlier turn) plus its
response, with each turn's response tokens supervised at their own positions.
Dropped trajectories never become rows; teacher turns and masked turns (`Turn.masked`: a truncated
response under `rollout.truncation: mask`) are never supervised, and in `history` mode get no row.
A trajectory whose turns are all masked keeps its outcome in its group's GRPO statistics.
A turn's tokens before `Turn.supervise_from` are context, not supervised (BranchOPD: a branch's
shared prefix; a turn it copied from its main trajectory has nothing supervised). PBR constraints on
supervised tokens become the batch's `constraints`; where each supervised turn sits among its group's
states (`trainer.batching.states`) becomes its `states`; the supervised turns drawn among listed replies become its
`listed`, with the reply each drew and, where the teacher scored them (reply-level OPD), its score of each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from trainer.batching.states import StateIndex
from trainer.objectives.batch import TokenBatch
from trainer.objectives.listed import ListedTurns
from trainer.objectives.pbr import ConstraintBatch
from trainer.objectives.teacher_top import teacher_top_tensors
from trainer.rollout.types import Trajectory, Turn


@dataclass(frozen=True)
class _Span:
    start: int
    turn: Turn


class SyncGroups:
    """Batch composer for synchronous group rollouts."""

    def __init__(self, context: str = "history", pad_id: int = 0) -> None:
        if context not in ("history", "full"):
            raise ValueError(f"context must be 'history' or 'full', got {context!r}")
        self.context = context
        self.pad_id = pad_id

    def compose(self, trajectories: Sequence[Trajectory]) -> TokenBatch:
        """Build the batch; teacher log-probs are included when every student turn carries them."""
        kept = [t for t in trajectories if not t.dropped and any(not turn.teacher for turn in t.turns)]
        if not kept:
            raise ValueError("no complete trajectory to train on (every trajectory was dropped or empty)")
        rows: list[tuple[list[int], list[_Span], int]] = []
        states = StateIndex()
        for index, trajectory in enumerate(kept):
            states.add(index, trajectory)
            student = [turn for turn in trajectory.turns if not turn.teacher]
            if self.context == "history":
                rows.extend(
                    (turn.prompt_ids + turn.response_ids, [_Span(len(turn.prompt_ids), turn)], index)
                    for turn in student
                    if turn.supervised
                )
            elif any(turn.supervised for turn in student):
                ids, spans = _full_row(student)
                rows.append((ids, [span for span in spans if span.turn.supervised], index))
        if not rows:
            raise ValueError("no supervised turn to train on (every student turn was masked)")
        with_teacher = all(span.turn.logp_teacher is not None for _, spans, _ in rows for span in spans)
        return self._tensors(rows, kept, with_teacher, states)

    def _tensors(
        self,
        rows: list[tuple[list[int], list[_Span], int]],
        kept: Sequence[Trajectory],
        with_teacher: bool,
        states: StateIndex,
    ) -> TokenBatch:
        n, s = len(rows), max(len(ids) for ids, _, _ in rows)
        input_ids = torch.full((n, s), self.pad_id, dtype=torch.long)
        attention = torch.zeros((n, s), dtype=torch.bool)
        loss_mask = torch.zeros((n, s), dtype=torch.bool)
        logp_old = torch.zeros((n, s), dtype=torch.float32)
        logp_teacher = torch.zeros((n, s), dtype=torch.float32)
        turn_ids = torch.full((n, s), -1, dtype=torch.long)
        traj_ids = torch.tensor([index for _, _, index in rows], dtype=torch.long)
        turn_id = 0
        supervised: list[Turn] = []
        listed: list[tuple[int, Turn]] = []
        tops: list[tuple[int, int, list[list[tuple[int, float]]]]] = []
        constraints: list[tuple[int, int, tuple[int, ...], bool]] = []
        for row, (ids, spans, _) in enumerate(rows):
            input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            attention[row, : len(ids)] = True
            for span in spans:
                end = span.start + len(span.turn.response_ids)
                if not span.turn.supervised:
                    continue
                loss_mask[row, span.start + span.turn.supervise_from : end] = True
                constraints += [
                    (row, span.start + c.offset, c.tokens, c.target)
                    for c in span.turn.constraints
                    if span.turn.supervise_from <= c.offset < len(span.turn.response_ids)
                ]
                logp_old[row, span.start : end] = torch.tensor(span.turn.logp_old, dtype=torch.float32)
                if with_teacher and span.turn.logp_teacher is not None:
                    logp_teacher[row, span.start : end] = torch.tensor(span.turn.logp_teacher, dtype=torch.float32)
                if span.turn.teacher_top is not None:
                    skip = span.turn.supervise_from
                    tops.append((row, span.start + skip, span.turn.teacher_top[skip:]))
                turn_ids[row, span.start : end] = turn_id
                supervised.append(span.turn)
                if span.turn.listed is not None:
                    listed.append((turn_id, span.turn))
                turn_id += 1
        return TokenBatch(
            input_ids=input_ids,
            attention_mask=attention,
            loss_mask=loss_mask,
            logp_old=logp_old.clamp(max=0.0),
            logp_teacher=logp_teacher.clamp(max=0.0) if with_teacher else None,
            turn_ids=turn_ids,
            traj_ids=traj_ids,
            rewards=torch.tensor([t.reward for t in kept], dtype=torch.float32),
            group_ids=torch.tensor([t.group for t in kept], dtype=torch.long),
            constraints=constraint_batch(constraints),
            states=states.build(supervised),
            listed=listed_turns(listed),
            teacher_top=teacher_top_tensors(n, s, tops) if tops else None,
        )


def listed_turns(items: Sequence[tuple[int, Turn]]) -> ListedTurns | None:
    """(turn id, turn) pairs of the turns drawn among listed replies as `ListedTurns` (the teacher's scores when it
    scored every one of them, the rollout's when it recorded every one); None when there are none."""
    if not items:
        return None
    scores = [turn.listed_logp_teacher for _, turn in items]
    rollout = [turn.listed_logp for _, turn in items]
    drawn = [turn.drawn_index() for _, turn in items]
    return ListedTurns(
        turn_ids=[turn_id for turn_id, _ in items],
        prompts=[turn.prompt_ids for _, turn in items],
        replies=[turn.listed or [] for _, turn in items],
        logp_teacher=None if any(s is None for s in scores) else [s or [] for s in scores],
        logp_rollout=None if any(s is None for s in rollout) else [s or [] for s in rollout],
        drawn=[-1 if index is None else index for index in drawn],
    )


def constraint_batch(items: Sequence[tuple[int, int, tuple[int, ...], bool]]) -> ConstraintBatch | None:
    """(row, position, token set, target) tuples as a `ConstraintBatch`; None when there are none."""
    if not items:
        return None
    width = max(len(tokens) for _, _, tokens, _ in items)
    sets = torch.full((len(items), width), -1, dtype=torch.long)
    for i, (_, _, tokens, _) in enumerate(items):
        sets[i, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
    return ConstraintBatch(
        rows=torch.tensor([row for row, _, _, _ in items], dtype=torch.long),
        positions=torch.tensor([pos for _, pos, _, _ in items], dtype=torch.long),
        token_sets=sets,
        targets=torch.tensor([target for _, _, _, target in items], dtype=torch.bool),
    )


def _full_row(turns: Sequence[Turn]) -> tuple[list[int], list[_Span]]:
    """The last turn's context + response, with every turn's response located inside it."""
    last = turns[-1]
    ids = last.prompt_ids + last.response_ids
    spans = []
    for turn in turns:
        start = len(turn.prompt_ids)
        if ids[:start] != turn.prompt_ids or ids[start : start + len(turn.response_ids)] != turn.response_ids:
            raise ValueError("full-context turns do not nest: each prompt must extend the previous prompt + response")
        spans.append(_Span(start, turn))
    return ids, spans
