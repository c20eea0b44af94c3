"""Load models and tokenizers from local Hugging Face folders (never from a hub) and compare tokenizers."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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


SAFETENSORS_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def _safetensors_index(file: Path) -> tuple[int, dict[str, dict[str, Any]]]:
    """A safetensors file's data offset and header (name -> dtype, shape, data_offsets)."""
    with file.open("rb") as handle:
        size = int.from_bytes(handle.read(8), "little")
        header = json.loads(handle.read(size))
    header.pop("__metadata__", None)
    return 8 + size, header


def read_weights_into(model: torch.nn.Module, path: str | Path) -> bool:
    """Copy the weights saved in a local HF folder's safetensors files into `model`'s own tensors, one tensor at a
    time (cast to their dtype), with plain reads: no second model and no mapping of the files exist meanwhile
    (mapped, a file's pages count in the process's RSS: the hf teacher's wake-up, docs/design/039).
    False, with nothing copied, where the files do not cover every tensor of `model` (tied ones count as covered),
    name one it lacks or of another shape or dtype, or the folder holds none (a sharded checkpoint)."""
    files = sorted(_local_folder(path).glob("*.safetensors"))
    state = model.state_dict()
    index = {file: _safetensors_index(file) for file in files}
    entries = {name: entry for _, header in index.values() for name, entry in header.items()}
    fits = all(
        name in state and list(state[name].shape) == entry["shape"] and entry["dtype"] in SAFETENSORS_DTYPES
        for name, entry in entries.items()
    )
    loaded = {state[name].data_ptr() for name in entries if name in state}
    if not files or not fits or any(t.data_ptr() not in loaded for t in state.values()):
        return False
    with torch.no_grad():
        for file, (offset, header) in index.items():
            with file.open("rb") as handle:
                for name, entry in header.items():
                    begin, end = entry["data_offsets"]
                    handle.seek(offset + begin)
                    raw = torch.empty(end - begin, dtype=torch.uint8)
                    handle.readinto(raw.numpy())  # type: ignore[arg-type]  # an ndarray is a writable buffer
                    state[name].copy_(raw.view(SAFETENSORS_DTYPES[entry["dtype"]]).view(entry["shape"]))
    return True


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


def freeze_embeddings(model: torch.nn.Module) -> int:
    """Stop training `model`'s token embedding table (the output projection too when tied to it); the number of
    parameters frozen (`optim.train_embeddings`)."""
    table = model.get_input_embeddings().weight  # type: ignore[operator]
    table.requires_grad_(False)
    return table.numel()


@contextmanager
def embeddings_frozen(model: torch.nn.Module, frozen: bool = True) -> Iterator[None]:
    """`freeze_embeddings` for the block's duration (nothing when not `frozen`); the table trains again after."""
    if not frozen:
        yield
        return
    freeze_embeddings(model)
    try:
        yield
    finally:
        model.get_input_embeddings().weight.requires_grad_(True)  # type: ignore[operator]


def trainable_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters of `model` that train (those the optimizer holds state for)."""
    return [p for p in model.parameters() if p.requires_grad]
