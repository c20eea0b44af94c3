"""The receiving side of gpu-check's `ipc` stage: rebuild exported weights exactly as vLLM 0.33's ipc engine does.

`python -m trainer.gpucheck.ipc_receiver INFOS EXPECTED RESULT` runs in a process of its own (CUDA IPC
opens handles of another process). For each chunk's `update_info` it applies the checks of vLLM's
`IPCWeightTransferUpdateInfo.__post_init__` and the unpacked branch of
`IPCWeightTransferEngine.receive_weights` (vllm/distributed/weight_transfer/ipc_engine.py, 0.33.0,
lines 60-110 and 182-245): the handle is looked up by this device's UUID
(`torch.cuda.get_device_properties(index).uuid`), argument 6 of `reduce_tensor`'s tuple is overwritten
with this device's index, and `rebuild_cuda_tensor(*args)` opens the tensor. Where vLLM would then call
`model.load_weights`, this writes each tensor's dtype, shape and SHA-256 to RESULT for the exporter to
compare bitwise.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import sys
from pathlib import Path
from typing import Any

import torch
from torch.multiprocessing.reductions import rebuild_cuda_tensor


def digest(tensor: torch.Tensor) -> str:
    """SHA-256 of a tensor's bytes (as laid out contiguously on the CPU)."""
    return hashlib.sha256(tensor.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes()).hexdigest()


def check_update_info(info: dict[str, Any]) -> None:
    """vLLM's `IPCWeightTransferUpdateInfo` validation of an unpacked update (ipc_engine.py:84-110)."""
    names, handles = info["names"], info.get("ipc_handles")
    if handles is None:
        raise ValueError("Either `ipc_handles` or `ipc_handles_pickled` must be provided")
    for key in ("dtype_names", "shapes"):
        if len(info[key]) != len(names):
            raise ValueError(f"`{key}` should be of the same size as `names`")
    if not isinstance(handles, list) or len(handles) != len(names):
        raise ValueError("`ipc_handles` should be of the same size as `names`")


def receive(info: dict[str, Any], device_index: int) -> list[tuple[str, torch.Tensor]]:
    """The tensors of one unpacked update, rebuilt on `device_index` (ipc_engine.py:222-245)."""
    check_update_info(info)
    weights = []
    for name, ipc_handle in zip(info["names"], info["ipc_handles"], strict=True):
        physical_gpu_id = str(torch.cuda.get_device_properties(device_index).uuid)
        if physical_gpu_id not in ipc_handle:
            raise ValueError(f"IPC handle not found for GPU UUID {physical_gpu_id}; have {list(ipc_handle)}")
        list_args = list(ipc_handle[physical_gpu_id])
        list_args[6] = device_index  # reduce_tensor's device index, replaced by the receiver's
        weights.append((name, rebuild_cuda_tensor(*list_args)))
    return weights


def main(argv: list[str]) -> int:
    infos_path, expected_path, result_path = map(Path, argv)
    torch.cuda.set_device(0)
    infos = pickle.loads(infos_path.read_bytes())  # written by our parent process for us, not the wire
    expected = json.loads(expected_path.read_text())
    received: dict[str, dict[str, Any]] = {}
    for info in infos:
        for (name, tensor), dtype_name, shape in zip(
            receive(info, 0), info["dtype_names"], info["shapes"], strict=True
        ):
            announced = tensor.dtype == getattr(torch, dtype_name) and list(tensor.shape) == shape
            received[name] = {"sha256": digest(tensor), "announced": announced, "device": str(tensor.device)}
    torch.cuda.synchronize()
    equal = [n for n, want in expected.items() if received.get(n, {}).get("sha256") == want]
    result = {
        "chunks": len(infos),
        "tensors": len(received),
        "bitwise_equal": len(equal),
        "expected": len(expected),
        "announced_dtype_and_shape": sum(r["announced"] for r in received.values()),
        "devices": sorted({r["device"] for r in received.values()}),
    }
    result_path.write_text(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
