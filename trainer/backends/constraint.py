"""Constrained generation: each response limited to one of its row's allowed token sequences.

What `rollout.action_match: constrained` and `choice` generate with (docs/design/041-constrained-actions.md): the
rollout gives each prompt the token sequences of its admissible replies (the reply text and EOS). `tokens`
(`SamplingSettings.constrain`): at every step the backend masks the tokens that no allowed sequence continues with.
`replies`: the model scores every allowed sequence whole on top of the prompt's keys and values, and one is drawn by
its probability, normalised over the allowed ones (exactly the model conditioned on replying one of them, where
token masks renormalise each step and let an early token commit to a reply the model finds unlikely). The
log-probs recorded stay the model's own, unmasked (the learner's recompute, and vLLM's `raw_logprobs`).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import Tensor
from transformers import DynamicCache, PreTrainedModel

from trainer.backends.base import AllowedReplies, Generation, SamplingSettings

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


CHOICE_ROWS = 32
"""Listed replies scored in one forward on the prompt's keys and values: bounds the repeated cache and the logits
(a ScienceWorld room lists hundreds of actions)."""


def choose_reply(
    model: PreTrainedModel,
    prompt: Sequence[int],
    choices: Sequence[Sequence[int]],
    sampling: SamplingSettings,
    generator: torch.Generator,
    pad_token_id: int,
) -> Generation:
    """One of `choices` (complete responses) drawn by the model's probability of each given `prompt`: the prompt
    is computed once and the choices `CHOICE_ROWS` at a time on its keys and values; P(choice)^(1/T) normalised
    over them (T = 0: the most likely, ties to the first)."""
    if not choices or not all(choices):
        raise ValueError("a reply is chosen among one or more non-empty token sequences")
    device = next(model.parameters()).device
    cache = DynamicCache()
    first = model(
        input_ids=torch.tensor([list(prompt)], device=device), past_key_values=cache, use_cache=True, logits_to_keep=1
    ).logits[:, -1:]
    scored = [
        _score_choices(model, cache, first, len(prompt), choices[start : start + CHOICE_ROWS], pad_token_id)[0]
        for start in range(0, len(choices), CHOICE_ROWS)
    ]
    totals = torch.cat([token_logp.sum(dim=-1) for token_logp in scored])
    if sampling.temperature == 0:
        pick = int(totals.argmax())
    else:
        pick = int(torch.multinomial(torch.softmax(totals / sampling.temperature, dim=0), 1, generator=generator))
    length = len(choices[pick])
    token_logp = scored[pick // CHOICE_ROWS][pick % CHOICE_ROWS, :length]
    tops = None
    if sampling.top_logprobs:
        logp = _score_choices(model, cache, first, len(prompt), [choices[pick]], pad_token_id)[1][0, :length]
        top = torch.topk(logp, min(sampling.top_logprobs, logp.shape[-1]), dim=-1)
        tops = [list(zip(i.tolist(), v.tolist(), strict=True)) for i, v in zip(top.indices, top.values, strict=True)]
    return Generation(list(choices[pick]), token_logp.tolist(), tops, "stop")


def _score_choices(
    model: PreTrainedModel,
    prompt_cache: DynamicCache,
    first: Tensor,
    prompt_length: int,
    choices: Sequence[Sequence[int]],
    pad_token_id: int,
) -> tuple[Tensor, Tensor]:
    """Each choice's token log-probs (n, width; 0 past its end) and every position's log-softmax (n, width, V), from
    one forward of the choices on a copy of the prompt's cache (`first`: the prompt's last logits, 1 x 1 x V)."""
    device = first.device
    n, width = len(choices), max(len(c) for c in choices)
    cache = copy.deepcopy(prompt_cache)
    cache.batch_repeat_interleave(n)
    ids = torch.full((n, width), pad_token_id, dtype=torch.long, device=device)
    mask = torch.zeros((n, width), dtype=torch.long, device=device)
    for row, choice in enumerate(choices):
        ids[row, : len(choice)] = torch.tensor(list(choice), device=device)
        mask[row, : len(choice)] = 1
    rest = model(
        input_ids=ids,
        attention_mask=torch.cat([torch.ones((n, prompt_length), dtype=torch.long, device=device), mask], dim=1),
        position_ids=prompt_length + torch.arange(width, device=device)[None].expand(n, -1),
        past_key_values=cache,
        use_cache=True,
    ).logits
    # position k's token is predicted by the prompt's last logits (k = 0) or the choice's token k - 1
    logp = torch.log_softmax(torch.cat([first.expand(n, -1, -1), rest[:, :-1]], dim=1).float(), dim=-1)
    return logp.gather(-1, ids[..., None]).squeeze(-1) * mask, logp
