"""Generation and scoring backends: `hf` (transformers, CPU/GPU) and `vllm` (GPU)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainer.backends.base import Generation, GenerationBackend, SamplingSettings, ScoringBackend
from trainer.backends.hf import HFBackend
from trainer.backends.vllm import VLLMBackend

BACKENDS = ("hf", "vllm")


def make_backend(name: str, model_path: str | Path, **kwargs: Any) -> HFBackend | VLLMBackend:
    """Build a backend by name from a local model folder; `kwargs` go to the backend's constructor."""
    if name == "hf":
        return HFBackend.from_pretrained(model_path, **kwargs)
    if name == "vllm":
        return VLLMBackend(model_path, **kwargs)
    raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")


__all__ = [
    "BACKENDS",
    "Generation",
    "GenerationBackend",
    "HFBackend",
    "SamplingSettings",
    "ScoringBackend",
    "VLLMBackend",
    "make_backend",
]
