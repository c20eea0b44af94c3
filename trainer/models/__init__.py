"""Tokenizer training, tiny model creation, local loading and the teacher/student tokenizer check."""

from trainer.models.cli import main_make_models
from trainer.models.gguf import load_gguf, smollm2_gguf_path
from trainer.models.loading import check_same_tokenizer, load_model, load_tokenizer
from trainer.models.tiny import TinyModels, TinySpec, make_tiny_model, make_tiny_models
from trainer.models.tokenizer import CHAT_TEMPLATE, EOS_TOKEN, PAD_TOKEN, TAG_TOKENS, train_tokenizer

__all__ = [
    "CHAT_TEMPLATE",
    "EOS_TOKEN",
    "PAD_TOKEN",
    "TAG_TOKENS",
    "TinyModels",
    "TinySpec",
    "check_same_tokenizer",
    "load_gguf",
    "load_model",
    "load_tokenizer",
    "main_make_models",
    "make_tiny_model",
    "make_tiny_models",
    "smollm2_gguf_path",
    "train_tokenizer",
]
