"""Tiny Qwen3 creation, the student/teacher folders, loading and the make-models entry point."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import PreTrainedTokenizerBase, Qwen3ForCausalLM

from trainer.models import (
    TinySpec,
    check_same_tokenizer,
    load_model,
    load_tokenizer,
    main_make_models,
    make_tiny_model,
    make_tiny_models,
)
from trainer.models.corpus import SEED_TEXTS

SMALL = {"student": TinySpec(32, 1), "teacher": TinySpec(64, 2)}


def test_tiny_model_forward(tokenizer: PreTrainedTokenizerBase) -> None:
    model = make_tiny_model(tokenizer, hidden=64, layers=2, seed=0)
    assert isinstance(model, Qwen3ForCausalLM)
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 64
    ids = torch.tensor([tokenizer.encode(SEED_TEXTS[0])[:20]] * 3)
    logits = model(input_ids=ids).logits
    assert logits.shape == (3, 20, len(tokenizer))
    assert torch.isfinite(logits).all()
    assert model.config.eos_token_id == tokenizer.eos_token_id


def test_tiny_model_init_is_seeded(tokenizer: PreTrainedTokenizerBase) -> None:
    a = make_tiny_model(tokenizer, seed=1).state_dict()
    b = make_tiny_model(tokenizer, seed=1).state_dict()
    c = make_tiny_model(tokenizer, seed=2).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["model.embed_tokens.weight"], c["model.embed_tokens.weight"])


def test_bad_head_count_is_refused(tokenizer: PreTrainedTokenizerBase) -> None:
    with pytest.raises(ValueError, match="not divisible"):
        make_tiny_model(tokenizer, hidden=64, heads=3)


def test_make_tiny_models_writes_loadable_folders_and_reuses_them(tmp_path: Path) -> None:
    made = make_tiny_models(tmp_path, SEED_TEXTS, vocab_size=400, **SMALL)
    assert not made.reused
    student, teacher = load_model(made.student), load_model(made.teacher)
    assert student.config.hidden_size == 32 and teacher.config.hidden_size == 64
    check_same_tokenizer(load_tokenizer(made.student), load_tokenizer(made.teacher))
    stamp = (made.student / "model.safetensors").stat().st_mtime_ns

    again = make_tiny_models(tmp_path, SEED_TEXTS, vocab_size=400, **SMALL)
    assert again.reused
    assert (made.student / "model.safetensors").stat().st_mtime_ns == stamp

    changed = make_tiny_models(tmp_path, [*SEED_TEXTS, "a new observation"], vocab_size=400, **SMALL)
    assert not changed.reused


def test_main_make_models_reads_text_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(SEED_TEXTS) + "\n")
    argv = ["--out", str(tmp_path / "m"), "--texts", str(texts), "--vocab-size", "400"]
    argv += ["--student-hidden", "32", "--student-layers", "1", "--teacher-hidden", "64", "--teacher-layers", "1"]
    assert main_make_models(argv) == 0
    assert "(written)" in capsys.readouterr().out
    assert main_make_models(argv) == 0
    assert "(reused)" in capsys.readouterr().out
    assert load_model(tmp_path / "m" / "teacher").config.num_hidden_layers == 1


def test_loading_refuses_a_non_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="local Hugging Face folder"):
        load_model(tmp_path / "nowhere")
