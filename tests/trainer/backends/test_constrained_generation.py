"""HFBackend's constrained generation (`rollout.action_match: constrained` / `choice`) on a tiny random Qwen3: every
response is one of its prompt's allowed sequences, the log-probs stay the model's own (unmasked), greedy picks the
most likely allowed token at each step (`tokens`) or the most likely allowed reply (`replies`), replies are drawn
by their probability, and free prompts in the same batch are untouched."""

from __future__ import annotations

from typing import Literal

import pytest
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.backends import HFBackend, hf
from trainer.backends.base import SamplingSettings
from trainer.backends.constraint import ReplyConstraint, mask_disallowed


def _teacher_forced(model: PreTrainedModel, prompt: list[int], response: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
    return logp[len(prompt) - 1 :]


def _allowed(tokenizer: PreTrainedTokenizerBase, texts: list[str]) -> list[list[int]]:
    return [[*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id] for text in texts]


ACTIONS = ["go to drawer 1", "go to drawer 2", "go to countertop 1", "take apple 1 from countertop 1", "look"]


@pytest.mark.parametrize("constrain", ["tokens", "replies"])
@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_every_response_is_an_allowed_sequence_with_unmasked_logprobs(
    backend: HFBackend,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[list[int]],
    temperature: float,
    constrain: Literal["tokens", "replies"],
) -> None:
    allowed = _allowed(tokenizer, ACTIONS[:2])  # replies of one length: a random model's draws vary among them
    seen = set()
    for seed in range(6):
        sampling = SamplingSettings(max_new_tokens=32, temperature=temperature, seed=seed, constrain=constrain)
        gens = backend.generate(prompts, sampling, [allowed] * len(prompts))
        for prompt, gen in zip(prompts, gens, strict=True):
            assert gen.token_ids in allowed and gen.finish_reason == "stop"
            expected = _teacher_forced(model, prompt, gen.token_ids)
            taken = expected.gather(-1, torch.tensor(gen.token_ids)[:, None]).squeeze(-1)
            torch.testing.assert_close(torch.tensor(gen.logprobs), taken, atol=1e-4, rtol=0)
            seen.add(tuple(gen.token_ids))
    assert len(seen) > 1  # sampling, not a fixed pick


def test_greedy_takes_the_most_likely_allowed_token_at_each_step(
    backend: HFBackend, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]]
) -> None:
    allowed = _allowed(tokenizer, ACTIONS)
    gens = backend.generate(prompts, SamplingSettings(max_new_tokens=32, temperature=0.0), [allowed] * len(prompts))
    for prompt, gen in zip(prompts, gens, strict=True):
        logp = _teacher_forced(model, prompt, gen.token_ids)
        constraint = ReplyConstraint(allowed)
        for step, token in enumerate(gen.token_ids):
            options = constraint.next_tokens()
            assert token == max(options, key=lambda t: logp[step, t].item())
            constraint.advance(token)
        assert constraint.exhausted


def test_greedy_replies_take_the_most_likely_allowed_reply(
    backend: HFBackend, tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]]
) -> None:
    allowed = _allowed(tokenizer, ACTIONS)
    sampling = SamplingSettings(temperature=0.0, constrain="replies", top_logprobs=3)
    gens = backend.generate(prompts, sampling, [allowed] * len(prompts))
    for prompt, gen in zip(prompts, gens, strict=True):
        totals = [sum(s) for s in backend.score([prompt] * len(allowed), allowed)]
        assert gen.token_ids == allowed[totals.index(max(totals))]
        assert gen.listed_logprobs == pytest.approx(totals, abs=1e-4)  # the scores the draw used, recorded
        assert gen.top_logprobs is not None and len(gen.top_logprobs) == len(gen.token_ids)
        assert all(top[0][1] >= lp - 1e-5 for top, lp in zip(gen.top_logprobs, gen.logprobs, strict=True))


