"""The learner's side of pushing weights into vLLM: cast, chunk, IPC handles, NCCL broadcast.

vLLM 0.33's weight-transfer API (docs/design/010-gpu-path.md cites the wheel's source) takes, per
chunk, an `update_info` with `names`, `dtype_names` (read back with `getattr(torch, name)`) and
`shapes`; the `ipc` backend adds `ipc_handles`, one `{gpu_uuid: reduce_tensor args}` per tensor, and
each engine worker opens the handle of its own GPU; the `nccl` backend receives the tensors by a
broadcast from the trainer (rank 0 of a group with the engine workers) while its `update_weights`
call runs. `WeightExport` plans one sync's chunks from the parameters' metadata (no gather), then
materialises one chunk at a time on the learner's device: FSDP2 shards are gathered with
`full_tensor()` (a collective: every learner rank runs it), floats cast to the engine dtype. Nothing
goes through the CPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

DEFAULT_BUCKET_BYTES = 2048 * 1024 * 1024
"""verl's `update_weights_bucket_megabytes=2048` (GPU-FACTS section 4)."""

ENGINE_DTYPE = torch.bfloat16
"""The rollout engines' weight dtype (the vLLM backend's default)."""


def _engine_tensor(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor  # FSDP2 DTensor: all-gather
    return (full.detach().to(dtype) if full.is_floating_point() else full.detach()).contiguous()


def plan_chunks(sizes: Mapping[str, int], bucket_bytes: int) -> list[list[str]]:
    """Consecutive name groups of at most `bucket_bytes` bytes (a larger tensor goes alone)."""
    if bucket_bytes <= 0:
        raise ValueError("bucket_bytes must be positive")
    chunks: list[list[str]] = []
    size = 0
    for name, nbytes in sizes.items():
        if not chunks or (chunks[-1] and size + nbytes > bucket_bytes):
            chunks.append([])
            size = 0
        chunks[-1].append(name)
        size += nbytes
    return chunks


def _info(meta: list[tuple[str, torch.dtype, list[int]]]) -> dict[str, Any]:
    return {
        "names": [name for name, _, _ in meta],
        "dtype_names": [str(dtype).removeprefix("torch.") for _, dtype, _ in meta],
        "shapes": [shape for _, _, shape in meta],
    }


def device_key(device: torch.device) -> str:
    """The key vLLM's ipc engine looks its handle up by: the GPU's UUID ("cpu" for CPU tensors)."""
    if device.type == "cuda":
        return str(torch.cuda.get_device_properties(device).uuid)
    return device.type


def ipc_handle(tensor: torch.Tensor) -> tuple[Any, ...]:
    """`reduce_tensor`'s rebuild arguments for `tensor` (CUDA: what vLLM's `rebuild_cuda_tensor` takes)."""
    from torch.multiprocessing.reductions import reduce_tensor

    _, args = reduce_tensor(tensor)
    return tuple(args)


def merge_ipc_infos(infos: list[dict[str, Any]]) -> dict[str, Any]:
    """One `update_info` from every learner rank's: each tensor's handles of all ranks' GPUs (every
    engine then opens the one on its own GPU); names, dtypes and shapes must agree."""
    keys = ("names", "dtype_names", "shapes")
    plan = {k: infos[0][k] for k in keys}
    if any({k: info[k] for k in keys} != plan for info in infos[1:]):
        raise ValueError("learner ranks exported different chunks; they must share one plan")
    handles: list[dict[str, Any]] = [{} for _ in plan["names"]]
    for info in infos:
        for merged, own in zip(handles, info["ipc_handles"], strict=True):
            merged.update(own)
    return {**plan, "ipc_handles": handles}


class WeightExport:
    """One weight sync from a module's state dict: the chunk plan and each chunk's tensors."""

    def __init__(self, state: Mapping[str, torch.Tensor], dtype: torch.dtype, bucket_bytes: int) -> None:
        self.state = dict(state)
        self.dtype = dtype
        meta = {name: (self._dtype_of(t), list(t.shape)) for name, t in self.state.items()}
        sizes = {name: _numel(shape) * torch.empty((), dtype=d).element_size() for name, (d, shape) in meta.items()}
        self.chunks = plan_chunks(sizes, bucket_bytes) if self.state else []
        self.infos = [_info([(name, *meta[name]) for name in chunk]) for chunk in self.chunks]
        """Each chunk's `names/dtype_names/shapes` (the nccl `update_info`), known before any gather."""
        self._alive: list[torch.Tensor] = []

    def _dtype_of(self, tensor: torch.Tensor) -> torch.dtype:
        return self.dtype if tensor.is_floating_point() else tensor.dtype

    def tensors(self, chunk: int) -> list[tuple[str, torch.Tensor]]:
        """Chunk `chunk`'s full tensors in the engine dtype, on the module's device (a collective when sharded)."""
        return [(name, _engine_tensor(self.state[name], self.dtype)) for name in self.chunks[chunk]]

    def ipc_info(self, chunk: int) -> dict[str, Any]:
        """Chunk `chunk`'s `update_info` with an IPC handle per tensor, keyed by this device; the tensors
        stay alive until `release` (after the engines' `finish_weight_update`)."""
        pairs = self.tensors(chunk)
        self._alive += [t for _, t in pairs]
        handles = [{device_key(t.device): ipc_handle(t)} for _, t in pairs]
        return {**self.infos[chunk], "ipc_handles": handles}

    def release(self) -> None:
        """Drop the exported tensors (and let CUDA reclaim memory the engines have closed)."""
        self._alive.clear()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.ipc_collect()


def release_cuda_cache() -> None:
    """Hand the memory this process's caching allocator holds unused (dropped export copies, the learner's
    activations) back to the GPU, so that a colocated engine can wake its KV cache into it."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _numel(shape: list[int]) -> int:
    n = 1
    for dim in shape:
        n *= dim
    return n


class NcclSender:
    """Rank 0 of vLLM's trainer-to-engine NCCL group (`nccl_common.trainer_init`, which engine workers
    join from `init_weight_transfer_engine`); broadcasts a chunk's tensors in `update_info` order, as
    the engines' `update_weights` receives them one by one."""

    def __init__(self, address: str, port: int, world_size: int) -> None:
        from vllm.distributed.weight_transfer.nccl_common import trainer_init

        self.group = trainer_init({"master_address": address, "master_port": port, "world_size": world_size}, rank=0)

    def send(self, tensors: list[tuple[str, torch.Tensor]]) -> None:
        """Broadcast `tensors` (contiguous, on this GPU) and wait until they left."""
        stream = torch.cuda.current_stream() if torch.cuda.is_available() else None
        for _, tensor in tensors:
            self.group.broadcast(tensor, src=0, stream=stream)
        if stream is not None:
            stream.synchronize()
