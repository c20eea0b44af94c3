"""Tiny random Qwen3 models for tests and the quickstart, written as local Hugging Face folders."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase, Qwen3Config, Qwen3ForCausalLM

from trainer.models.tokenizer import train_tokenizer

MANIFEST = "tiny-models.json"
_FORMAT_VERSION = 1


@dataclass(frozen=True)
class TinySpec:
    """Shape of a tiny Qwen3 model."""

    hidden: int = 64
    """Hidden size (the model width)."""
    layers: int = 2
    """Number of decoder layers."""
    heads: int | None = None
    """Attention heads; None picks hidden // 32 (at least 1)."""


@dataclass(frozen=True)
class TinyModels:
    """Paths of a student and a teacher that share one tokenizer (each folder holds a copy)."""

    student: Path
    teacher: Path
    reused: bool
    """True when the folders already existed with the same texts and shapes."""


def make_tiny_model(
    tokenizer: PreTrainedTokenizerBase,
    *,
    hidden: int = 64,
    layers: int = 2,
    heads: int | None = None,
    seed: int = 0,
    max_positions: int = 8192,
) -> Qwen3ForCausalLM:
    """A randomly initialised fp32 `Qwen3ForCausalLM` sized for `tokenizer` (tied embeddings)."""
    n_heads = heads or max(1, hidden // 32)
    if hidden % n_heads:
        raise ValueError(f"hidden={hidden} is not divisible by heads={n_heads}")
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=3 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=n_heads,
        num_key_value_heads=n_heads,
        head_dim=hidden // n_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.eval()
    return model


def _fingerprint(texts: list[str], vocab_size: int, student: TinySpec, teacher: TinySpec, seed: int) -> str:
    digest = hashlib.sha256()
    header = {"v": _FORMAT_VERSION, "vocab": vocab_size, "s": asdict(student), "t": asdict(teacher), "seed": seed}
    digest.update(json.dumps(header, sort_keys=True).encode())
    for text in texts:
        digest.update(hashlib.sha256(text.encode()).digest())
    return digest.hexdigest()


def _is_complete(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()


def make_tiny_models(
    out_dir: str | Path,
    texts: Iterable[str],
    *,
    student: TinySpec = TinySpec(64, 2),
    teacher: TinySpec = TinySpec(128, 4),
    vocab_size: int = 1024,
    seed: int = 0,
) -> TinyModels:
    """Train one tokenizer on `texts` and write `out_dir/student` and `out_dir/teacher` HF folders.

    Idempotent: when `out_dir` already holds both folders made from the same texts, shapes, vocab
    size and seed (recorded in `out_dir/tiny-models.json`), nothing is rebuilt.
    """
    out = Path(out_dir)
    corpus = list(texts)
    fingerprint = _fingerprint(corpus, vocab_size, student, teacher, seed)
    paths = {"student": out / "student", "teacher": out / "teacher"}
    manifest = out / MANIFEST
    if (
        manifest.is_file()
        and json.loads(manifest.read_text()).get("fingerprint") == fingerprint
        and all(_is_complete(p) for p in paths.values())
    ):
        return TinyModels(paths["student"], paths["teacher"], reused=True)
    tokenizer = train_tokenizer(corpus, vocab_size)
    out.mkdir(parents=True, exist_ok=True)
    specs = {"student": (student, seed), "teacher": (teacher, seed + 1)}
    for name, (spec, model_seed) in specs.items():
        model = make_tiny_model(tokenizer, hidden=spec.hidden, layers=spec.layers, heads=spec.heads, seed=model_seed)
        staging = Path(tempfile.mkdtemp(dir=out, prefix=f".{name}-"))
        try:
            model.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        staging.chmod(0o755)
        shutil.rmtree(paths[name], ignore_errors=True)
        staging.rename(paths[name])
    record = {
        "fingerprint": fingerprint,
        "vocab_size": len(tokenizer),
        "student": asdict(student),
        "teacher": asdict(teacher),
    }
    manifest.write_text(json.dumps(record, indent=2) + "\n")
    return TinyModels(paths["student"], paths["teacher"], reused=False)
