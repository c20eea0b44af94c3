"""Constrained decoding: each response limited to one of its row's allowed token sequences.

What `rollout.action_match: constrained` generates with (docs/design/041-constrained-actions.md): the rollout gives
each prompt the token sequences of its admissible replies (the reply text and EOS), and the backend masks, at every
step, the tokens that no allowed sequence continues with. The log-probs it records stay the model's own, unmasked
(the learner's recompute, and vLLM's `raw_logprobs`); only the sampling is restricted.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

AllowedReplies = Sequence[Sequence[Sequence[int]] | None]
"""Per prompt, the complete token sequences its response may be (None: unconstrained)."""

CONSTRAINED_NEEDS_HF = (
    "rollout.action_match: constrained limits replies in the hf backend only (backend.kind: hf); with vllm use "
    "`exact` or `nearest`"
)


class ReplyConstraint:
    """The allowed sequences one response can still become, narrowed as its tokens are chosen."""

    def __init__(self, sequences: Sequence[Sequence[int]]) -> None:
        self._left = [tuple(s) for s in sequences if s]
        if not self._left:
            raise ValueError("a constrained response needs at least one non-empty allowed sequence")
        self._at = 0

    def next_tokens(self) -> list[int]:
        """The tokens some allowed sequence continues with (empty once every one left is complete)."""
        return sorted({s[self._at] for s in self._left if len(s) > self._at})

    def advance(self, token: int) -> None:
        """Keep the sequences whose next token is `token`."""
        self._left = [s for s in self._left if len(s) > self._at and s[self._at] == token]
        self._at += 1

    @property
    def exhausted(self) -> bool:
        """Whether nothing can follow: the response is one of its allowed sequences, complete."""
        return not self.next_tokens()


def constraints_for(allowed: AllowedReplies | None, n: int) -> list[ReplyConstraint | None]:
    """One constraint per prompt from `allowed` (None: every prompt free)."""
    if allowed is None:
        return [None] * n
    if len(allowed) != n:
        raise ValueError(f"{n} prompts but {len(allowed)} allowed-reply lists")
    return [None if seqs is None else ReplyConstraint(seqs) for seqs in allowed]


def mask_disallowed(logits: Tensor, constraints: Sequence[ReplyConstraint | None], rows: Sequence[int]) -> Tensor:
    """`logits` (B, V) with every token no allowed sequence continues with set to -inf, in the constrained `rows`."""
    blocked = [(i, c.next_tokens()) for i in rows if (c := constraints[i]) is not None]
    blocked = [(i, tokens) for i, tokens in blocked if tokens]
    if not blocked:
        return logits
    keep = torch.ones_like(logits, dtype=torch.bool)
    for i, tokens in blocked:
        keep[i] = False
        keep[i, tokens] = True
    return logits.masked_fill(~keep, float("-inf"))
