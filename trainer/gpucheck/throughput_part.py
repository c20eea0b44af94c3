"""One part of gpu-check's `throughput` stage at one size, in a process of its own (so no size or part sees
another's memory, and a crash, an OOM or a hang costs only that part's figures):

    python -m trainer.gpucheck.throughput_part --device D --size NAME --part learner|generation --figures PATH

`learner`: the learner under FSDP2 on a one-rank group with gradient checkpointing, one micro-batch of
`rows x row_tokens` (the last `response_tokens` of each row supervised), log-probs 1,024 positions at a time:
tokens/s, model FLOPs utilisation (6 N + 6 L S d per token, recompute not counted, against the measured bf16
peak) and peak memory beside `trainer.sizing.learner_peak_gib`; then the weight export (every chunk gathered,
cast to bf16 and given IPC handles, as `LearnerWorker.export_ipc`): seconds and bytes/s (6 bytes per
exported parameter: a tied embedding is exported under both its names) against the memory bandwidth, and
the memory its copies still hold after `release` (no process opens the shares here, so CUDA cannot free
them: they end with the process).
`generation`: the hf backend as training builds it (`backend.decode_attention`'s default) at batch `batch`
(`prompt_tokens` random prompt tokens, `new_tokens` new ones, bf16): tokens/s, the bytes each decode step
reads (bf16 weights plus the KV cache) against the bandwidth, and its peak memory.

The figures go to PATH (JSON, rewritten atomically) as each is measured: the learner's before the export
starts; on an error `"error"` says what broke (the traceback is in the stage's log).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer.gpucheck.common import (
    BF16_PEAK_FLOPS,
    MEMORY_BANDWIDTH,
    TINY,
    gib,
    inject,
    learner_configs,
    log,
    one_rank_group,
    random_batch,
    random_lm,
    synchronize,
)
from trainer.gpucheck.summary import write_json
from trainer.sizing import QWEN3, ModelShape, Workload, learner_peak_gib, learner_peak_parts_gib


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
PARTS = ("learner", "generation")
BUCKET_BYTES = 2048 * 1024 * 1024
"""`backend.weight_bucket_mb`'s default."""
LOGPROB_CHUNK = 1024


def matmul_params(shape: ModelShape) -> int:
    """Parameters a token's forward multiplies by: everything but an untied embedding table (a tied one is
    the LM head's matrix too)."""
    return shape.params - (0 if shape.tied_embeddings else shape.vocab * shape.hidden)