def test_replies_are_drawn_by_their_probability_normalised_over_the_allowed(
    backend: HFBackend, tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]]
) -> None:
    """400 draws at T = 20 from one prompt: each reply's frequency within 4 standard errors of P(reply)^(1/T)
    normalised over the allowed (here about 0.15, 0.15 and 0.7: the random model favours the shorter reply)."""
    allowed = _allowed(tokenizer, ACTIONS[:3])
    totals = torch.tensor([sum(s) for s in backend.score([prompts[1]] * 3, allowed)])
    expected = torch.softmax(totals / 20, dim=0)
    draws = 400
    counts = torch.zeros(3)
    for seed in range(draws // 20):
        sampling = SamplingSettings(temperature=20.0, seed=seed, constrain="replies")
        for gen in backend.generate([prompts[1]] * 20, sampling, [allowed] * 20):
            counts[allowed.index(gen.token_ids)] += 1
    error = (expected * (1 - expected) / draws).sqrt()
    assert ((counts / draws - expected).abs() <= 4 * error + 1e-3).all(), (counts / draws, expected)


@pytest.mark.parametrize("constrain", ["tokens", "replies"])
def test_free_prompts_in_a_constrained_batch_generate_as_without_constraints(
    backend: HFBackend,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[list[int]],
    constrain: Literal["tokens", "replies"],
) -> None:
    sampling = SamplingSettings(max_new_tokens=10, temperature=0.0, constrain=constrain)
    free = backend.generate(prompts, sampling)
    mixed = backend.generate(prompts, sampling, [None, _allowed(tokenizer, ["look"]), None, None])
    assert [g.token_ids for i, g in enumerate(mixed) if i != 1] == [g.token_ids for i, g in enumerate(free) if i != 1]
    assert mixed[1].token_ids == _allowed(tokenizer, ["look"])[0]


def test_a_response_ends_when_its_allowed_sequence_is_complete_without_a_stop_token(
    backend: HFBackend, tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]]
) -> None:
    bare = [tokenizer.encode("look", add_special_tokens=False)]  # no EOS: the sequence's end stops it
    gens = backend.generate(prompts[:1], SamplingSettings(max_new_tokens=32, seed=0), [bare])
    assert gens[0].token_ids == bare[0] and gens[0].finish_reason == "stop"


def test_bad_allowed_lists_are_refused(backend: HFBackend, prompts: list[list[int]]) -> None:
    with pytest.raises(ValueError, match="allowed-reply lists"):
        backend.generate(prompts, SamplingSettings(max_new_tokens=4), [[[1, 2]]])
    with pytest.raises(ValueError, match="at least one non-empty"):
        backend.generate(prompts[:1], SamplingSettings(max_new_tokens=4), [[[]]])
    with pytest.raises(ValueError, match="non-empty token sequences"):
        backend.generate(prompts[:1], SamplingSettings(constrain="replies"), [[[5], []]])


def test_mask_leaves_unconstrained_and_finished_rows_alone() -> None:
    logits = torch.zeros(3, 6)
    constraint = ReplyConstraint([[1, 2], [1, 3]])
    masked = mask_disallowed(logits, [constraint, None, ReplyConstraint([[4]])], rows=[0, 1])
    assert torch.isfinite(masked[0]).tolist() == [False, True, False, False, False, False]
    assert torch.isfinite(masked[1:]).all()  # row 1 free, row 2 not among the active rows
    constraint.advance(1)
    assert constraint.next_tokens() == [2, 3]


def test_replies_scored_in_groups_choose_as_in_one_batch(
    backend: HFBackend, tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prompts whose listed replies exceed `REPLY_BATCH_TOKENS` together are scored a group at a time (here one
    prompt each): the same draws, log-probs and top-k as one batch, and as a plain forward of prompt + reply."""
    allowed = _allowed(tokenizer, ACTIONS)
    sampling = SamplingSettings(temperature=1.0, seed=5, constrain="replies", top_logprobs=2)
    whole = backend.generate(prompts, sampling, [allowed] * len(prompts))
    monkeypatch.setattr(hf, "REPLY_BATCH_TOKENS", 1)
    grouped = backend.generate(prompts, sampling, [allowed] * len(prompts))
    for prompt, one, other in zip(prompts, whole, grouped, strict=True):
        assert one.token_ids == other.token_ids and one.top_logprobs is not None and other.top_logprobs is not None
        torch.testing.assert_close(torch.tensor(one.logprobs), torch.tensor(other.logprobs), atol=1e-5, rtol=0)
        assert [t for t, _ in one.top_logprobs[0]] == [t for t, _ in other.top_logprobs[0]]
        plain = _teacher_forced(backend.model, prompt, one.token_ids)
        torch.testing.assert_close(
            torch.tensor(one.logprobs),
            plain.gather(-1, torch.tensor(one.token_ids)[:, None]).squeeze(-1),
            atol=1e-5,
            rtol=0,
        )
        top = torch.topk(plain, 2, dim=-1)
        assert [[t for t, _ in position] for position in one.top_logprobs] == top.indices.tolist()
