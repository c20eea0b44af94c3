"""gpu-check stage `hf`: the hf backend on the device as training uses it (`make_generation_backend`: fp32,
the stop strings): seeded sampling repeats token for token, and `score()` (teacher-forced, one forward)
gives the log-probs that generation recorded step by step over the KV cache. The bf16 difference is
reported beside it (information: bf16 rounds the two paths differently).
"""

from __future__ import annotations

import torch

from trainer.gpucheck.common import Stage, stage_main

PROMPTS = ("go to countertop 1", "You arrive at fridge 1. The fridge 1 is closed.", "<think>", "take apple 1 from")
FP32_ATOL = 2e-3


def run(stage: Stage) -> None:
    from envhub.client.formats import action_format
    from trainer.backends import HFBackend, SamplingSettings
    from trainer.models.corpus import SEED_TEXTS
    from trainer.models.loading import load_tokenizer
    from trainer.models.tiny import TinySpec, make_tiny_models

    models = make_tiny_models(stage.out / "hf-models", SEED_TEXTS, student=TinySpec(64, 2), teacher=TinySpec(64, 2))
    tokenizer = load_tokenizer(models.student)
    prompts = [tokenizer.encode(text) for text in PROMPTS]
    sampling = SamplingSettings(max_new_tokens=24, temperature=1.0, seed=7)
    for dtype, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        backend = HFBackend.from_pretrained(
            models.student, device=stage.device, dtype=dtype, stop=action_format("alfworld").stop
        )
        first, again = backend.generate(prompts, sampling), backend.generate(prompts, sampling)
        scores = backend.score(prompts, [g.token_ids for g in first])
        diff = max(abs(a - b) for g, s in zip(first, scores, strict=True) for a, b in zip(g.logprobs, s, strict=True))
        stage.metrics[f"{name}_gen_vs_score_max_abs"] = diff
        if name == "fp32":
            same = [g.token_ids for g in again] == [g.token_ids for g in first]
            stage.check("seeded generation repeats", same, f"{sum(len(g.token_ids) for g in first)} tokens, seed 7")
            stage.check("score = generation log-probs", diff <= FP32_ATOL, f"max |diff| {diff:.2e} <= {FP32_ATOL}")
            stage.check("on the device", str(backend.device).startswith(stage.device), str(backend.device))


if __name__ == "__main__":
    raise SystemExit(stage_main("hf", run))
