"""Pure parts of pushing learner weights into vLLM: cast, bucket, and the name/dtype/shape payload.

vLLM 0.33's weight-transfer engines (`init_weight_transfer_engine` / `start_weight_update` /
`update_weights` / `finish_weight_update`) take per chunk an `update_info` with `names`,
`dtype_names` (e.g. "bfloat16", read back with `getattr(torch, name)`) and `shapes`
(/work/shared/design/GPU-FACTS.md section 1); the in-process engine path loads `(name, tensor)`
lists bucket by bucket. Both send bf16 tensors in buckets of bounded size.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch

DEFAULT_BUCKET_BYTES = 2048 * 1024 * 1024
"""verl's `update_weights_bucket_megabytes=2048` (GPU-FACTS section 4)."""


def cast_for_engine(state_dict: Mapping[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Floating-point tensors in the engine's `dtype` (others untouched), contiguous, on their device."""
    return {
        name: (t.detach().to(dtype) if t.is_floating_point() else t.detach()).contiguous()
        for name, t in state_dict.items()
    }


def buckets(tensors: Mapping[str, torch.Tensor], bucket_bytes: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Consecutive `(name, tensor)` groups of at most `bucket_bytes` (a larger tensor goes alone)."""
    if bucket_bytes <= 0:
        raise ValueError("bucket_bytes must be positive")
    current: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        if current and size + nbytes > bucket_bytes:
            yield current
            current, size = [], 0
        current.append((name, tensor))
        size += nbytes
    if current:
        yield current


def update_info(bucket: list[tuple[str, torch.Tensor]]) -> dict[str, Any]:
    """The `update_info` describing one bucket for vLLM's nccl/ipc weight-transfer engines."""
    return {
        "names": [name for name, _ in bucket],
        "dtype_names": [str(t.dtype).removeprefix("torch.") for _, t in bucket],
        "shapes": [list(t.shape) for _, t in bucket],
    }
