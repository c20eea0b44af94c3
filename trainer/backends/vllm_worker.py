"""Worker-side weight loading for the vLLM backend (`worker_extension_cls`).

vLLM mixes this class into each GPU worker, so `llm.collective_rpc("envhub_load_weights", ...)`
runs the method below in every worker process. Kept free of vLLM imports so it imports anywhere.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor


class WeightSyncExtension:
    """Adds `envhub_load_weights` to vLLM workers."""

    model_runner: Any  # provided by the vLLM worker this class is mixed into

    def envhub_load_weights(self, named_tensors: list[tuple[str, Tensor]]) -> int:
        """Load HF-named tensors through the model's own `load_weights` (handles fused QKV etc.)."""
        loaded = self.model_runner.model.load_weights(weights=named_tensors)
        return len(loaded) if loaded is not None else len(named_tensors)
