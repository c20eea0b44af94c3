"""gpu-check stage `throughput`: speed and memory at the papers' model sizes, random-initialised from
Qwen3-1.7B's and Qwen3-4B's shapes (no weights travel; `trainer.sizing.QWEN3`), beside the H200's limits.

Per size: the learner under FSDP2 on a one-rank group with gradient checkpointing, one 16k-token
micro-batch (4 rows of 4,096 tokens, the last 1,024 of each supervised), log-probs 1,024 positions at a
time: tokens/s, model FLOPs utilisation (6 N + 6 L S d per token, recompute not counted, against the
measured bf16 peak) and peak memory beside `trainer.sizing`'s estimate; the weight export (every chunk
gathered, cast to bf16 and given IPC handles, as `LearnerWorker.export_ipc`): seconds and bytes/s
(6 bytes per parameter) against the memory bandwidth; hf generation at batch 64 (512-token prompts,
128 new tokens, bf16): tokens/s and the bytes each decode step reads (bf16 weights plus the KV cache)
against the bandwidth. On CPU the same code runs at a tiny size as a rehearsal (fractions not computed).
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch

from trainer.gpucheck.common import (
    BF16_PEAK_FLOPS,
    MEMORY_BANDWIDTH,
    TINY,
    Stage,
    gib,
    learner_configs,
    log,
    one_rank_group,
    random_batch,
    random_lm,
    stage_main,
    synchronize,
)
from trainer.sizing import QWEN3, ModelShape, Workload, activations_gib, learner_states_gib


@dataclass(frozen=True)
class Sizes:
    """One device's workload."""

    shapes: tuple[ModelShape, ...]
    rows: int
    row_tokens: int
    response_tokens: int
    batch: int
    prompt_tokens: int
    new_tokens: int
    timed_steps: int


SIZES = {
    "cuda": Sizes((QWEN3["Qwen3-1.7B"], QWEN3["Qwen3-4B"]), 4, 4096, 1024, 64, 512, 128, 2),
    "cpu": Sizes((TINY,), 4, 128, 32, 64, 32, 8, 1),
}
BUCKET_BYTES = 2048 * 1024 * 1024
"""`backend.weight_bucket_mb`'s default."""


def matmul_params(shape: ModelShape) -> int:
    """Parameters a token's forward multiplies by: everything but an untied embedding table (a tied one is
    the LM head's matrix too)."""
    return shape.params - (0 if shape.tied_embeddings else shape.vocab * shape.hidden)


def run(stage: Stage) -> None:
    device, sizes = stage.device, SIZES[stage.device]
    one_rank_group(device)
    for shape in sizes.shapes:
        result = _learner_and_export(shape, sizes, device)
        result |= _generation(shape, sizes, device)
        stage.metrics[shape.name] = result
        stage.check(f"{shape.name} measured", all(v > 0 for v in result.values()), _describe(result))
        _free()
    torch.distributed.destroy_process_group()


def _learner_and_export(shape: ModelShape, sizes: Sizes, device: str) -> dict[str, float]:
    from trainer.backends.weight_transfer import ENGINE_DTYPE, WeightExport
    from trainer.learner import Learner

    tokens = sizes.rows * sizes.row_tokens
    objective, optim = learner_configs(
        lr=1e-6, micro_batch_tokens=tokens, logprob_chunk_tokens=1024, gradient_checkpointing=True
    )
    log(f"{shape.name}: learner ({shape.params / 1e9:.2f} B parameters, {tokens} tokens per micro-batch)")
    learner = Learner(random_lm(shape, device=device, dtype=torch.float32), objective, optim, device=device, fsdp=True)
    prompt = sizes.row_tokens - sizes.response_tokens
    batch = random_batch(shape.vocab, rows=sizes.rows, prompt=prompt, response=sizes.response_tokens)
    batch, _ = learner.recompute_old_logprobs(batch.to(device))
    learner.step(batch)  # warm-up: kernels, allocator, AdamW states
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(sizes.timed_steps):
        synchronize(device)
        start = time.perf_counter()
        learner.step(batch)
        synchronize(device)
        times.append(time.perf_counter() - start)
    step_s = statistics.median(times)
    flops = tokens * (6 * matmul_params(shape) + 6 * shape.layers * sizes.row_tokens * shape.heads * shape.head_dim)
    out = {"learner_tok_s": tokens / step_s, "learner_step_s": step_s}
    if device == "cuda":
        work = Workload(micro_batch_tokens=tokens, logit_chunk=1024)
        out["learner_peak_gib"] = gib(torch.cuda.max_memory_allocated())
        out["learner_predicted_gib"] = learner_states_gib(shape, 1) + activations_gib(shape, work)
        out["learner_mfu"] = flops / step_s / BF16_PEAK_FLOPS
    log(f"{shape.name}: weight export")
    synchronize(device)
    start = time.perf_counter()
    export = WeightExport(learner.model.state_dict(), ENGINE_DTYPE, BUCKET_BYTES)
    for chunk in range(len(export.chunks)):
        if device == "cuda":
            export.ipc_info(chunk)  # kept alive until release, as for the engines
        else:
            export.tensors(chunk)
    synchronize(device)
    export_s = time.perf_counter() - start
    export.release()
    out["export_s"] = export_s
    if device == "cuda":
        out["export_bw_fraction"] = 6 * shape.params / export_s / MEMORY_BANDWIDTH
    del learner, export
    _free()
    return out


def _generation(shape: ModelShape, sizes: Sizes, device: str) -> dict[str, float]:
    from trainer.backends import HFBackend, SamplingSettings

    log(f"{shape.name}: hf generation at batch {sizes.batch}")
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = random_lm(shape, device=device, dtype=dtype)
    backend = HFBackend(model, eos_token_ids=[], pad_token_id=0, batch_size=sizes.batch)
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, shape.vocab, (sizes.batch, sizes.prompt_tokens), generator=gen).tolist()
    backend.generate(prompts[:4], SamplingSettings(max_new_tokens=4, seed=0))  # warm-up
    synchronize(device)
    start = time.perf_counter()
    made = backend.generate(prompts, SamplingSettings(max_new_tokens=sizes.new_tokens, seed=0))
    synchronize(device)
    seconds = time.perf_counter() - start
    new = sum(len(g.token_ids) for g in made)
    out = {"gen_tok_s": new / seconds}
    if device == "cuda":
        context = sizes.prompt_tokens + sizes.new_tokens / 2
        per_step = 2 * shape.params + sizes.batch * context * shape.kv_bytes_per_token
        out["gen_hbm_fraction"] = sizes.new_tokens * per_step / seconds / MEMORY_BANDWIDTH
    del backend, model
    return out


def _free() -> None:
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _describe(result: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v:.3g}" for k, v in result.items())


if __name__ == "__main__":
    raise SystemExit(stage_main("throughput", run))
