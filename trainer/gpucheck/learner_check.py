"""gpu-check stage `learner`: one `Learner.step` on the device (bf16 autocast on CUDA, gradient checkpointing,
log-probs in 64-position chunks) against the same step on CPU in fp32 (no checkpointing, unchunked), from
the same weights on the same batch: recomputed log-probs, loss metrics and the update agree within bf16
tolerance. Two micro-batches, so gradient accumulation is in it too.
"""

from __future__ import annotations

import copy

import torch

from trainer.gpucheck.common import TINY, Stage, learner_configs, random_batch, random_lm, stage_main

LR = 1e-4
METRICS_RTOL = {"actor/pg_loss": 2e-2, "actor/entropy": 1e-2, "actor/grad_norm": 5e-2, "actor/ratio_mean": 1e-2}
"""bf16 tolerances of the step's metrics (relative, plus 2e-3 absolute): bf16 keeps 8 bits of mantissa."""


def run(stage: Stage) -> None:
    reference = random_lm(TINY, device="cpu", dtype=torch.float32)
    on_device = copy.deepcopy(reference)
    initial = {name: t.detach().clone() for name, t in reference.state_dict().items()}
    objective, plain = learner_configs(lr=LR, micro_batch_tokens=512, logprob_chunk_tokens=0)
    _, tuned = learner_configs(lr=LR, micro_batch_tokens=512, logprob_chunk_tokens=64, gradient_checkpointing=True)
    from trainer.learner import Learner

    cpu = Learner(reference, objective, plain, device="cpu")
    dev = Learner(on_device, objective, tuned, device=stage.device)
    batch, _ = cpu.recompute_old_logprobs(random_batch(TINY.vocab, rows=8, prompt=96, response=32))
    _, forward = dev.recompute_old_logprobs(batch.to(stage.device))
    diff = forward["actor/rollout_logp_abs_diff"]
    stage.metrics["logp_mean_abs_diff"] = diff
    stage.check("forward log-probs (device vs CPU fp32)", diff < 2e-2, f"mean |diff| {diff:.2e} < 2e-2")
    want, got = cpu.step(batch), dev.step(batch)
    for name, rtol in METRICS_RTOL.items():
        stage.close_to(name, got[name], want[name], atol=2e-3, rtol=rtol)
    moved_cpu = _moves(initial, cpu.model)
    moved_dev = _moves(initial, dev.model)
    cosine = float(torch.nn.functional.cosine_similarity(moved_cpu, moved_dev, dim=0))
    largest = float((moved_cpu - moved_dev).abs().max())
    stage.metrics.update({"update_cosine": cosine, "update_max_abs_diff": largest})
    stage.check("AdamW update direction", cosine > 0.9, f"cosine(device, CPU) {cosine:.4f} > 0.9")
    stage.check("AdamW update size", largest <= 2.2 * LR, f"max |diff| {largest:.2e} <= 2.2 lr ({2.2 * LR:.1e})")
    if stage.device == "cuda":
        stage.metrics["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30


def _moves(initial: dict[str, torch.Tensor], model: torch.nn.Module) -> torch.Tensor:
    """Every parameter's change from `initial`, flattened on the CPU."""
    state = model.state_dict()
    return torch.cat([(state[name].detach().float().cpu() - t).flatten() for name, t in initial.items()])


if __name__ == "__main__":
    raise SystemExit(stage_main("learner", run))
