"""`listed_reply_logprobs` (reply-level OPD's scorer, docs/design/042) on a tiny random Qwen3: every listed reply's
total log-prob equals a forward of prompt + reply (SDPA and eager attention), prompts of different lengths and lists
in one batch; its gradient equals the full forwards' gradient; and `HFBackend.score_replies` returns the same."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.backends import HFBackend
from trainer.backends.listed import listed_reply_logprobs

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


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_each_reply_scores_as_a_forward_of_prompt_and_reply(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]], attention: str
) -> None:
    model = copy.deepcopy(model)
    model.set_attn_implementation(attention)  # boolean mask (SDPA) or additive (eager)
    lists = _lists(tokenizer, prompts)
    with torch.no_grad():
        got = listed_reply_logprobs(model, prompts, lists, tokenizer.pad_token_id)
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


def test_score_replies_is_the_scorer_without_gradients(
    backend: HFBackend, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]]
) -> None:
    lists = _lists(tokenizer, prompts)
    with torch.no_grad():
        expected = listed_reply_logprobs(model, prompts, lists, tokenizer.pad_token_id)
    got = backend.score_replies(prompts, lists)
    assert [len(s) for s in got] == [len(r) for r in lists]
    for scores, want in zip(got, expected, strict=True):
        torch.testing.assert_close(torch.tensor(scores), want, atol=1e-5, rtol=0)


def test_bad_lists_are_refused(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    with pytest.raises(ValueError, match="reply lists"):
        listed_reply_logprobs(model, [[1, 2]], [], tokenizer.pad_token_id)
    with pytest.raises(ValueError, match="non-empty"):
        listed_reply_logprobs(model, [[1, 2]], [[[3], []]], tokenizer.pad_token_id)
    with pytest.raises(ValueError, match="non-empty"):
        listed_reply_logprobs(model, [[]], [[[3]]], tokenizer.pad_token_id)
