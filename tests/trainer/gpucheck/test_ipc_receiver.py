"""The ipc stage's receiver applies vLLM's update-info validation to what our export sends (the CUDA
rebuild itself needs a GPU: `make gpu-check`)."""

from __future__ import annotations

import pytest
import torch

from trainer.backends.weight_transfer import WeightExport
from trainer.gpucheck.ipc_receiver import check_update_info, digest


def test_our_export_passes_vllms_update_info_checks_and_a_short_one_fails() -> None:
    export = WeightExport({"w": torch.randn(4, 8), "b": torch.randn(8)}, torch.bfloat16, bucket_bytes=1024)
    info = export.ipc_info(0)
    check_update_info(info)
    with pytest.raises(ValueError, match="ipc_handles"):
        check_update_info({**info, "ipc_handles": info["ipc_handles"][:1]})
    with pytest.raises(ValueError, match="dtype_names"):
        check_update_info({**info, "dtype_names": []})
    export.release()


def test_digest_is_of_the_bytes() -> None:
    a = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
    assert digest(a) == digest(a.clone()) != digest(a.to(torch.float32))


def test_the_receiver_always_ends_before_its_stage() -> None:
    from trainer.gpucheck.__main__ import STAGES
    from trainer.gpucheck.ipc_check import RECEIVER_MARGIN_S, receiver_timeout

    ipc = next(s for s in STAGES if s.name == "ipc")
    for left in (ipc.min_s, ipc.budget_s, ipc.budget_s * 4, 400.0):
        assert 0 < receiver_timeout(left) <= left - RECEIVER_MARGIN_S
    assert receiver_timeout(float("inf")) == 120.0
