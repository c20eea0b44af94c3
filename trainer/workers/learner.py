"""The learner role: model, optimizer, checkpoints (wraps `trainer.learner.Learner`)."""

from __future__ import annotations

import shutil
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer.backends.weight_transfer import ENGINE_DTYPE, NcclSender, WeightExport, release_cuda_cache
from trainer.config import TrainerConfig
from trainer.learner import STATE_FILE, Learner, sharded_checkpoint
from trainer.objectives.batch import TokenBatch
from trainer.objectives.pbr import PbrConfig
from trainer.precision import cpu_bf16
from trainer.workers.factory import resolve_device


@dataclass(frozen=True)
class Rendezvous:
    """One learner rank's place in the process group: rank 0 listens on `address:port`."""

    rank: int
    world_size: int
    address: str
    port: int


def rendezvous_address() -> tuple[str, int]:
    """This node's address (as Ray sees it) and a free TCP port, for rank 0 to listen on."""
    import ray

    with socket.socket() as sock:
        sock.bind(("", 0))
        port = int(sock.getsockname()[1])
    return ray.util.get_node_ip_address(), port


def join_process_group(rendezvous: Rendezvous, device: str) -> None:
    """Join the learners' default process group (NCCL on CUDA, gloo on CPU); `cuda:0` is this
    actor's own GPU (Ray set CUDA_VISIBLE_DEVICES from its bundle)."""
    if device == "cuda":
        torch.cuda.set_device(0)
    torch.distributed.init_process_group(
        backend="nccl" if device == "cuda" else "gloo",
        init_method=f"tcp://{rendezvous.address}:{rendezvous.port}",
        rank=rendezvous.rank,
        world_size=rendezvous.world_size,
    )


class LearnerWorker:
    """The learner process: loads the student (or a checkpoint), applies updates, saves checkpoints.
    With a `rendezvous`, one rank of an FSDP2 learner (every rank gets every call)."""

    def __init__(
        self, config: TrainerConfig, resume_from: str | None = None, rendezvous: Rendezvous | None = None
    ) -> None:
        from trainer.models.loading import load_model, load_tokenizer

        torch.manual_seed(config.seed)
        device = resolve_device(config.backend.device)
        if rendezvous is not None and rendezvous.world_size > 1:
            join_process_group(rendezvous, device)
        self.tokenizer = load_tokenizer(config.models.student)
        # A sharded checkpoint holds no HF weights: build the student, then each rank reads its shards.
        start = resume_from if resume_from and not sharded_checkpoint(resume_from) else config.models.student
        model = load_model(start, device=device)
        bf16 = cpu_bf16(config.precision.cpu_bf16, device)
        recompute = config.optim.recompute(config.backend.kind, bf16_rollout=bf16)
        pbr = PbrConfig(config.pbr.weight, config.pbr.cap, config.pbr.cap_on) if config.pbr.rules else None
        self.learner = Learner(
            model,
            config.objective,
            config.optim,
            device=device,
            recompute_logp_old=recompute,
            pbr=pbr,
            cpu_bf16=bf16,
            total_steps=config.steps,
        )
        if resume_from:
            self.learner.load(resume_from)
        self.rank = rendezvous.rank if rendezvous is not None else 0
        self._export: WeightExport | None = None
        self._sender: NcclSender | None = None

    def step(self, batch: TokenBatch) -> dict[str, float]:
        """One update on `batch`; its metrics."""
        return self.learner.step(batch)

    def audit(self, pool: TokenBatch, selected: list[bool], counted: list[bool]) -> dict[str, float]:
        """DivOPD's gradient audit of the candidate `pool` at the current parameters (`trainer.gradient_audit`)."""
        from trainer.gradient_audit import audit

        return audit(self.learner, pool, selected, counted)

    def weights(self) -> dict[str, torch.Tensor]:
        """CPU copy of the current parameters."""
        return self.learner.weights()

    def evaluated_weights(self) -> dict[str, torch.Tensor]:
        """CPU copy of the weights a held-out evaluation plays (the moving average with `optim.ema_decay`)."""
        return self.learner.evaluated_weights()

    def live_weights(self) -> dict[str, torch.Tensor]:
        """The parameters themselves, on the learner's device (`inproc` sync: the engine is in this process)."""
        return {name: t.detach() for name, t in self.learner.model.state_dict().items()}

    def export_begin(self, bucket_bytes: int) -> list[dict[str, Any]]:
        """Plan a weight-transfer sync (every rank: the same chunks); each chunk's `update_info`."""
        self._export = WeightExport(self.learner.model.state_dict(), ENGINE_DTYPE, bucket_bytes)
        return self._export.infos

    def export_ipc(self, chunk: int) -> dict[str, Any]:
        """Chunk `chunk` on this rank's GPU, as IPC handles (kept alive until `export_end`)."""
        assert self._export is not None, "export_begin first"
        return self._export.ipc_info(chunk)

    def export_broadcast(self, chunk: int) -> None:
        """Chunk `chunk` gathered on every rank; rank 0 broadcasts it to the engines (nccl)."""
        assert self._export is not None, "export_begin first"
        tensors = self._export.tensors(chunk)
        if self._sender is not None:
            self._sender.send(tensors)

    def export_end(self) -> None:
        """Drop this sync's exported tensors."""
        if self._export is not None:
            self._export.release()
        self._export = None

    def release_memory(self) -> None:
        """Give the GPU back what this process's allocator caches unused (the dropped export copies, the
        update's activations), before a colocated engine wakes its KV cache."""
        release_cuda_cache()

    def transfer_address(self) -> tuple[str, int]:
        """Where rank 0 hosts the trainer-to-engine NCCL group (this node, a free port)."""
        return rendezvous_address()

    def connect_transfer(self, address: str, port: int, world_size: int) -> None:
        """Rank 0 joins the NCCL group with the engine workers as its rank 0 (blocks until all joined)."""
        if self.rank == 0:
            self._sender = NcclSender(address, port, world_size)

    def global_step(self) -> int:
        """Updates applied so far (continues across resumes)."""
        return self.learner.global_step

    def save(self, folder: str) -> str:
        """Write a checkpoint to `folder`; its path."""
        return str(self.learner.save(folder, self.tokenizer))


def checkpoint_folder(output_dir: str | Path, step: int) -> Path:
    """Where the checkpoint after `step` updates lives in a run's output folder."""
    return Path(output_dir) / "checkpoints" / f"step_{step:06d}"


def _complete_checkpoints(output_dir: str | Path) -> list[Path]:
    """The `checkpoints/step_*` folders of a run that hold a trainer state, oldest first."""
    folder = Path(output_dir) / "checkpoints"
    return sorted(p for p in folder.glob("step_*") if (p / STATE_FILE).is_file()) if folder.is_dir() else []


def prune_checkpoints(output_dir: str | Path, keep: int) -> list[Path]:
    """Delete every checkpoint folder of `output_dir` older than its newest `keep` complete ones (0: delete
    nothing), so a long run holds `keep` checkpoints on disk; the deleted folders."""
    complete = _complete_checkpoints(output_dir)
    if keep <= 0 or len(complete) <= keep:
        return []
    oldest_kept = complete[-keep]
    deleted = sorted(p for p in oldest_kept.parent.glob("step_*") if p.name < oldest_kept.name)
    for old in deleted:
        shutil.rmtree(old)
    return deleted


def latest_checkpoint(output_dir: str | Path) -> str | None:
    """The newest `checkpoints/step_*` folder with a trainer state, or None."""
    done = _complete_checkpoints(output_dir)
    return str(done[-1]) if done else None
