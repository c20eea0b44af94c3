"""Encode one user message with the tokenizer's chat template (generation prompt included)."""

from __future__ import annotations

from typing import Any


def encode_user_turn(tokenizer: Any, text: str, max_tokens: int = 0) -> list[int]:
    """Token ids of `text` as a user turn followed by the assistant generation prompt.

    Uses the tokenizer's chat template when it has one (transformers 5 returns a BatchEncoding),
    else plain encoding. `max_tokens` > 0 keeps only the last `max_tokens` ids (the current
    observation and instructions sit at the end of every template).
    """
    if getattr(tokenizer, "chat_template", None):
        encoded = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
        )
        ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
        ids = list(ids[0]) if ids and isinstance(ids[0], list) else list(ids)
    else:
        ids = list(tokenizer.encode(text, add_special_tokens=False))
    return ids[-max_tokens:] if max_tokens > 0 else ids
