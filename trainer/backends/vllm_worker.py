"""Worker-side weight loading for the vLLM backend (`worker_extension_cls`).

vLLM mixes this class into each worker (GPU or CPU), so `llm.collective_rpc("envhub_load_weights", ...)` runs the
method below in every worker process. Kept free of module-level vLLM imports so it imports anywhere.

One in-process update is one layerwise-reload session, as vLLM's own weight-transfer engines hold it (their
`start_weight_update` / `finish_weight_update`, distributed/weight_transfer/ipc_engine.py): `envhub_start_load`
puts every layer back into its checkpoint layout (vLLM's CPU build repacks linear weights for its GEMM kernels
after loading, so a plain `load_weights` into the loaded model fails: `'Parameter' object has no attribute
'weight_loader'`), each bucket goes through the model's own `load_weights` (HF names, fused QKV etc.), a layer is
processed once all its weights arrived, and `envhub_finish_load` finalises the rest. A layer split across two
buckets is therefore never processed half-loaded.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor


class WeightSyncExtension:
    """Adds `envhub_start_load`, `envhub_load_weights` and `envhub_finish_load` to vLLM workers."""

    model_runner: Any  # provided by the vLLM worker this class is mixed into
    vllm_config: Any

    def envhub_start_load(self) -> None:
        """Open a layerwise reload of the whole model (vLLM's `initialize_layerwise_reload`)."""
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        initialize_layerwise_reload(self.model_runner.get_model())

    def envhub_load_weights(self, named_tensors: list[tuple[str, Tensor]]) -> int:
        """Load one bucket of HF-named tensors through the model's own `load_weights`."""
        loaded = self.model_runner.get_model().load_weights(weights=named_tensors)
        return len(loaded) if loaded is not None else len(named_tensors)

    def envhub_finish_load(self) -> None:
        """Process the layers still pending and close the reload (vLLM's `finalize_layerwise_reload`)."""
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        finalize_layerwise_reload(self.model_runner.get_model(), self.vllm_config.model_config)