class Figures:
    """The part's figures, written to their file after each addition."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.values: dict[str, Any] = {}

    def add(self, **values: Any) -> None:
        self.values.update(values)
        write_json(self.path, self.values)


def learner_and_export(shape: ModelShape, sizes: Sizes, device: str, figures: Figures) -> None:
    from trainer.backends.weight_transfer import ENGINE_DTYPE, WeightExport
    from trainer.learner import Learner

    inject(f"{shape.name}/learner")
    one_rank_group(device)
    tokens = sizes.rows * sizes.row_tokens
    objective, optim = learner_configs(
        lr=1e-6, micro_batch_tokens=tokens, logprob_chunk_tokens=LOGPROB_CHUNK, gradient_checkpointing=True
    )
    log(f"{shape.name}: learner ({shape.params / 1e9:.2f} B parameters, {tokens} tokens per micro-batch)")
    learner = Learner(random_lm(shape, device=device, dtype=torch.float32), objective, optim, device=device, fsdp=True)
    prompt = sizes.row_tokens - sizes.response_tokens
    batch = random_batch(shape.vocab, rows=sizes.rows, prompt=prompt, response=sizes.response_tokens)
    batch, _ = learner.recompute_old_logprobs(batch.to(device))
    learner.step(batch)  # warm-up: kernels, allocator, AdamW states
    if device == "cuda":
        synchronize(device)
        resident = gib(torch.cuda.memory_allocated())
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
    figures.add(learner_tok_s=tokens / step_s, learner_step_s=step_s)
    if device == "cuda":
        work = Workload(micro_batch_tokens=tokens, logit_chunk=LOGPROB_CHUNK)
        parts = learner_peak_parts_gib(shape, 1, work)
        figures.add(
            learner_peak_gib=gib(torch.cuda.max_memory_allocated()),
            learner_predicted_gib=learner_peak_gib(shape, 1, work),
            learner_predicted_backward_gib=parts["backward"],
            learner_predicted_optimizer_gib=parts["optimizer"],
            learner_resident_gib=resident,
            learner_mfu=flops / step_s / BF16_PEAK_FLOPS,
        )
    log(f"{shape.name}: learner {_describe(figures.values)}")
    inject(f"{shape.name}/export")
    log(f"{shape.name}: weight export")
    synchronize(device)
    before = torch.cuda.memory_allocated() if device == "cuda" else 0
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
    exported = sum(t.numel() for t in export.state.values() if t.is_floating_point())
    figures.add(export_s=export_s, export_chunks=len(export.chunks), export_params=exported)
    if device == "cuda":
        figures.add(
            export_bw_fraction=6 * exported / export_s / MEMORY_BANDWIDTH,
            export_held_gib=gib(torch.cuda.memory_allocated() - before),
        )
    log(f"{shape.name}: export {_describe(figures.values)}")
    torch.distributed.destroy_process_group()


def generation(shape: ModelShape, sizes: Sizes, device: str, figures: Figures) -> None:
    from trainer.backends import HFBackend, SamplingSettings
    from trainer.config import BackendConfig

    inject(f"{shape.name}/generation")
    log(f"{shape.name}: hf generation at batch {sizes.batch}")
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = random_lm(shape, device=device, dtype=dtype)
    attention = BackendConfig.model_validate({}).decode_attention_impl()
    backend = HFBackend(model, eos_token_ids=[], pad_token_id=0, batch_size=sizes.batch, decode_attention=attention)
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, shape.vocab, (sizes.batch, sizes.prompt_tokens), generator=gen).tolist()
    backend.generate(prompts[:4], SamplingSettings(max_new_tokens=4, seed=0))  # warm-up
    synchronize(device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    made = backend.generate(prompts, SamplingSettings(max_new_tokens=sizes.new_tokens, seed=0))
    synchronize(device)
    seconds = time.perf_counter() - start
    new = sum(len(g.token_ids) for g in made)
    figures.add(gen_tok_s=new / seconds, gen_tokens=new)
    if device == "cuda":
        context = sizes.prompt_tokens + sizes.new_tokens / 2
        per_step = 2 * shape.params + sizes.batch * context * shape.kv_bytes_per_token
        figures.add(
            gen_hbm_fraction=sizes.new_tokens * per_step / seconds / MEMORY_BANDWIDTH,
            gen_peak_gib=gib(torch.cuda.max_memory_allocated()),
        )
    log(f"{shape.name}: generation {_describe(figures.values)}")
    del backend, model
    gc.collect()


def _describe(values: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in values.items())


def shape_named(device: str, name: str) -> ModelShape:
    """The shape of size `name` in `device`'s workload."""
    found = [s for s in SIZES[device].shapes if s.name == name]
    if not found:
        raise SystemExit(f"no size {name} on {device}: {[s.name for s in SIZES[device].shapes]}")
    return found[0]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.gpucheck.throughput_part")
    parser.add_argument("--device", choices=["cuda", "cpu"], required=True)
    parser.add_argument("--size", required=True)
    parser.add_argument("--part", choices=PARTS, required=True)
    parser.add_argument("--figures", type=Path, required=True)
    args = parser.parse_args(argv)
    shape = shape_named(args.device, args.size)
    figures = Figures(args.figures)
    figures.add()
    run = learner_and_export if args.part == "learner" else generation
    try:
        run(shape, SIZES[args.device], args.device, figures)
    except Exception as exc:  # the figures measured so far stay; the error is beside them
        traceback.print_exc()
        figures.add(error=f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
