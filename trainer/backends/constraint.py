"""Constrained generation: each response limited to one of its row's allowed token sequences.

What `rollout.action_match: constrained` and `choice` generate with (docs/design/041-constrained-actions.md): the
rollout gives each prompt the token sequences of its admissible replies (the reply text and EOS). `tokens`
(`SamplingSettings.constrain`): at every step the backend masks the tokens that no allowed sequence continues with.
`replies`: the model scores every allowed sequence whole after the prompt (one packed forward for many prompts,
`trainer.backends.listed`), and one is drawn by its probability, normalised over the allowed ones (exactly the
model conditioned on replying one of them, where token masks renormalise each step and let an early token commit to
a reply the model finds unlikely). The log-probs recorded stay the model's own, unmasked (the learner's recompute,
and vLLM's `raw_logprobs`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from trainer.backends.base import AllowedReplies, SamplingSettings

CONSTRAINED_NEEDS_HF = (
    "rollout.action_match constrained and choice limit replies in the hf backend only (backend.kind: hf); with vllm "
    "use `exact` or `nearest`"
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


def choose_replies(
    scores: Sequence[Sequence[Sequence[float]]], sampling: SamplingSettings, generator: torch.Generator
) -> list[int]:
    """For each prompt, the index of the reply drawn among its listed replies (`scores`: every reply's token
    log-probs, `HFBackend.score_replies`) by P(reply)^(1/T) normalised over them (T = 0: the most likely, ties to
    the first); the draws in prompt order from `generator`."""
    picks: list[int] = []
    for listed in scores:
        totals = torch.tensor([sum(tokens) for tokens in listed])
        if sampling.temperature == 0:
            picks.append(int(totals.argmax()))
        else:
            probs = torch.softmax(totals / sampling.temperature, dim=0)
            picks.append(int(torch.multinomial(probs, 1, generator=generator)))
    return picks
