"""HFBackend on a tiny random Qwen3: exact log-probs, seeded sampling, top-k, stops, scoring, weight sync."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.backends import Generation, GenerationBackend, HFBackend, ScoringBackend, make_backend
from trainer.backends.base import SamplingSettings
from trainer.models import make_tiny_model


def _teacher_forced(model: PreTrainedModel, prompt: list[int], response: list[int]) -> torch.Tensor:
    """Log-probs of `response` from one fresh, unpadded forward pass over prompt + response."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
    return logp.gather(-1, ids[0, 1:, None]).squeeze(-1)[len(prompt) - 1 :]


def test_backend_satisfies_both_protocols(backend: HFBackend) -> None:
    assert isinstance(backend, GenerationBackend)
    assert isinstance(backend, ScoringBackend)


@pytest.mark.parametrize(("temperature", "top_p", "top_k"), [(1.0, 1.0, 0), (0.7, 0.9, 40)])
def test_generation_logprobs_equal_teacher_forced(
    backend: HFBackend, model: PreTrainedModel, prompts: list[list[int]], temperature: float, top_p: float, top_k: int
) -> None:
    gens = backend.generate(
        prompts, SamplingSettings(max_new_tokens=12, temperature=temperature, top_p=top_p, top_k=top_k, seed=7)
    )
    for prompt, gen in zip(prompts, gens, strict=True):
        assert len(gen.token_ids) == len(gen.logprobs) > 0
        expected = _teacher_forced(model, prompt, gen.token_ids)
        torch.testing.assert_close(torch.tensor(gen.logprobs), expected, atol=1e-4, rtol=0)


def test_score_equals_manual_forward(backend: HFBackend, model: PreTrainedModel, prompts: list[list[int]]) -> None:
    responses = [[5, 6, 7], [], [100, 200], [42] * 9]
    scores = backend.score(prompts, responses)
    assert [len(s) for s in scores] == [len(r) for r in responses]
    for prompt, response, score in zip(prompts, responses, scores, strict=True):
        if response:
            torch.testing.assert_close(torch.tensor(score), _teacher_forced(model, prompt, response), atol=1e-4, rtol=0)


def test_seeded_sampling_is_reproducible(backend: HFBackend, prompts: list[list[int]]) -> None:
    first = backend.generate(prompts, SamplingSettings(max_new_tokens=10, temperature=1.0, seed=123))
    again = backend.generate(prompts, SamplingSettings(max_new_tokens=10, temperature=1.0, seed=123))
    other = backend.generate(prompts, SamplingSettings(max_new_tokens=10, temperature=1.0, seed=124))
    assert [g.token_ids for g in first] == [g.token_ids for g in again]
    assert [g.token_ids for g in first] != [g.token_ids for g in other]


def test_identical_prompts_in_one_batch_get_different_samples(backend: HFBackend, prompts: list[list[int]]) -> None:
    gens = backend.generate([prompts[0]] * 4, SamplingSettings(max_new_tokens=10, temperature=1.0, seed=5))
    assert len({tuple(g.token_ids) for g in gens}) > 1


def test_top_logprobs_sorted_and_contain_sampled_token(backend: HFBackend, prompts: list[list[int]]) -> None:
    k = 20
    gens = backend.generate(prompts, SamplingSettings(max_new_tokens=10, temperature=1.0, top_logprobs=k, seed=3))
    in_top = 0
    for gen in gens:
        assert gen.top_logprobs is not None and len(gen.top_logprobs) == len(gen.token_ids)
        for token, logprob, top in zip(gen.token_ids, gen.logprobs, gen.top_logprobs, strict=True):
            values = [lp for _, lp in top]
            assert len(top) == k and values == sorted(values, reverse=True)
            ids = [tok for tok, _ in top]
            if logprob > values[-1]:
                assert token in ids
                assert dict(top)[token] == pytest.approx(logprob, abs=1e-6)
                in_top += 1
            elif logprob < values[-1]:
                assert token not in ids
    assert in_top > 0
    assert (
        backend.generate(prompts, SamplingSettings(max_new_tokens=2, temperature=1.0, seed=3))[0].top_logprobs is None
    )


def test_greedy_at_temperature_zero(backend: HFBackend, prompts: list[list[int]]) -> None:
    a = backend.generate(prompts, SamplingSettings(max_new_tokens=8, temperature=0.0, top_logprobs=1, seed=1))
    b = backend.generate(prompts, SamplingSettings(max_new_tokens=8, temperature=0.0, seed=2))
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    for gen in a:
        assert gen.top_logprobs is not None
        assert [top[0][0] for top in gen.top_logprobs] == gen.token_ids


