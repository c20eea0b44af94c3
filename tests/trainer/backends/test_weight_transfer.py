"""Weight-push payloads for vLLM: bf16 cast, bounded buckets, names/dtypes/shapes that vLLM reads back."""

from __future__ import annotations

import pytest
import torch

from trainer.backends.weight_transfer import buckets, cast_for_engine, update_info


def test_buckets_keep_order_respect_the_budget_and_send_large_tensors_alone() -> None:
    tensors = {"a": torch.zeros(10), "b": torch.zeros(20), "c": torch.zeros(100), "d": torch.zeros(5)}
    groups = list(buckets(tensors, bucket_bytes=4 * 30))
    assert [[n for n, _ in g] for g in groups] == [["a", "b"], ["c"], ["d"]]
    with pytest.raises(ValueError):
        list(buckets(tensors, 0))


def test_update_info_round_trips_dtype_and_shape() -> None:
    weights = cast_for_engine({"w": torch.randn(3, 4), "step": torch.tensor([7])}, torch.bfloat16)
    assert weights["w"].dtype == torch.bfloat16 and weights["step"].dtype == torch.int64
    info = update_info(list(weights.items()))
    assert info == {"names": ["w", "step"], "dtype_names": ["bfloat16", "int64"], "shapes": [[3, 4], [1]]}
    # vLLM rebuilds each tensor with getattr(torch, dtype_name) and the shape (GPU-FACTS section 1).
    for dtype_name, shape, (_, tensor) in zip(info["dtype_names"], info["shapes"], weights.items(), strict=True):
        assert torch.empty(shape, dtype=getattr(torch, dtype_name)).shape == tensor.shape
