"""Pushing the learner's weights to the rollout engines, as `backend.weight_sync` says (docs/gpu.md).

* `state_dict`: a CPU copy of the full weights (rank 0), once through the object store (hf backend).
* `inproc`: the learner's live tensors handed to the engine in the same process (no Ray); the vLLM
  backend casts them to bf16 on the GPU and loads them bucket by bucket.
* `ipc` (colocated) and `nccl` (split): vLLM's weight-transfer API. Once: each engine's
  `init_weight_transfer` (nccl: together with learner rank 0 opening the group, since both block
  until everyone joined). Per sync: every learner rank plans the chunks (`export_begin`), the
  engines `start_weight_update`, then per chunk either every rank exports IPC handles of its own GPU
  copy and the merged `update_info` goes to every engine (each opens the handle of its GPU), or the
  engines' `receive_weights` run at the same time as the learner ranks' `export_broadcast` (rank 0
  broadcasts; the others join FSDP2's gathers); then `finish_weight_update`, and the learner drops
  its exported copies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Concatenate, ParamSpec, TypeVar

import torch

from trainer.backends.vllm import VLLMBackend
from trainer.backends.weight_transfer import merge_ipc_infos
from trainer.workers.executor import Executor, Handle, Pending
from trainer.workers.learner import LearnerWorker
from trainer.workers.rollout import RolloutWorker

W = TypeVar("W")
R = TypeVar("R")
P = ParamSpec("P")


class WeightSync:
    """Moves weights from the learner ranks to the rollout workers in mode `mode`."""

    def __init__(
        self,
        mode: str,
        executor: Executor,
        learners: Sequence[Handle[LearnerWorker]],
        engines: Sequence[Handle[RolloutWorker]],
        *,
        bucket_bytes: int,
        engine_world_size: int = 1,
    ) -> None:
        self.mode = mode
        self.executor = executor
        self.learners = list(learners)
        self.engines = list(engines)
        self.bucket_bytes = bucket_bytes
        self.engine_world_size = engine_world_size
        """Workers per engine (its tensor-parallel size): its ranks in the NCCL group."""
        self._connected = False

    def _on_all(
        self, handles: Sequence[Handle[W]], method: Callable[Concatenate[W, P], R], *args: P.args, **kwargs: P.kwargs
    ) -> list[R]:
        return self.executor.gather([self.executor.submit(h, method, *args, **kwargs) for h in handles])

    def _on_engines(self, method: Callable[Concatenate[VLLMBackend, P], R], *args: P.args, **kwargs: P.kwargs) -> None:
        """`method` of every rollout worker's vLLM engine (its weight-transfer API)."""
        self._on_all(self.engines, RolloutWorker.on_engine, method, *args, **kwargs)

    def _engine_call(
        self,
        engine: Handle[RolloutWorker],
        method: Callable[Concatenate[VLLMBackend, P], R],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> Pending[R]:
        return self.executor.submit(engine, RolloutWorker.on_engine, method, *args, **kwargs)

    def connect(self) -> None:
        """Initialise the engines' weight-transfer engines (and the NCCL group) once."""
        if self._connected or self.mode not in ("ipc", "nccl"):
            return
        if self.mode == "ipc":
            self._on_engines(VLLMBackend.init_weight_transfer, {"packed": False})
        else:
            address, port = self.executor.call(self.learners[0], LearnerWorker.transfer_address)
            world = 1 + len(self.engines) * self.engine_world_size
            infos = [
                {
                    "master_address": address,
                    "master_port": port,
                    "rank_offset": 1 + i * self.engine_world_size,
                    "world_size": world,
                }
                for i in range(len(self.engines))
            ]
            engines = zip(self.engines, infos, strict=True)
            pending: list[Pending[None]] = [
                self._engine_call(e, VLLMBackend.init_weight_transfer, info) for e, info in engines
            ]
            pending += [
                self.executor.submit(r, LearnerWorker.connect_transfer, address, port, world) for r in self.learners
            ]
            self.executor.gather(pending)
        self._connected = True

    def push(self) -> None:
        """One sync of the learner's current weights into every engine."""
        if self.mode == "state_dict":
            self._on_all(self.engines, RolloutWorker.update_weights, self.full_state().as_argument())
        elif self.mode == "inproc":
            weights = self.executor.call(self.learners[0], LearnerWorker.live_weights)
            self._on_all(self.engines, RolloutWorker.update_weights, weights)
        else:
            self._push_chunks()

    def full_state(self) -> Pending[dict[str, torch.Tensor]]:
        """A CPU copy of the full weights as a pending result (rank 0 holds it; the other ranks join the
        gather): under Ray, one object-store copy for every engine that loads it."""
        pending = [self.executor.submit(r, LearnerWorker.weights) for r in self.learners]
        self.executor.gather(pending[1:])
        return pending[0]

    def _push_chunks(self) -> None:
        self.connect()
        infos = self._on_all(self.learners, LearnerWorker.export_begin, self.bucket_bytes)[0]
        self._on_engines(VLLMBackend.start_weight_update)
        for chunk, info in enumerate(infos):
            if self.mode == "ipc":
                merged = merge_ipc_infos(self._on_all(self.learners, LearnerWorker.export_ipc, chunk))
                self._on_engines(VLLMBackend.receive_weights, merged)
            else:  # nccl: the engines receive while the learner broadcasts
                pending = [self._engine_call(e, VLLMBackend.receive_weights, info) for e in self.engines]
                pending += [self.executor.submit(r, LearnerWorker.export_broadcast, chunk) for r in self.learners]
                self.executor.gather(pending)
        self._on_engines(VLLMBackend.finish_weight_update)
        self._on_all(self.learners, LearnerWorker.export_end)
