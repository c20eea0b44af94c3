"""gpu-check stage `fsdp`: the learner under FSDP2 (`fully_shard` per decoder layer and root) on a one-rank
process group (NCCL on CUDA, gloo on CPU) with bf16 mixed precision on CUDA, against the unsharded learner
on the same device: parameters are DTensors, the forward runs in bf16, the step's metrics agree, gradient
clipping engages on the DTensor norm; then a DCP save and a load into a fresh learner give equal parameters
and optimizer state, and one more update gives the same metrics on both.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from trainer.gpucheck.common import (
    TINY,
    Stage,
    learner_configs,
    one_rank_group,
    random_batch,
    random_lm,
    stage_main,
)

CLIP = 0.05
"""Below the random model's gradient norm, so clipping is active."""


def run(stage: Stage) -> None:
    from torch.distributed.tensor import DTensor

    from trainer.learner import Learner

    device = stage.device
    backend = one_rank_group(device)
    stage.metrics["backend"] = backend
    stage.check("one-rank process group", backend == ("nccl" if device == "cuda" else "gloo"), f"backend {backend}")
    objective, optim = learner_configs(
        micro_batch_tokens=512, logprob_chunk_tokens=64, gradient_checkpointing=True, grad_clip=CLIP
    )
    model = random_lm(TINY, device="cpu", dtype=torch.float32)
    plain = Learner(copy.deepcopy(model), objective, optim, device=device)
    sharded = Learner(model, objective, optim, device=device, fsdp=True)
    params = list(sharded.model.parameters())
    stage.check("parameters sharded", all(isinstance(p, DTensor) for p in params), f"{len(params)} DTensors")
    seen = _forward_dtype(sharded)
    batch, _ = plain.recompute_old_logprobs(random_batch(TINY.vocab, rows=8, prompt=96, response=32).to(device))
    want, got = plain.step(batch), sharded.step(batch)
    expected = torch.bfloat16 if device == "cuda" else torch.float32
    stage.check("mixed precision", seen == [expected], f"forward weights {seen}, want [{expected}]")
    for name in ("actor/pg_loss", "actor/entropy", "actor/grad_norm"):
        stage.close_to(f"{name} (FSDP2 vs unsharded)", got[name], want[name], atol=2e-3, rtol=5e-2)
    stage.check(
        "gradient clipping engaged", got["actor/grad_norm"] > CLIP, f"norm {got['actor/grad_norm']:.4g} > {CLIP}"
    )
    folder = stage.out / "fsdp-checkpoint"
    sharded.save(folder)
    restored = Learner(random_lm(TINY, device="cpu", dtype=torch.float32, seed=1), objective, optim, device=device,
                       fsdp=True)  # fmt: skip
    restored.load(folder)
    stage.check("DCP shards written", any((folder / "sharded").glob("*.distcp")), str(folder / "sharded"))
    unequal = [n for n, (a, b) in _pairs(sharded.model, restored.model) if not torch.equal(a, b)]
    stage.check("DCP load: parameters equal", not unequal, f"{len(unequal)} differ {unequal[:3]}")
    moments = _optimizer_moments(sharded), _optimizer_moments(restored)
    stage.check("DCP load: AdamW moments equal", all(map(torch.equal, *moments)), f"{len(moments[0])} tensors")
    again = random_batch(TINY.vocab, rows=8, prompt=96, response=32, seed=1)
    after, after_restored = sharded.step(again), restored.step(again)
    stage.close_to("next update after the load", after_restored["actor/pg_loss"], after["actor/pg_loss"], atol=1e-6,
                   rtol=1e-5)  # fmt: skip
    torch.distributed.destroy_process_group()


def _forward_dtype(learner: Any) -> list[torch.dtype]:
    """The dtype of one decoder layer's MLP weight as its forward sees it (FSDP2 unshards in `param_dtype`),
    recorded during the next forward."""
    seen: list[torch.dtype] = []
    layer = learner.scorer.lm.model.layers[0].mlp.down_proj

    def hook(module: torch.nn.Module, args: Any) -> None:
        if not seen:
            seen.append(module.weight.dtype)  # type: ignore[arg-type]

    layer.register_forward_pre_hook(hook)
    return seen


def _pairs(a: torch.nn.Module, b: torch.nn.Module) -> list[tuple[str, tuple[torch.Tensor, torch.Tensor]]]:
    """Each parameter of `a` and `b` by name, gathered whole."""
    theirs = dict(b.named_parameters())
    return [(name, (_whole(p), _whole(theirs[name]))) for name, p in a.named_parameters()]


def _whole(tensor: Any) -> torch.Tensor:
    """A DTensor gathered whole."""
    return tensor.full_tensor()


def _optimizer_moments(learner: Any) -> list[torch.Tensor]:
    """AdamW's first and second moments of every parameter, gathered whole."""
    out = []
    for param in learner.model.parameters():
        state = learner.optimizer.state[param]
        out += [_whole(state["exp_avg"]), _whole(state["exp_avg_sq"])]
    return out


if __name__ == "__main__":
    raise SystemExit(stage_main("fsdp", run))
