"""Load models and tokenizers from local Hugging Face folders (never from a hub) and compare tokenizers."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

_MISMATCH_SAMPLE = 5

SHARDED_DIR = "sharded"
"""A multi-rank checkpoint's torch.distributed.checkpoint folder: the learner's model shards (keys with
`SHARDED_PREFIX`, the learner's wrapper) and optimizer shards, beside config.json and the tokenizer."""
SHARDED_PREFIX = "lm."


def _local_folder(path: str | Path) -> Path:
    folder = Path(path)
    if not (folder / "config.json").is_file() and not (folder / "tokenizer.json").is_file():
        raise FileNotFoundError(
            f"{folder} is not a local Hugging Face folder (no config.json or tokenizer.json); "
            "models load from local paths only: make one with `trainer make-models` or save one with save_pretrained"
        )
    return folder


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """The tokenizer saved in a local folder, left-padded (the layout batched generation needs)."""
    tokenizer = AutoTokenizer.from_pretrained(_local_folder(path), local_files_only=True)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(
    path: str | Path, *, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
) -> PreTrainedModel:
    """A causal LM from a local folder (an HF model folder, or a sharded multi-rank checkpoint assembled
    here), on `device` in `dtype`, in eval mode."""
    folder = _local_folder(path)
    if (folder / SHARDED_DIR).is_dir():
        model = _from_shards(folder, dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=dtype)
    torch.nn.Module.to(model, device)
    model.eval()
    return model


def _from_shards(folder: Path, dtype: torch.dtype) -> PreTrainedModel:
    """The whole model of a sharded checkpoint, read by this one process (no process group)."""
    import torch.distributed.checkpoint as dcp
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    model: PreTrainedModel = AutoModelForCausalLM.from_config(config, dtype=dtype)
    state = {SHARDED_PREFIX + name: tensor for name, tensor in model.state_dict().items()}
    with warnings.catch_warnings():  # "torch.distributed is ... uninitialized, assuming ... a single process"
        warnings.simplefilter("ignore", UserWarning)
        dcp.load({"model": state}, checkpoint_id=folder / SHARDED_DIR, no_dist=True)
    model.load_state_dict({name.removeprefix(SHARDED_PREFIX): tensor for name, tensor in state.items()})
    return model


def check_same_tokenizer(a: PreTrainedTokenizerBase, b: PreTrainedTokenizerBase) -> None:
    """Raise ValueError naming what differs when teacher and student tokenizers are not the same.

    Compares vocabulary size, the EOS/pad/special tokens and the token -> id mapping (reporting
    a sample of tokens whose ids differ).
    """
    problems: list[str] = []
    if len(a) != len(b):
        problems.append(f"vocabulary size {len(a)} != {len(b)}")
    for attr in ("eos_token", "pad_token", "bos_token"):
        if getattr(a, attr) != getattr(b, attr):
            problems.append(f"{attr} {getattr(a, attr)!r} != {getattr(b, attr)!r}")
    if sorted(a.all_special_tokens) != sorted(b.all_special_tokens):
        only_a = sorted(set(a.all_special_tokens) - set(b.all_special_tokens))
        only_b = sorted(set(b.all_special_tokens) - set(a.all_special_tokens))
        problems.append(f"special tokens differ: only in first {only_a}, only in second {only_b}")
    vocab_a, vocab_b = a.get_vocab(), b.get_vocab()
    differing = sorted(tok for tok in vocab_a.keys() | vocab_b.keys() if vocab_a.get(tok) != vocab_b.get(tok))
    if differing:
        sample = ", ".join(f"{tok!r}: {vocab_a.get(tok)} vs {vocab_b.get(tok)}" for tok in differing[:_MISMATCH_SAMPLE])
        problems.append(f"{len(differing)} tokens map to different ids (e.g. {sample})")
    if problems:
        raise ValueError(
            "teacher and student must share one tokenizer (teacher log-probs are compared token by token): "
            + "; ".join(problems)
        )
