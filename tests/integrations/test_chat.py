"""`ChatTokens` with a real chat template (Qwen3's, as TRL ships it) and without one (raw text)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from transformers import AutoTokenizer

from envhub.client.chat import ChatTokens

QWEN3 = "qwen3.jinja"


@pytest.fixture
def qwen3(tiny: Path) -> Any:
    trl = pytest.importorskip("trl")
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    tokenizer.chat_template = (resources.files(trl) / "chat_templates" / QWEN3).read_text()
    return tokenizer


def test_a_growing_episode_is_the_template_rendering_of_the_conversation(qwen3: Any) -> None:
    tokenizer = qwen3
    chat = ChatTokens(tokenizer, system="Play the game.")
    reply = [*chat.encode("<action>go to fridge 1</action>"), tokenizer.eos_token_id]
    episode = chat.prompt("Task: cool a mug") + reply + chat.feedback("You arrive at fridge 1.", chat.closes(reply))
    conversation = [
        {"role": "system", "content": "Play the game."},
        {"role": "user", "content": "Task: cool a mug"},
        {"role": "assistant", "content": "<action>go to fridge 1</action>"},
        {"role": "user", "content": "You arrive at fridge 1."},
    ]
    rendered = tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    assert tokenizer.decode(episode) == rendered
    assert rendered.endswith("<|im_start|>user\nYou arrive at fridge 1.<|im_end|>\n<|im_start|>assistant\n")
    first = tokenizer.apply_chat_template(conversation[:2], tokenize=False, add_generation_prompt=True)
    assert tokenizer.decode(chat.prompt("Task: cool a mug")) == first


def test_a_reply_cut_before_its_end_of_turn_gets_it_from_the_feedback(qwen3: Any) -> None:
    chat = ChatTokens(qwen3)
    text = qwen3.decode(chat.feedback("next", closed=False))
    assert text == "<|im_end|>\n<|im_start|>user\nnext<|im_end|>\n<|im_start|>assistant\n"
    assert not chat.closes(chat.encode("<action>look</action>"))


def test_a_tokenizer_without_a_template_keeps_raw_text(tiny: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    tokenizer.chat_template = None
    chat = ChatTokens(tokenizer)
    assert not chat.templated
    assert chat.prompt("Task: x\n") == tokenizer.encode("Task: x\n", add_special_tokens=False)
    assert chat.feedback("seen\n") == tokenizer.encode("seen\n", add_special_tokens=False)
