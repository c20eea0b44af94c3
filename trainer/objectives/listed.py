"""Reply-level OPD (`kl_over: replies`, docs/design/042-reply-level-opd.md): the turns drawn among listed replies
(`rollout.action_match: choice`) and the KL of the student's choice from the teacher's.

Under `choice` a turn's policy is a distribution over its listed replies, q(a) = P(a | prompt) normalised over the
list. Its reverse KL to the teacher's, KL(q_S || q_T) = sum_a q_S(a) (log q_S(a) - log q_T(a)), is exact and cheap
once both models have scored every listed reply: the learner differentiates it (`listed_kl`) where token-level OPD
would estimate it from the one reply drawn. `reply_kl: forward` trains the other direction, KL(q_T || q_S): the
teacher's choice as soft labels on the student's own states (GKD's on-policy forward KL; docs/design/044).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch

from trainer.backends.listed import packed_length
from trainer.errors import BatchError

ReplyKl = Literal["reverse", "forward"]
REPLY_KL: tuple[str, ...] = get_args(ReplyKl)


@dataclass
class ListedTurns:
    """The batch's supervised turns that were drawn among listed replies, with what the learner needs of each."""

    turn_ids: list[int]
    """Each turn's id in the batch (`TokenBatch.turn_ids`)."""
    prompts: list[list[int]]
    """Each turn's prompt tokens."""
    replies: list[list[list[int]]]
    """Each turn's listed replies, as token ids (the one drawn among them)."""
    logp_teacher: list[list[float]] | None = None
    """The teacher's total log-prob of each listed reply (reply-level OPD); None: not scored (no teacher)."""
    logp_rollout: list[list[float]] | None = None
    """The rollout policy's total log-prob of each listed reply, as scored for the draw (`optim.listed_keep` ranks
    the turns by the KL it gives); None: not recorded."""
    drawn: list[int] | None = None
    """The index of the reply each turn drew among its list, -1 where its response is none of them (the reply-level
    RL term, `rl_over: replies`, docs/design/047); None: not recorded."""
    weights: list[float] | None = None
    """Each turn's weight on its KL (ATOD's T-DUR turn weight, `ObjectiveSpec.listed_turn_weights`); None: 1 each."""
    advantages: list[float] | None = None
    """Each turn's RL advantage, moved here off its tokens by the learner under `rl_over: replies`."""
    logq_old: list[float] | None = None
    """Each turn's log q_old of its drawn reply (normalised over its list) before the step's first update."""

    def __post_init__(self) -> None:
        count = len(self.turn_ids)
        if len(self.prompts) != count or len(self.replies) != count:
            raise BatchError("ListedTurns: turn_ids, prompts and replies differ in length", field="listed")
        if any(not replies for replies in self.replies):
            raise BatchError("ListedTurns: each turn needs one or more listed replies", field="listed")
        for name in ("logp_teacher", "logp_rollout", "drawn", "weights", "advantages", "logq_old"):
            values = getattr(self, name)
            if values is not None and len(values) != count:
                raise BatchError(f"ListedTurns: {len(values)} {name} for {count} turns", field="listed")
        for name in ("logp_teacher", "logp_rollout"):
            scored = getattr(self, name)
            if scored is not None and any(
                len(replies) != len(scores) for replies, scores in zip(self.replies, scored, strict=True)
            ):
                raise BatchError(f"ListedTurns: {name} needs one score per listed reply of each turn", field="listed")
        if self.drawn is not None and any(
            not -1 <= index < len(replies) for replies, index in zip(self.replies, self.drawn, strict=True)
        ):
            raise BatchError("ListedTurns: a drawn index lies outside its turn's list", field="listed")

    def __len__(self) -> int:
        return len(self.turn_ids)

    def having(self, turn_ids: set[int]) -> ListedTurns:
        """The listed turns among `turn_ids`, in order."""
        return self.picked([i for i, turn in enumerate(self.turn_ids) if turn in turn_ids])

    def by_length(self) -> ListedTurns:
        """The same turns, shortest first (prompt and listed replies' tokens), so that `chunks` packs turns of
        similar lengths together and pads little (a trajectory's turns grow with its history)."""
        return self.picked(sorted(range(len(self)), key=lambda i: packed_length(self.prompts[i], self.replies[i])))

    def picked(self, indices: list[int]) -> ListedTurns:
        """The turns at `indices`, in that order."""
        picked: dict[str, Any] = {
            f.name: None if (values := getattr(self, f.name)) is None else [values[i] for i in indices]
            for f in dataclasses.fields(self)
        }
        return ListedTurns(**picked)

    def teacher_scores(self) -> list[list[float]]:
        """`logp_teacher`; BatchError when the teacher did not score the replies."""
        if self.logp_teacher is None:
            raise BatchError("the KL over listed replies needs the teacher's scores of them", field="listed")
        return self.logp_teacher

    def turn_weights(self, part: slice, device: torch.device) -> torch.Tensor:
        """The weights of the turns `part` (fp32; 1 each without `weights`)."""
        if self.weights is None:
            return torch.ones(len(self.turn_ids[part]), device=device)
        return torch.tensor(self.weights[part], dtype=torch.float32, device=device)

    def chunks(self, token_budget: int) -> Iterator[slice]:
        """Consecutive turns whose padded prompts and replies fit `token_budget` tokens (at least one turn each)."""
        start = 0
        while start < len(self):
            end, width, reply_tokens = start, 0, 0
            while end < len(self):
                grown = max(width, len(self.prompts[end]))
                more = reply_tokens + sum(len(reply) for reply in self.replies[end])
                if end > start and (end + 1 - start) * grown + more > token_budget:
                    break
                end, width, reply_tokens = end + 1, grown, more
            yield slice(start, end)
            start = end


def listed_kl(logp_student: torch.Tensor, logp_teacher: torch.Tensor, direction: ReplyKl = "reverse") -> torch.Tensor:
    """KL(q_S || q_T) (`reverse`) or KL(q_T || q_S) (`forward`) over one turn's listed replies, from each model's
    total log-prob of each reply (K,)."""
    student = torch.log_softmax(logp_student.float(), dim=0)
    teacher = torch.log_softmax(logp_teacher.to(student), dim=0)
    if direction == "forward":
        return (teacher.exp() * (teacher - student)).sum()
    return (student.exp() * (student - teacher)).sum()


def most_divergent(listed: ListedTurns, share: float, direction: ReplyKl) -> tuple[ListedTurns, float]:
    """`optim.listed_keep`: the `share` of `listed`'s turns (rounded up, one at least) with the largest KL between the
    rollout's choice and the teacher's (`direction`, each times its turn weight), in their order, and the share of the
    turns' summed KL they hold (1 when it is 0)."""
    if listed.logp_rollout is None:
        raise BatchError(
            "optim.listed_keep ranks the listed turns by the rollout's scores of their replies, and this batch has "
            "none (the hf backend records them when it draws a reply among listed ones: rollout.action_match choice)",
            field="listed",
        )
    weights = listed.weights or [1.0] * len(listed)
    kls = [
        weight * float(listed_kl(torch.tensor(rollout), torch.tensor(teacher), direction))
        for weight, rollout, teacher in zip(weights, listed.logp_rollout, listed.teacher_scores(), strict=True)
    ]
    ranked = sorted(range(len(kls)), key=lambda i: -kls[i])  # stable: ties keep the earlier turn
    kept = sorted(ranked[: max(1, math.ceil(share * len(kls)))])
    total = sum(kls)
    return listed.picked(kept), (sum(kls[i] for i in kept) / total if total > 0 else 1.0)
