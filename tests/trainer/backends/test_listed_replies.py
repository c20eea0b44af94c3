"""`listed_reply_logprobs` (reply-level OPD's scorer, docs/design/042) on a tiny random Qwen3: every listed reply's
total log-prob equals a forward of prompt + reply (SDPA and eager attention), prompts of different lengths and lists
in one batch; its gradient equals the full forwards' gradient; `HFBackend.score_replies` returns the same, token by
token; the teacher's attachment takes a drawn turn's token log-probs from that forward, as `score` gives them; rows
padded to a width multiple change nothing but the shapes."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.backends import HFBackend
from trainer.backends.listed import _Packed, listed_reply_logprobs, reply_top_logprobs
from trainer.batching import attach_teacher_logprobs
from trainer.rollout import Trajectory, Turn

ACTIONS = ["go to drawer 1", "go to drawer 2", "go to countertop 1", "take apple 1 from countertop 1", "look"]


def _replies(tokenizer: PreTrainedTokenizerBase, texts: list[str]) -> list[list[int]]:
    return [[*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id] for text in texts]


def _full_forward(model: PreTrainedModel, prompt: list[int], reply: list[int]) -> torch.Tensor:
    """log P(reply | prompt) from one plain forward of prompt + reply."""
    logp = torch.log_softmax(model(input_ids=torch.tensor([prompt + reply])).logits[0, :-1].float(), dim=-1)
    return logp[len(prompt) - 1 :].gather(-1, torch.tensor(reply)[:, None]).sum()


def _lists(tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]]) -> list[list[list[int]]]:
    """A different list per prompt (lengths 5, 2, 4, 1...)."""
    return [
        _replies(tokenizer, ACTIONS[i % 3 :] if i % 2 == 0 else ACTIONS[i % 3 : i % 3 + 2]) for i in range(len(prompts))
    ]


@pytest.mark.parametrize("width_multiple", [1, 16])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_each_reply_scores_as_a_forward_of_prompt_and_reply(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[list[int]],
    attention: str,
    width_multiple: int,
) -> None:
    model = copy.deepcopy(model)
    model.set_attn_implementation(attention)  # boolean mask (SDPA) or additive (eager)
    lists = _lists(tokenizer, prompts)
    with torch.no_grad():
        got = listed_reply_logprobs(model, prompts, lists, tokenizer.pad_token_id, width_multiple)
        for prompt, replies, scores in zip(prompts, lists, got, strict=True):
            expected = torch.stack([_full_forward(model, prompt, reply) for reply in replies])
            torch.testing.assert_close(scores, expected, atol=1e-4, rtol=0)


def test_the_gradient_is_the_full_forwards_gradient(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]]
) -> None:
    lists = _lists(tokenizer, prompts)
    weights = [torch.linspace(-1.0, 2.0, len(replies)) for replies in lists]  # any weighting of the replies

    def gradient(loss: torch.Tensor) -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        loss.backward()
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]

    scores = listed_reply_logprobs(model, prompts, lists, tokenizer.pad_token_id)
    shared = gradient(sum((w * s).sum() for w, s in zip(weights, scores, strict=True)))  # type: ignore[arg-type]
    full = gradient(
        sum(
            (w * torch.stack([_full_forward(model, prompt, reply) for reply in replies])).sum()
            for prompt, replies, w in zip(prompts, lists, weights, strict=True)
        )  # type: ignore[arg-type]
    )
    model.zero_grad(set_to_none=True)
    assert len(shared) == len(full) > 0
    for a, b in zip(shared, full, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)


def test_rows_padded_to_a_width_multiple_change_nothing_but_the_shapes(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]]
) -> None:
    """`width_multiple` pads the packed rows (few distinct shapes for oneDNN, docs/design/055): the widths are
    multiples, and the learner's gradient, the backend's token scores and the top tokens are the unpadded ones."""
    lists = _lists(tokenizer, prompts)
    longest = max(len(p) + sum(map(len, r)) for p, r in zip(prompts, lists, strict=True))
    assert longest % 16 != 0  # so that padding happens
    assert _Packed(prompts, lists, tokenizer.pad_token_id).ids.shape[1] == longest
    assert _Packed(prompts, lists, tokenizer.pad_token_id, 16).ids.shape[1] == -(-longest // 16) * 16
    with pytest.raises(ValueError, match="width_multiple"):
        _Packed(prompts, lists, tokenizer.pad_token_id, 0)

    def gradient(multiple: int) -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        scores = listed_reply_logprobs(model, prompts, lists, tokenizer.pad_token_id, multiple)
        sum(torch.linspace(-1.0, 2.0, len(s)) @ s for s in scores).backward()  # type: ignore[union-attr]
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]

    for a, b in zip(gradient(16), gradient(1), strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    model.zero_grad(set_to_none=True)
    plain = HFBackend(model, eos_token_ids=[], pad_token_id=tokenizer.pad_token_id)
    padded = HFBackend(model, eos_token_ids=[], pad_token_id=tokenizer.pad_token_id, width_multiple=16)
    for got, want in zip(padded.score_replies(prompts, lists), plain.score_replies(prompts, lists), strict=True):
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(torch.tensor(a), torch.tensor(b), atol=1e-5, rtol=0)
    chosen = [replies[0] for replies in lists]
    with torch.no_grad():
        tops = [reply_top_logprobs(model, prompts, chosen, 3, tokenizer.pad_token_id, m) for m in (16, 1)]
    for row, want_row in zip(*tops, strict=True):
        for position, want in zip(row, want_row, strict=True):
            assert [i for i, _ in position] == [i for i, _ in want]
            torch.testing.assert_close(torch.tensor([v for _, v in position]), torch.tensor([v for _, v in want]))


def test_score_replies_is_the_scorer_without_gradients_token_by_token(
    backend: HFBackend, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]]
) -> None:
    lists = _lists(tokenizer, prompts)
    with torch.no_grad():
        expected = listed_reply_logprobs(model, prompts, lists, tokenizer.pad_token_id)
    got = backend.score_replies(prompts, lists)
    shortest_first = HFBackend(model, eos_token_ids=[], pad_token_id=tokenizer.pad_token_id, batch_size=3)
    for batched, whole in zip(shortest_first.score_replies(prompts, lists), got, strict=True):  # batches of 3
        for a, b in zip(batched, whole, strict=True):  # of the turns shortest first, in the prompts' order
            torch.testing.assert_close(torch.tensor(a), torch.tensor(b), atol=1e-5, rtol=0)
    assert [[len(tokens) for tokens in s] for s in got] == [[len(reply) for reply in r] for r in lists]
    for scores, want, prompt, replies in zip(got, expected, prompts, lists, strict=True):
        torch.testing.assert_close(torch.tensor([sum(tokens) for tokens in scores]), want, atol=1e-5, rtol=0)
        plain = backend.score([prompt] * len(replies), replies)  # each reply's tokens from a forward of its own
        for tokens, reference in zip(scores, plain, strict=True):
            torch.testing.assert_close(torch.tensor(tokens), torch.tensor(reference), atol=1e-4, rtol=0)


def test_attached_teacher_logprobs_are_the_plain_scores(
    backend: HFBackend, tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]]
) -> None:
    """A turn drawn among its listed replies takes its response's token log-probs from the listed forward; a free-text
    turn and one whose response is not listed are scored plainly; all equal `score` on the same tokens."""
    lists = _lists(tokenizer, prompts)
    unlisted = _replies(tokenizer, ["open fridge 1"])[0]
    responses = [lists[0][1], unlisted, lists[2][0], unlisted]
    turns = [
        Turn(prompt, response, [0.0] * len(response), "", "look", "ok", listed=None if i == 3 else lists[i])
        for i, (prompt, response) in enumerate(zip(prompts, responses, strict=True))
    ]
    scored = attach_teacher_logprobs([Trajectory("t", group=0, seed=0, turns=turns)], backend, listed=True)
    assert scored == sum(len(r) for r in responses)
    expected = backend.score(list(prompts), responses)
    for turn, want in zip(turns, expected, strict=True):
        assert turn.logp_teacher is not None
        torch.testing.assert_close(torch.tensor(turn.logp_teacher), torch.tensor(want), atol=1e-4, rtol=0)
    assert turns[3].listed_logp_teacher is None
    assert all(len(t.listed_logp_teacher or []) == len(t.listed or []) for t in turns[:3])


def test_bad_lists_are_refused(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    with pytest.raises(ValueError, match="reply lists"):
        listed_reply_logprobs(model, [[1, 2]], [], tokenizer.pad_token_id)
    with pytest.raises(ValueError, match="non-empty"):
        listed_reply_logprobs(model, [[1, 2]], [[[3], []]], tokenizer.pad_token_id)
    with pytest.raises(ValueError, match="non-empty"):
        listed_reply_logprobs(model, [[]], [[[3]]], tokenizer.pad_token_id)
