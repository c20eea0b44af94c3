"""Shared fixtures for the models tests: one tokenizer trained on the built-in sample."""

from __future__ import annotations

import pytest
from transformers import PreTrainedTokenizerBase

from trainer.models import train_tokenizer
from trainer.models.corpus import SEED_TEXTS


@pytest.fixture(scope="session")
def tokenizer() -> PreTrainedTokenizerBase:
    return train_tokenizer(SEED_TEXTS, vocab_size=512)
