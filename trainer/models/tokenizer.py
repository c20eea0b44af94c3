"""A small byte-level BPE tokenizer trained on environment text, with a Qwen-like chat template.

The agent tags (`<think>`, `<action>`, ...) are single tokens so that actions stay short; the chat
markers follow Qwen (`<|im_start|>`, `<|im_end|>` = EOS, `<|endoftext|>` = pad).
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
CHAT_TOKENS: tuple[str, ...] = (PAD_TOKEN, IM_START, EOS_TOKEN)
"""Special tokens of the chat format (ids 0, 1, 2)."""

TAG_TOKENS: tuple[str, ...] = (
    "<think>",
    "</think>",
    "<action>",
    "</action>",
    "<search>",
    "</search>",
    "<answer>",
    "</answer>",
    "<information>",
    "</information>",
)
"""Agent-format tags: single tokens, kept when decoding with `skip_special_tokens=True`."""

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""Qwen's ChatML layout without the system-prompt defaults and tool calls."""


def train_tokenizer(texts: Iterable[str], vocab_size: int = 1024) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on `texts`; deterministic given the texts and `vocab_size`.

    The returned tokenizer has at most `vocab_size` entries: 256 byte symbols, the chat tokens,
    the tag tokens and the learned merges (fewer when the texts hold fewer pairs seen twice).
    """
    corpus = [text for text in texts if text]
    reserved = len(CHAT_TOKENS) + len(TAG_TOKENS)
    minimum = 256 + reserved + 1
    if vocab_size < minimum:
        raise ValueError(f"vocab_size={vocab_size} is too small: a byte-level BPE needs at least {minimum}")
    if not corpus:
        raise ValueError("train_tokenizer needs at least one non-empty text")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TAG_TOKENS),
        special_tokens=list(CHAT_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in TAG_TOKENS])
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        padding_side="left",
        model_max_length=32768,
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped
