"""Encode user turns with the tokenizer's chat template (instruct models), or as raw text (no template).

A tokenizer with a `chat_template` (instruct models: SmolLM2-Instruct, Qwen, the tiny models'
ChatML) gets every user message wrapped by that template, with the assistant generation prompt
after it and whatever the template adds before the first message (SmolLM2's default system
prompt). A tokenizer without one (a base model) gets the text encoded as it is. Both are
`envhub.client.chat.ChatTokens`, the encoding the token-level adapters use.
"""

from __future__ import annotations

from typing import Any

from envhub.client.chat import ChatTokens


def has_chat_template(tokenizer: Any) -> bool:
    """Whether `tokenizer` carries a chat template (prompts then go through it)."""
    return ChatTokens(tokenizer).templated


def encode_user_turn(tokenizer: Any, text: str, max_tokens: int = 0) -> list[int]:
    """Token ids of `text` as the first user turn followed by the assistant generation prompt.

    `max_tokens` > 0 keeps only the last `max_tokens` ids (the current observation and instructions
    sit at the end of every template).
    """
    ids = ChatTokens(tokenizer).prompt(text)
    return ids[-max_tokens:] if max_tokens > 0 else ids


def encode_follow_up(tokenizer: Any, text: str, closed: bool = True) -> list[int]:
    """Token ids that continue a chat after a generated assistant turn: the rest of the template's
    assistant-turn closing (all of it when the turn did not end with EOS, `closed=False`: e.g. it stopped at
    `</action>`), `text` as a user turn, and the generation prompt.

    Unlike `encode_user_turn`, nothing the template puts before the first message (a default system
    prompt) is repeated. Without a template: `text` encoded as it is.
    """
    return ChatTokens(tokenizer).feedback(text, closed=closed)
