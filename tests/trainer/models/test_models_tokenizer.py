"""Tokenizer training, chat template, saving/loading and the teacher/student tokenizer check."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import PreTrainedTokenizerBase

from trainer.models import EOS_TOKEN, PAD_TOKEN, TAG_TOKENS, check_same_tokenizer, load_tokenizer, train_tokenizer
from trainer.models.corpus import SEED_TEXTS
from trainer.models.tokenizer import IM_START


@pytest.mark.parametrize(
    "text",
    [
        "You arrive at countertop 1. On the countertop 1, you see a apple 1.",
        "<think>hot pot?</think><action>go to stoveburner 2</action>",
        "unicode is byte-level: café ☕ 42°C\n\ttabs",
    ],
)
def test_round_trip(tokenizer: PreTrainedTokenizerBase, text: str) -> None:
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_tags_and_chat_tokens_are_single_tokens(tokenizer: PreTrainedTokenizerBase) -> None:
    for tag in (*TAG_TOKENS, IM_START, EOS_TOKEN, PAD_TOKEN):
        assert len(tokenizer.encode(tag)) == 1, tag
    ids = tokenizer.encode("<action>open fridge 1</action>")
    assert ids[0] == tokenizer.convert_tokens_to_ids("<action>")
    assert ids[-1] == tokenizer.convert_tokens_to_ids("</action>")
    assert tokenizer.eos_token == EOS_TOKEN and tokenizer.pad_token == PAD_TOKEN
    assert tokenizer.eos_token_id != tokenizer.pad_token_id


def test_skip_special_tokens_keeps_tags_drops_chat_markers(tokenizer: PreTrainedTokenizerBase) -> None:
    ids = [*tokenizer.encode("<action>look</action>"), tokenizer.eos_token_id]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<action>look</action>"


def test_learned_merges_compress_the_training_text(tokenizer: PreTrainedTokenizerBase) -> None:
    text = SEED_TEXTS[0]
    assert len(tokenizer.encode(text)) < len(text.encode()) / 2


def test_training_is_deterministic(tokenizer: PreTrainedTokenizerBase) -> None:
    again = train_tokenizer(SEED_TEXTS, vocab_size=512)
    assert again.backend_tokenizer.to_str() == tokenizer.backend_tokenizer.to_str()


def test_vocab_size_is_a_ceiling() -> None:
    small = train_tokenizer(SEED_TEXTS, vocab_size=300)
    assert len(small) <= 300
    with pytest.raises(ValueError, match="too small"):
        train_tokenizer(SEED_TEXTS, vocab_size=100)


def test_chat_template_renders_chatml(tokenizer: PreTrainedTokenizerBase) -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Your task is to: look."}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nYour task is to: look.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)["input_ids"]
    assert ids == tokenizer.encode(text)
    assert ids.count(tokenizer.convert_tokens_to_ids(IM_START)) == 3


def test_save_and_load_keeps_everything(tokenizer: PreTrainedTokenizerBase, tmp_path: Path) -> None:
    tokenizer.save_pretrained(tmp_path)
    loaded = load_tokenizer(tmp_path)
    check_same_tokenizer(tokenizer, loaded)
    assert loaded.padding_side == "left"
    assert loaded.chat_template == tokenizer.chat_template
    assert loaded.encode("<action>look</action>") == tokenizer.encode("<action>look</action>")


def test_mismatched_tokenizers_raise_a_clear_error(tokenizer: PreTrainedTokenizerBase) -> None:
    other = train_tokenizer(["completely different words, other merges entirely"] * 3 + list(SEED_TEXTS[:2]), 400)
    with pytest.raises(ValueError) as info:
        check_same_tokenizer(tokenizer, other)
    message = str(info.value)
    assert "share one tokenizer" in message
    assert f"vocabulary size {len(tokenizer)} != {len(other)}" in message
    assert "map to different ids" in message


def test_same_size_different_special_tokens_is_named(tokenizer: PreTrainedTokenizerBase, tmp_path: Path) -> None:
    tokenizer.save_pretrained(tmp_path)
    other = load_tokenizer(tmp_path)
    other.pad_token = EOS_TOKEN
    with pytest.raises(ValueError, match=r"pad_token '<\|endoftext\|>' != '<\|im_end\|>'"):
        check_same_tokenizer(tokenizer, other)
