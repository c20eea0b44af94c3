"""Listed replies scored whole: the log-prob of every reply a turn could have been drawn among.

Reply-level OPD (`kl_over: replies`, docs/design/042-reply-level-opd.md) compares the student's and the teacher's
distributions over a turn's listed replies (`rollout.action_match: choice`). Both read them from here, in one forward
per batch of turns: each turn is one row, its prompt followed by all its replies, under an attention mask that lets
each reply see the prompt and its own earlier tokens only, and positions that restart after the prompt for every
reply. So the prompt is computed once and nothing is copied per reply (a copy of the prompt's keys and values per
reply cost more than the forward, and its backward more still). Without `torch.no_grad` the result is
differentiable (the learner's term).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import Tensor
from transformers import PreTrainedModel

HEAD_CHUNK = 1024
"""Reply tokens projected onto the vocabulary at once (bounds the fp32 logits: 1024 x 49k = 200 MB for SmolLM2)."""


def listed_reply_logprobs(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    replies: Sequence[Sequence[Sequence[int]]],
    pad_token_id: int,
    width_multiple: int = 1,
) -> list[Tensor]:
    """For each prompt, the total log-prob of each of its listed replies (one (K_i,) fp32 tensor per prompt).

    Every prompt and every reply must be non-empty; a reply is scored teacher-forced after its prompt (its last
    token, EOS, included), exactly as a forward of prompt + reply would. `width_multiple`: the packed rows padded to
    a multiple of this many tokens (few distinct shapes: oneDNN keeps kernels for every shape it meets on the CPU,
    docs/design/039, 055).
    """
    packed, logp = _reply_token_logprobs(model, prompts, replies, pad_token_id, width_multiple)
    totals = torch.zeros(len(packed.reply_lengths), dtype=logp.dtype, device=logp.device)
    totals = totals.index_add(0, packed.reply_of_token.to(logp.device), logp)
    return list(totals.split([len(listed) for listed in replies]))


def listed_reply_token_logprobs(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    replies: Sequence[Sequence[Sequence[int]]],
    pad_token_id: int,
    width_multiple: int = 1,
) -> list[list[Tensor]]:
    """For each prompt, the log-prob of every token of each listed reply (one (len(reply),) fp32 tensor per reply),
    from the same forward as `listed_reply_logprobs` (whose totals are their sums)."""
    packed, logp = _reply_token_logprobs(model, prompts, replies, pad_token_id, width_multiple)
    per_reply = list(logp.split(packed.reply_lengths))
    grouped: list[list[Tensor]] = []
    for listed in replies:
        grouped.append(per_reply[: len(listed)])
        per_reply = per_reply[len(listed) :]
    return grouped


def packed_length(prompt: Sequence[int], replies: Sequence[Sequence[int]]) -> int:
    """The tokens of one turn packed for scoring: its prompt and all its listed replies (a row's width)."""
    return len(prompt) + sum(len(reply) for reply in replies)


def packed_groups(lengths: Sequence[int], max_rows: int, max_tokens: int) -> list[list[int]]:
    """The indices of turns of `lengths` packed tokens in groups of one forward each, shortest first: at most
    `max_rows` rows and `max_tokens` padded tokens (rows x the longest) a group, one row at least (the attention mask
    is rows x width^2 and the reply logits grow with the tokens, so a turn listing hundreds of replies goes alone)."""
    groups: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if groups and len(groups[-1]) < max_rows and (len(groups[-1]) + 1) * lengths[i] <= max_tokens:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def reply_top_logprobs(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    replies: Sequence[Sequence[int]],
    k: int,
    pad_token_id: int,
    width_multiple: int = 1,
) -> list[list[list[tuple[int, float]]]]:
    """For each prompt and its one reply, the `k` most likely tokens and their log-probs at every reply position
    (teacher-forced, from one packed forward; rows padded as `listed_reply_logprobs`'s)."""
    packed = _Packed(prompts, [[reply] for reply in replies], pad_token_id, width_multiple)
    tops: list[list[tuple[int, float]]] = []
    for chunk in _reply_states(model, packed).split(HEAD_CHUNK):
        top = torch.topk(torch.log_softmax(model.get_output_embeddings()(chunk).float(), dim=-1), k, dim=-1)
        tops += [list(zip(i.tolist(), v.tolist(), strict=True)) for i, v in zip(top.indices, top.values, strict=True)]
    ends = list(itertools.accumulate(packed.reply_lengths))
    return [tops[end - n : end] for n, end in zip(packed.reply_lengths, ends, strict=True)]


def _reply_token_logprobs(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    replies: Sequence[Sequence[Sequence[int]]],
    pad_token_id: int,
    width_multiple: int,
) -> tuple[_Packed, Tensor]:
    """The turns packed one per row, and the log-prob of every listed reply's tokens in packing order (flat, fp32)."""
    if len(prompts) != len(replies):
        raise ValueError(f"{len(prompts)} prompts but {len(replies)} reply lists")
    if not prompts or not all(prompts) or not all(listed and all(listed) for listed in replies):
        raise ValueError("listed replies need non-empty prompts, each with one or more non-empty replies")
    packed = _Packed(prompts, replies, pad_token_id, width_multiple)
    states = _reply_states(model, packed)
    targets = packed.targets.to(states.device)
    head = model.get_output_embeddings()
    logp = torch.cat(
        [
            torch.log_softmax(head(chunk).float(), dim=-1).gather(-1, target[:, None]).squeeze(-1)
            for chunk, target in zip(states.split(HEAD_CHUNK), targets.split(HEAD_CHUNK), strict=True)
        ]
    )
    return packed, logp


def _reply_states(model: PreTrainedModel, packed: _Packed) -> Tensor:
    """The last hidden state that predicts each reply token of `packed` (flat, in packing order)."""
    device = next(model.parameters()).device
    hidden = model.base_model(
        input_ids=packed.ids.to(device),
        attention_mask=_attention_mask(model, packed.visible.to(device)),
        position_ids=packed.positions.to(device),
    ).last_hidden_state
    return hidden[packed.rows.to(device), packed.predictors.to(device)]


class _Packed:
    """Turns packed one per row: token ids, positions, which tokens each token sees, and per reply token the row,
    the position whose logits predict it, its id and its reply's index. Built from flat lists, one tensor each, and
    the mask by one comparison of segments (0 the prompt, k the k-th reply, -1 padding): a token sees the earlier
    tokens of the prompt and of its own segment (padding: the prompt and earlier padding, never an all-masked row;
    what padding computes is never read). Rows are padded to the longest, rounded up to a multiple of
    `width_multiple`."""

    def __init__(
        self,
        prompts: Sequence[Sequence[int]],
        replies: Sequence[Sequence[Sequence[int]]],
        pad_token_id: int,
        width_multiple: int = 1,
    ) -> None:
        if width_multiple < 1:
            raise ValueError(f"width_multiple must be at least 1, not {width_multiple}")
        longest = max(packed_length(p, listed) for p, listed in zip(prompts, replies, strict=True))
        width = -(-longest // width_multiple) * width_multiple
        ids: list[int] = []
        positions: list[int] = []
        segments: list[int] = []
        rows: list[int] = []
        predictors: list[int] = []
        targets: list[int] = []
        self.reply_lengths: list[int] = []
        for row, (prompt, listed) in enumerate(zip(prompts, replies, strict=True)):
            p = len(prompt)
            ids += prompt
            positions += range(p)
            segments += [0] * p
            start = p
            for reply_index, reply in enumerate(listed, start=1):
                n = len(reply)
                ids += reply
                positions += range(p, p + n)
                segments += [reply_index] * n
                rows += [row] * n
                predictors += [p - 1, *range(start, start + n - 1)]
                targets += reply
                self.reply_lengths.append(n)
                start += n
            pad = width - start
            ids += [pad_token_id] * pad
            positions += [0] * pad
            segments += [-1] * pad
        shape = (len(prompts), width)
        self.ids = torch.tensor(ids, dtype=torch.long).view(shape)
        self.positions = torch.tensor(positions, dtype=torch.long).view(shape)
        segment = torch.tensor(segments, dtype=torch.long).view(shape)
        query, key = segment[:, :, None], segment[:, None, :]
        self.visible = torch.ones((width, width), dtype=torch.bool).tril() & ((key == 0) | (key == query))
        self.rows = torch.tensor(rows, dtype=torch.long)
        self.predictors = torch.tensor(predictors, dtype=torch.long)
        self.targets = torch.tensor(targets, dtype=torch.long)
        self.reply_of_token = torch.repeat_interleave(
            torch.arange(len(self.reply_lengths)), torch.tensor(self.reply_lengths)
        )


def _attention_mask(model: PreTrainedModel, visible: Tensor) -> Tensor:
    """`visible` (B, S, S) as the 4D mask the model's attention takes as given: boolean for SDPA, additive for the
    others (0 where visible, the dtype's minimum elsewhere)."""
    if model.config._attn_implementation == "sdpa":
        return visible[:, None]
    dtype = next(model.parameters()).dtype
    blocked = torch.full(visible.shape, torch.finfo(dtype).min, dtype=dtype, device=visible.device)
    return torch.where(visible, torch.zeros((), dtype=dtype, device=visible.device), blocked)[:, None]