def test_max_new_tokens_is_respected(backend: HFBackend, prompts: list[list[int]]) -> None:
    for gen in backend.generate(prompts, SamplingSettings(max_new_tokens=5, temperature=1.0, seed=0)):
        assert len(gen.token_ids) == 5 and gen.finish_reason == "length"


def test_stops_at_eos_and_at_stop_strings(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]]
) -> None:
    plain = HFBackend(model, eos_token_ids=[], pad_token_id=tokenizer.pad_token_id)
    free = plain.generate(prompts[:1], SamplingSettings(max_new_tokens=8, temperature=0.0))[0].token_ids
    cut = free.index(free[3]) + 1  # first position where the fourth token appears
    as_eos = HFBackend(model, eos_token_ids=[free[3]], pad_token_id=tokenizer.pad_token_id)
    stopped = as_eos.generate(prompts[:1], SamplingSettings(max_new_tokens=8, temperature=0.0))[0]
    assert stopped.token_ids == free[:cut] and stopped.finish_reason == "stop"

    stop_text = tokenizer.decode(free[4:6])
    by_string = HFBackend(
        model, eos_token_ids=[], pad_token_id=tokenizer.pad_token_id, tokenizer=tokenizer, stop=[stop_text]
    )
    result = by_string.generate(prompts[:1], SamplingSettings(max_new_tokens=8, temperature=0.0))[0]
    assert result.finish_reason == "stop"
    assert tokenizer.decode(result.token_ids).endswith(stop_text)
    assert result.token_ids == free[: len(result.token_ids)] and len(result.token_ids) <= 6


def test_single_token_stop_string_needs_no_decoding(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    backend = HFBackend(model, eos_token_ids=[], pad_token_id=0, tokenizer=tokenizer, stop=["</action>"])
    gen = Generation([tokenizer.convert_tokens_to_ids("</action>")], [0.0], None, "stop")
    assert backend._stop.stopped(gen.token_ids) and backend._stop.strings == []


def test_update_weights_switches_the_model(
    backend: HFBackend, tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]]
) -> None:
    other = make_tiny_model(tokenizer, hidden=64, layers=2, seed=11)
    reference = HFBackend(other, eos_token_ids=[], pad_token_id=tokenizer.pad_token_id)
    fresh = HFBackend(make_tiny_model(tokenizer, seed=0), eos_token_ids=[], pad_token_id=tokenizer.pad_token_id)
    want = reference.score(prompts, [[5, 6, 7]] * len(prompts))
    assert fresh.score(prompts, [[5, 6, 7]] * len(prompts)) != want
    fresh.update_weights(other.state_dict())
    assert fresh.score(prompts, [[5, 6, 7]] * len(prompts)) == want
    with pytest.raises(RuntimeError, match="Missing key"):
        fresh.update_weights({})


def test_empty_prompt_is_refused(backend: HFBackend) -> None:
    with pytest.raises(ValueError, match="at least one token"):
        backend.generate([[]], SamplingSettings(max_new_tokens=2, temperature=1.0))


def test_make_backend_from_a_local_folder(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]], tmp_path: Path
) -> None:
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded = make_backend("hf", tmp_path, stop=["</action>"])
    assert isinstance(loaded, HFBackend)
    direct = HFBackend(model, eos_token_ids=[tokenizer.eos_token_id], pad_token_id=tokenizer.pad_token_id)
    torch.testing.assert_close(
        torch.tensor(loaded.score(prompts, [[9, 8]] * 4)), torch.tensor(direct.score(prompts, [[9, 8]] * 4))
    )
    with pytest.raises(ValueError, match="unknown backend 'tgi'"):
        make_backend("tgi", tmp_path)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_vllm_without_the_gpu_extra_names_it(tmp_path: Path) -> None:
    with pytest.raises(ImportError, match=r"\[gpu\] extra"):
        make_backend("vllm", tmp_path)


class _PieceTokenizer:
    """A tokenizer of fixed text pieces, one of which completes `</action>` and carries a newline on."""

    PIECES = ("<action>", "look", "</act", "ion>\n", "ion", ">")

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [2, 4, 5] if text == "</action>" else [self.PIECES.index(text)]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.PIECES[i] for i in ids)


def test_a_stop_string_completed_inside_a_token_stops() -> None:
    from trainer.backends.hf import _StopMatcher

    matcher = _StopMatcher(set(), ["</action>"], _PieceTokenizer())  # type: ignore[arg-type]
    assert not matcher.stopped([0, 1, 2])
    assert matcher.stopped([0, 1, 2, 3])  # "</act" + "ion>\n": the string ends inside the last token
    assert matcher.stopped([0, 1, 2, 4, 5])
