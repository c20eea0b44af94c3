"""Shared fixtures for the backend tests: a tiny random Qwen3 and its tokenizer, made offline."""

from __future__ import annotations

import pytest
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.backends import HFBackend
from trainer.models import make_tiny_model, train_tokenizer
from trainer.models.corpus import SEED_TEXTS


@pytest.fixture(scope="session")
def tokenizer() -> PreTrainedTokenizerBase:
    return train_tokenizer(SEED_TEXTS, vocab_size=512)


@pytest.fixture(scope="session")
def model(tokenizer: PreTrainedTokenizerBase) -> PreTrainedModel:
    return make_tiny_model(tokenizer, hidden=64, layers=2, seed=0)


@pytest.fixture(scope="session")
def backend(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> HFBackend:
    return HFBackend(model, eos_token_ids=[tokenizer.eos_token_id], pad_token_id=tokenizer.pad_token_id)


@pytest.fixture(scope="session")
def prompts(tokenizer: PreTrainedTokenizerBase) -> list[list[int]]:
    """Prompts of different lengths, so left padding is exercised."""
    texts = ["go to", "You arrive at countertop 1. On the countertop 1, you see", "<think>", "take apple 1 from"]
    return [tokenizer.encode(text) for text in texts]
