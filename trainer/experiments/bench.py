"""`trainer bench`: learner overhead versus a bare torch loop, and rollout turns/s batched versus sequential.

Both comparisons are measured in the same run (medians of `repeats`), and written to
`<out>/trainer-bench.json` and `<out>/trainer-bench.md`.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from trainer.config import ObjectiveConfig, OptimConfig
from trainer.learner import Learner, token_logprobs
from trainer.objectives.batch import TokenBatch


def paired_medians(a: Callable[[], object], b: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median seconds of `a` and of `b`, run alternately (after one warm-up each) so load drift hits both."""
    a(), b()
    times_a: list[float] = []
    times_b: list[float] = []
    for _ in range(repeats):
        for fn, times in ((a, times_a), (b, times_b)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return statistics.median(times_a), statistics.median(times_b)


def synthetic_batch(model: Any, *, rows: int = 16, prompt: int = 192, response: int = 64, seed: int = 0) -> TokenBatch:
    """Random prompts + responses, logp_old from `model` itself (ratio 1), 4 groups of rows // 4."""
    gen = torch.Generator().manual_seed(seed)
    vocab = int(model.config.vocab_size)
    ids = torch.randint(3, vocab, (rows, prompt + response), generator=gen)
    attention = torch.ones_like(ids, dtype=torch.bool)
    loss_mask = torch.zeros_like(attention)
    loss_mask[:, prompt:] = True
    with torch.no_grad():
        logp, _ = token_logprobs(model, ids, attention)
    turn_ids = torch.where(loss_mask, torch.arange(rows)[:, None].expand_as(ids), torch.full_like(ids, -1))
    return TokenBatch(
        input_ids=ids,
        attention_mask=attention,
        loss_mask=loss_mask,
        logp_old=torch.where(loss_mask, logp, torch.zeros_like(logp)),
        logp_teacher=None,
        turn_ids=turn_ids,
        traj_ids=torch.arange(rows),
        rewards=torch.rand(rows, generator=gen).round(),
        group_ids=torch.arange(rows) // 4,
    )


def bare_step(model: Any, optimizer: torch.optim.Optimizer, batch: TokenBatch, advantages: torch.Tensor) -> None:
    """The reference: forward, PPO-clipped token-mean loss, backward, clip, AdamW; nothing else."""
    logp, _ = token_logprobs(model, batch.input_ids, batch.attention_mask)
    ratio = torch.exp(logp - batch.logp_old)
    loss = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(0.8, 1.2))
    loss = (loss * batch.loss_mask).sum() / batch.loss_mask.sum()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def bench_learner(model_dir: str | Path, repeats: int) -> dict[str, float]:
    """Tokens/s of `Learner.step` (GRPO, one micro-batch) versus `bare_step` on the same batch."""
    from trainer.models.loading import load_model

    batch = synthetic_batch(load_model(model_dir))
    tokens = float(batch.attention_mask.sum())
    objective = ObjectiveConfig.model_validate({"name": "grpo", "reduction": "token-mean"})
    learner = Learner(load_model(model_dir), objective, OptimConfig.model_validate({"lr": 1e-4}))
    advantages, _ = learner.spec.compute(batch, learner.hyperparameters, step=0)
    bare_model = load_model(model_dir).train()
    optimizer = torch.optim.AdamW(bare_model.parameters(), lr=1e-4, weight_decay=0.01)
    learner_s, bare_s = paired_medians(
        lambda: learner.step(batch), lambda: bare_step(bare_model, optimizer, batch, advantages), repeats
    )
    return {
        "tokens_per_step": tokens,
        "learner_tokens_per_s": tokens / learner_s,
        "bare_tokens_per_s": tokens / bare_s,
        "overhead_ratio": learner_s / bare_s,
    }


def bench_rollout(
    model_dir: str | Path, address: str, repeats: int, sessions: int = 8, turns: int = 4
) -> dict[str, float]:
    """Turns/s of one `GroupRollout` over `sessions` sessions versus the same sessions one at a time."""
    from envhub.client import EnvhubClient, Sessions
    from trainer.backends.hf import HFBackend
    from trainer.models.loading import load_tokenizer
    from trainer.prompts import PromptRenderer
    from trainer.rollout import GroupRollout, RolloutSettings, SamplingSettings

    tokenizer = load_tokenizer(model_dir)
    renderer = PromptRenderer("alfworld", style="compact")
    backend = HFBackend.from_pretrained(model_dir, stop=renderer.format.stop)
    sampling = SamplingSettings(max_new_tokens=16, seed=0)
    with EnvhubClient(address) as client:
        port = Sessions(client, "alfworld")
        tasks = [(task_id, 0) for task_id in port.task_ids("train")[: sessions // 2]]

        def run(group: int, concurrency: int, chunks: list[list[tuple[str, int]]]) -> int:
            settings = RolloutSettings(group_size=group, max_turns=turns, concurrency=concurrency)
            rollout = GroupRollout(port, backend, tokenizer, renderer, settings)
            try:
                return sum(rollout.run(chunk, sampling)[1].turns for chunk in chunks)
            finally:
                rollout.close()

        single = [[task] for task in tasks for _ in range(2)]
        batched_turns, single_turns = run(2, 16, [tasks]), run(1, 1, single)
        batched_s, single_s = paired_medians(lambda: run(2, 16, [tasks]), lambda: run(1, 1, single), repeats)
    return {
        "sessions": float(sessions),
        "batched_turns_per_s": batched_turns / batched_s,
        "sequential_turns_per_s": single_turns / single_s,
        "speedup": (batched_turns / batched_s) / (single_turns / single_s),
    }


def run_bench(out_dir: str | Path = "docs/results", repeats: int = 5) -> dict[str, Any]:
    """Run both benchmarks with tiny models made in a temporary folder; write JSON and markdown."""
    from trainer.models.corpus import SEED_TEXTS
    from trainer.models.tiny import TinySpec, make_tiny_models
    from trainer.rollout.local_server import LocalServer

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        models = make_tiny_models(tmp, SEED_TEXTS * 4, student=TinySpec(64, 2), teacher=TinySpec(64, 2))
        result: dict[str, Any] = {
            "threads": torch.get_num_threads(),
            "learner": bench_learner(models.student, repeats),
        }
        with LocalServer("alfworld", settings={"rooms": "small"}) as server:
            result["rollout"] = bench_rollout(models.student, server.address, repeats)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "trainer-bench.json").write_text(json.dumps(result, indent=2) + "\n")
    learner, rollout = result["learner"], result["rollout"]
    (out / "trainer-bench.md").write_text(
        "# Trainer benchmark\n\n"
        f"Tiny Qwen3 (hidden 64, 2 layers), CPU, {result['threads']} torch threads, medians of {repeats}.\n\n"
        "| measure | value |\n|---|---|\n"
        f"| learner tokens/s (Learner.step) | {learner['learner_tokens_per_s']:.0f} |\n"
        f"| bare torch loop tokens/s | {learner['bare_tokens_per_s']:.0f} |\n"
        f"| learner overhead ratio (aim < 1.1) | {learner['overhead_ratio']:.3f} |\n"
        f"| rollout turns/s, batched + concurrent ({rollout['sessions']:.0f} sessions) | "
        f"{rollout['batched_turns_per_s']:.1f} |\n"
        f"| rollout turns/s, one session at a time | {rollout['sequential_turns_per_s']:.1f} |\n"
        f"| rollout speed-up | {rollout['speedup']:.2f}x |\n"
    )
    print(json.dumps(result, indent=2))
    return result
