"""The learner's model plumbing: chunked log-probs inside one forward, FSDP2 sharding, rank shards.

* `LogprobModel` wraps a causal LM; its forward returns each token's log-prob and the entropy of the
  distribution predicting it, projecting hidden states to the vocabulary only at the positions asked
  for (the supervised tokens), `chunk_tokens` positions at a time under activation checkpointing, so
  the fp32 full-vocabulary tensor of a whole micro-batch never exists (neither in forward nor kept for
  backward): one chunk's at a time.
* `shard` applies FSDP2 (`fully_shard`) to each decoder layer, then to the wrapper (the root, which
  holds the tied embedding / LM head), with bf16 parameters and fp32 gradient reduction on CUDA.
* `rank_rows` gives each rank a contiguous share of the batch's rows; the loss weights are computed
  on the whole batch first (global token normalisation), so the ranks' summed gradients are the
  full batch's (the loss is multiplied by the world size to cancel FSDP's gradient averaging).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from trainer.objectives.teacher_top import TeacherTop, forward_kl_over_top


class LogprobModel(torch.nn.Module):
    """`forward(input_ids, attention_mask) -> (logp, entropy, forward_kl)`, each (N, S), position 0 = 0."""

    def __init__(self, lm: Any, chunk_tokens: int = 1024) -> None:
        super().__init__()
        self.lm = lm
        self.chunk_tokens = chunk_tokens

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        positions: torch.Tensor | None = None,
        top: TeacherTop | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`positions` (N, S) bool: project only where True (the supervised tokens; elsewhere logp and entropy
        are 0); None: every position 1..S-1 (the reference path, docs/design/029). `top`: the teacher's top tokens
        predicting each position (scored only where `positions` projects); the third result is then the forward KL
        over them where `top.scored` (`trainer.objectives.teacher_top`), else 0 (and 0 everywhere without `top`)."""
        hidden = self.lm.model(input_ids=input_ids, attention_mask=attention_mask.long()).last_hidden_state
        n, s, h = hidden.shape
        flat = hidden[:, :-1].reshape(-1, h)
        targets = input_ids[:, 1:].reshape(-1)
        index = None if positions is None else positions[:, 1:].reshape(-1).nonzero().squeeze(-1)
        if index is not None:
            flat, targets = flat[index], targets[index]
        extra: tuple[torch.Tensor, ...] = ()
        if top is not None:
            ids, logp_t, scored = (x[:, 1:].reshape(-1, *x.shape[2:]) for x in (top.ids, top.logp, top.scored))
            extra = (ids, logp_t, scored) if index is None else (ids[index], logp_t[index], scored[index])
        step = self.chunk_tokens if self.chunk_tokens > 0 else max(flat.shape[0], 1)
        parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        for start in range(0, flat.shape[0], step):
            args = (
                flat[start : start + step],
                targets[start : start + step],
                *(x[start : start + step] for x in extra),
            )
            if torch.is_grad_enabled():
                parts.append(checkpoint(self._chunk, *args, use_reentrant=False))
            else:
                parts.append(self._chunk(*args))
        empty = flat.new_zeros(0, dtype=torch.float32)
        columns = [torch.cat(column) if parts else empty for column in zip(*parts, strict=True)] or [empty] * 3
        zeros = torch.zeros(n * (s - 1), dtype=torch.float32, device=hidden.device)
        if index is not None:
            columns = [zeros.index_put((index,), column) for column in columns]
        first = torch.zeros(n, 1, dtype=torch.float32, device=hidden.device)
        logp, entropy, forward_kl = (torch.cat([first, column.view(n, s - 1)], dim=1) for column in columns)
        return logp, entropy, forward_kl

    def _chunk(
        self,
        hidden: torch.Tensor,
        targets: torch.Tensor,
        top_ids: torch.Tensor | None = None,
        top_logp: torch.Tensor | None = None,
        scored: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        log_softmax = torch.log_softmax(self.lm.lm_head(hidden).float(), dim=-1)
        logp = log_softmax.gather(-1, targets[:, None]).squeeze(-1)
        with torch.no_grad():
            entropy = -(log_softmax.exp() * log_softmax).sum(-1)
        if top_ids is None or top_logp is None or scored is None:
            return logp, entropy, torch.zeros_like(entropy)
        return logp, entropy, forward_kl_over_top(log_softmax, top_ids, top_logp) * scored


def world() -> tuple[int, int]:
    """(rank, world size) of the default process group; (0, 1) without one."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def shard(scorer: LogprobModel, device: torch.device) -> LogprobModel:
    """FSDP2 over the default process group: each decoder layer, then the root (bf16 params on CUDA)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (world()[1],))
    policy = MixedPrecisionPolicy()
    if device.type == "cuda":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in scorer.lm.model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(scorer, mesh=mesh, mp_policy=policy)
    return scorer


def rank_rows(num_rows: int, rank: int, size: int) -> slice:
    """This rank's contiguous, near-equal share of `num_rows` rows (may be empty)."""
    per, extra = divmod(num_rows, size)
    start = rank * per + min(rank, extra)
    return slice(start, start + per + (rank < extra))


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """In-place sum over ranks (a no-op on one rank); returns `tensor`."""
    if world()[1] > 1:
        torch.distributed.all_reduce(tensor)
    return tensor


def all_reduce_max(value: int, device: torch.device) -> int:
    """The largest `value` over ranks (`device`: where the backend reduces, cuda for NCCL)."""
    if world()[1] == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.int64, device=device)
    torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MAX)
    return int(tensor.item())
