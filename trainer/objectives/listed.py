"""Reply-level OPD (`kl_over: replies`, docs/design/042-reply-level-opd.md): the turns drawn among listed replies
(`rollout.action_match: choice`) and the KL of the student's choice from the teacher's.

Under `choice` a turn's policy is a distribution over its listed replies, q(a) = P(a | prompt) normalised over the
list. Its reverse KL to the teacher's, KL(q_S || q_T) = sum_a q_S(a) (log q_S(a) - log q_T(a)), is exact and cheap
once both models have scored every listed reply: the learner differentiates it (`listed_kl`) where token-level OPD
would estimate it from the one reply drawn. `reply_kl: forward` trains the other direction, KL(q_T || q_S): the
teacher's choice as soft labels on the student's own states (GKD's on-policy forward KL; docs/design/044).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, get_args

import torch

from trainer.errors import BatchError

ReplyKl = Literal["reverse", "forward"]
REPLY_KL: tuple[str, ...] = get_args(ReplyKl)


@dataclass
class ListedTurns:
    """The batch's supervised turns that were drawn among listed replies, with the teacher's score of each reply."""

    turn_ids: list[int]
    """Each turn's id in the batch (`TokenBatch.turn_ids`)."""
    prompts: list[list[int]]
    """Each turn's prompt tokens."""
    replies: list[list[list[int]]]
    """Each turn's listed replies, as token ids (the one drawn among them)."""
    logp_teacher: list[list[float]]
    """The teacher's total log-prob of each listed reply."""
    weights: list[float] | None = None
    """Each turn's weight on its KL (ATOD's T-DUR turn weight, `ObjectiveSpec.listed_turn_weights`); None: 1 each."""

    def __post_init__(self) -> None:
        count = len(self.turn_ids)
        if not len(self.prompts) == len(self.replies) == len(self.logp_teacher) == count:
            raise BatchError(
                "ListedTurns: turn_ids, prompts, replies and logp_teacher differ in length", field="listed"
            )
        if self.weights is not None and len(self.weights) != count:
            raise BatchError(f"ListedTurns: {len(self.weights)} weights for {count} turns", field="listed")
        for replies, scores in zip(self.replies, self.logp_teacher, strict=True):
            if not replies or len(replies) != len(scores):
                raise BatchError("ListedTurns: each turn needs one teacher score per listed reply", field="listed")

    def __len__(self) -> int:
        return len(self.turn_ids)

    def having(self, turn_ids: set[int]) -> ListedTurns:
        """The listed turns among `turn_ids`, in order."""
        keep = [i for i, turn in enumerate(self.turn_ids) if turn in turn_ids]
        return ListedTurns(
            [self.turn_ids[i] for i in keep],
            [self.prompts[i] for i in keep],
            [self.replies[i] for i in keep],
            [self.logp_teacher[i] for i in keep],
            None if self.weights is None else [self.weights[i] for i in keep],
        )

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
