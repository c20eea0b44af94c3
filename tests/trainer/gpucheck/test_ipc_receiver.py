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
