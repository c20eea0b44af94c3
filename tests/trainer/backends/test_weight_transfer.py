"""Weight-push payloads for vLLM: bf16 cast and bounded buckets (chunk plans and update_info:
tests/trainer/workers/test_weight_sync.py)."""

from __future__ import annotations

import pytest
import torch

from trainer.backends.weight_transfer import buckets, cast_for_engine


def test_buckets_keep_order_respect_the_budget_and_send_large_tensors_alone() -> None:
    tensors = {"a": torch.zeros(10), "b": torch.zeros(20), "c": torch.zeros(100), "d": torch.zeros(5)}
    groups = list(buckets(tensors, bucket_bytes=4 * 30))
    assert [[n for n, _ in g] for g in groups] == [["a", "b"], ["c"], ["d"]]
    with pytest.raises(ValueError):
        list(buckets(tensors, 0))


def test_cast_for_engine_casts_floats_only() -> None:
    weights = cast_for_engine({"w": torch.randn(3, 4), "step": torch.tensor([7])}, torch.bfloat16)
    assert weights["w"].dtype == torch.bfloat16 and weights["step"].dtype == torch.int64
