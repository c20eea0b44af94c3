"""Weight-push payloads for vLLM: bf16 cast and bounded chunks (chunk plans and update_info:
tests/trainer/workers/test_weight_sync.py)."""

from __future__ import annotations

import pytest
import torch

from trainer.backends.weight_transfer import WeightExport, plan_chunks


def test_chunks_keep_order_respect_the_budget_and_send_large_tensors_alone() -> None:
    sizes = {"a": 40, "b": 80, "c": 400, "d": 20}
    assert plan_chunks(sizes, bucket_bytes=4 * 30) == [["a", "b"], ["c"], ["d"]]
    with pytest.raises(ValueError):
        plan_chunks(sizes, 0)


def test_export_casts_floats_only_one_chunk_at_a_time() -> None:
    state = {"w": torch.randn(3, 4), "step": torch.tensor([7])}
    export = WeightExport(state, torch.bfloat16, bucket_bytes=24)
    assert export.chunks == [["w"], ["step"]]
    (name, weight), (_, step) = export.tensors(0)[0], export.tensors(1)[0]
    assert name == "w" and weight.dtype == torch.bfloat16 and torch.equal(weight, state["w"].to(torch.bfloat16))
    assert step.dtype == torch.int64 and weight.is_contiguous()
