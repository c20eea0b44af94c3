"""`trainer bench --generation MODEL`: generated tokens/s of the vLLM backend against the hf backend on one model, in
one run (needs vLLM: on CPU, `.venv-vllm-cpu`, docs/gpu.md "vLLM on CPU").

16 multi-turn chats (ALFWorld-like turns through the model's chat template, growing histories) sampled at T = 1 with
one seed, each backend as the trainer runs it on CPU (hf: fp32; vLLM: bf16, eager), medians of `repeats` calls
after a warm-up each (hf first: see `bench_generation`). Written to `<out>/trainer-bench-generation.json` and `.md`.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from trainer.backends import make_backend
from trainer.backends.base import GenerationBackend, SamplingSettings
from trainer.models.loading import load_tokenizer

ROOMS = ("countertop 1", "fridge 1", "cabinet 2", "shelf 3", "drawer 1", "sinkbasin 1", "desk 1", "bed 1")


def chats(model_dir: str | Path, sequences: int, turns: int) -> list[list[int]]:
    """`sequences` token prompts: chats of 1..`turns` user/assistant turns ending with a user turn."""
    tokenizer = load_tokenizer(model_dir)
    prompts = []
    for i in range(sequences):
        messages: list[dict[str, str]] = []
        for turn in range(1 + i % turns):
            room = ROOMS[(i + turn) % len(ROOMS)]
            messages.append({"role": "user", "content": f"You arrive at {room}. On the {room}, you see a mug {i}. "
                             "Your task is to put a clean mug in the coffeemachine. What do you do next?"})  # fmt: skip
            if turn < i % turns:
                messages.append({"role": "assistant", "content": f"<action>go to {room}</action>"})
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompts.append(tokenizer.encode(str(text)))
    return prompts


def _tokens_per_s(
    backend: GenerationBackend, prompts: list[list[int]], sampling: SamplingSettings, repeats: int
) -> float:
    """Generated tokens over the median seconds of `repeats` calls, after one warm-up call."""
    tokens = sum(len(g.token_ids) for g in backend.generate(prompts, sampling))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        backend.generate(prompts, sampling)
        times.append(time.perf_counter() - start)
    return tokens / statistics.median(times)


def bench_generation(
    model_dir: str | Path, repeats: int = 3, sequences: int = 16, turns: int = 3, max_new_tokens: int = 64
) -> dict[str, Any]:
    """Generated tokens/s of `hf`, then `vllm`, over the same prompts and sampling settings. Not interleaved: a vLLM
    engine in the process sets torch to one thread for good (and forbids changing it), so hf runs first with the
    process's threads; the record keeps both thread counts."""
    prompts = chats(model_dir, sequences, turns)
    sampling = SamplingSettings(max_new_tokens=max_new_tokens, temperature=1.0, seed=0)
    hf_threads = torch.get_num_threads()
    hf = _tokens_per_s(make_backend("hf", model_dir), prompts, sampling, repeats)
    engine = make_backend("vllm", model_dir, max_model_len=2048, enforce_eager=True)  # the trainer's CPU default
    vllm = _tokens_per_s(engine, prompts, sampling, repeats)
    return {
        "model": Path(model_dir).name,
        "sequences": sequences,
        "prompt_tokens_mean": sum(map(len, prompts)) / len(prompts),
        "max_new_tokens": max_new_tokens,
        "hf_torch_threads": hf_threads,
        "vllm_torch_threads": torch.get_num_threads(),
        "vllm_tokens_per_s": vllm,
        "hf_tokens_per_s": hf,
        "speedup": vllm / hf,
        "repeats": repeats,
    }


def run_generation_bench(model_dir: str | Path, out_dir: str | Path = "docs/results", repeats: int = 3) -> None:
    """Run `bench_generation` and write the JSON and markdown records."""
    result = bench_generation(model_dir, repeats)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "trainer-bench-generation.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "trainer-bench-generation.md").write_text(
        "# Generation benchmark: vLLM backend vs hf backend\n\n"
        f"{result['model']}, {result['sequences']} multi-turn chats (mean prompt {result['prompt_tokens_mean']:.0f} "
        f"tokens), up to {result['max_new_tokens']} new tokens at T = 1, one seed; CPU, medians of "
        f"{result['repeats']} calls after a warm-up each, hf first (torch threads: hf {result['hf_torch_threads']}, "
        f"vLLM {result['vllm_torch_threads']}; `trainer bench --generation`, in .venv-vllm-cpu).\n\n"
        "| backend | generated tokens/s |\n|---|---|\n"
        f"| vLLM (vllm-cpu 0.32.0, bf16, eager) | {result['vllm_tokens_per_s']:.0f} |\n"
        f"| hf (transformers, fp32) | {result['hf_tokens_per_s']:.0f} |\n"
        f"| ratio vLLM / hf | {result['speedup']:.2f}x |\n"
    )
    print(json.dumps(result, indent=2))
