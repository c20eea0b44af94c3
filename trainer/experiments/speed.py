"""`trainer bench --speed`: the CPU paths before and after docs/design/019, 029 and 033 (fp32, no kept cache, one
forward per scored row, learner and SFT logits at every position) against bf16 + kept KV cache + eager attention in
decode steps + prefix-shared scoring + logits at supervised tokens only + the learner's logp_old from its update's
forward, per model, in the same run.

Per model and path, a fresh process (so its peak RSS is its own) measures generation tokens/s over `sessions`
full-context chats of `turns` turns, teacher-scoring tokens/s of those chats' turns, `Learner.step` tokens/s
and SFT tokens/s; the ratios new / old are printed and written to `<out>/trainer-bench-speed.{json,md}` with
a matmul probe (which call reaches the bf16 matrix units) and the bf16 log-prob differences from fp32.
"""

from __future__ import annotations

import copy
import json
import multiprocessing
import os
import resource
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from trainer.adamw import AdamwImpl
from trainer.precision import cpu_bf16, cpu_bf16_flags


@dataclass(frozen=True)
class SpeedSizes:
    """How much each measurement does (small by default: the machine is shared)."""

    sessions: int = 16
    turns: int = 10
    new_tokens: int = 12
    """Tokens generated per turn (no EOS: every turn generates exactly this many)."""
    follow_up: int = 24
    """Tokens appended after each response (the environment's follow-up user turn)."""
    prompt: int = 64
    """First-turn prompt tokens."""
    learner_rows: int = 8
    learner_prompt: int = 96
    learner_response: int = 32
    sft_steps: int = 2
    sft_batch_tokens: int = 1024
    repeats: int = 1


@dataclass(frozen=True)
class PathSpec:
    """One side of the comparison."""

    name: str
    bf16: bool
    kv_cache_mb: float
    share_prefixes: bool
    supervised_only: bool
    """Learner and SFT project to the vocabulary only at supervised tokens (docs/design/029)."""
    decode_attention: str | None = None
    """Attention of the generation's decode steps (`backend.decode_attention`; None: the model's own, SDPA)."""
    adamw: AdamwImpl = "loop"
    """Learner's and SFT's AdamW implementation (`optim.adamw`; `loop`: torch's CPU default, the path before)."""


OLD = PathSpec(
    "old: fp32, no kept cache, one forward per scored row, learner and SFT logits at every position",
    bf16=False,
    kv_cache_mb=0,
    share_prefixes=False,
    supervised_only=False,
)


def new_path(setting: str = "auto") -> PathSpec:
    """The new path: bf16 as `precision.cpu_bf16: <setting>` decides here, kept cache, shared prefixes."""
    bf16 = cpu_bf16(setting, "cpu")  # type: ignore[arg-type]
    precision = "bf16" if bf16 else "fp32"
    name = (
        f"new: {precision}, kept cache, eager decode attention, shared prefixes, logits at supervised tokens only, "
        "fused AdamW"
    )
    return PathSpec(name, bf16, 1024, True, True, "eager", "auto")


def _best(fn: Any, repeats: int, warm_up: Any = None) -> float:
    """Median seconds of `repeats` calls of `fn`, after one call of `warm_up` (default: `fn` itself)."""
    (warm_up or fn)()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _chats(backend: Any, sizes: SpeedSizes, vocab: int) -> list[tuple[list[int], list[int]]]:
    """Run the full-context chats; the (prompt, response) of every turn, turn by turn."""
    from trainer.backends.base import SamplingSettings

    gen = torch.Generator().manual_seed(0)
    current = [torch.randint(3, vocab, (sizes.prompt,), generator=gen).tolist() for _ in range(sizes.sessions)]
    rows = []
    for turn in range(sizes.turns):
        outs = backend.generate(current, SamplingSettings(max_new_tokens=sizes.new_tokens, seed=turn))
        rows += [(p, g.token_ids) for p, g in zip(current, outs, strict=True)]
        follow = torch.randint(3, vocab, (sizes.sessions, sizes.follow_up), generator=gen).tolist()
        current = [p + g.token_ids + f for p, g, f in zip(current, outs, follow, strict=True)]
    return rows


def _rollout_rates(model_dir: str, path: PathSpec, sizes: SpeedSizes) -> dict[str, float]:
    """Generation tokens/s over the chats and teacher-scoring tokens/s of their turns."""
    from trainer.backends.base import SamplingSettings
    from trainer.backends.hf import HFBackend
    from trainer.backends.kv_store import KVStore
    from trainer.models.loading import load_model

    dtype = torch.bfloat16 if path.bf16 else torch.float32
    # no EOS: every chat turn generates exactly `new_tokens`, so both paths do the same work
    model = load_model(model_dir, dtype=dtype)
    backend = HFBackend(model, eos_token_ids=[], pad_token_id=0, batch_size=64, decode_attention=path.decode_attention)
    vocab = int(backend.model.config.vocab_size)
    rows: list[tuple[list[int], list[int]]] = []

    def chats() -> None:
        backend.kv_store = KVStore(int(path.kv_cache_mb * 2**20)) if path.kv_cache_mb else None
        rows[:] = _chats(backend, sizes, vocab)

    def warm_up() -> None:
        backend.generate([[3] * sizes.prompt] * 2, SamplingSettings(max_new_tokens=2, seed=0))

    generation_s = _best(chats, sizes.repeats, warm_up)

    def score() -> None:
        if path.share_prefixes:
            backend.score([p for p, _ in rows], [r for _, r in rows])
        else:  # one turn at a time: no row contains another, one forward per row (the old path's work)
            for turn in range(sizes.turns):
                part = rows[turn * sizes.sessions : (turn + 1) * sizes.sessions]
                backend.score([p for p, _ in part], [r for _, r in part])

    scoring_s = _best(score, sizes.repeats, lambda: backend.score([rows[0][0]], [rows[0][1]]))
    return {
        "generation_tokens_per_s": sizes.sessions * sizes.turns * sizes.new_tokens / generation_s,
        "scoring_tokens_per_s": sum(len(r) for _, r in rows) / scoring_s,
    }


def _learner_rate(model_dir: str, path: PathSpec, sizes: SpeedSizes, from_update: bool = True) -> float:
    """`Learner.step` tokens/s (GRPO). The bf16 path wants the learner's own logp_old, as a bf16 rollout makes it:
    from the update's forward (`from_update`, docs/design/033) or from a separate recompute forward (029)."""
    from trainer.config import ObjectiveConfig, OptimConfig
    from trainer.experiments.bench import synthetic_batch
    from trainer.learner import Learner
    from trainer.models.loading import load_model

    model = load_model(model_dir)
    batch = synthetic_batch(
        model, rows=sizes.learner_rows, prompt=sizes.learner_prompt, response=sizes.learner_response
    )
    objective = ObjectiveConfig.model_validate({"name": "grpo", "reduction": "token-mean"})
    optim = OptimConfig.model_validate({"lr": 1e-6, "logp_old_from_update": from_update, "adamw": path.adamw})
    learner = Learner(
        model,
        objective,
        optim,
        recompute_logp_old=path.bf16,
        cpu_bf16=path.bf16,
        supervised_positions=path.supervised_only,
    )
    return float(batch.attention_mask.sum()) / _best(lambda: learner.step(batch), sizes.repeats)


def _sft_rate(model_dir: str, path: PathSpec, sizes: SpeedSizes) -> float:
    """`sft_train` tokens/s on random 160 + 32-token examples (after one warm-up step)."""
    from trainer.models.loading import load_model, load_tokenizer
    from trainer.sft import sft_train

    model, tokenizer = load_model(model_dir), load_tokenizer(model_dir)
    gen = torch.Generator().manual_seed(1)
    vocab = int(model.config.vocab_size)
    examples = [
        (
            torch.randint(3, vocab, (160,), generator=gen).tolist(),
            torch.randint(3, vocab, (32,), generator=gen).tolist(),
        )
        for _ in range(32)
    ]
    for steps in (1, sizes.sft_steps):  # the first call warms up
        sft = sft_train(
            model,
            tokenizer,
            examples,
            steps=steps,
            batch_tokens=sizes.sft_batch_tokens,
            cpu_bf16=path.bf16,
            targets_only=path.supervised_only,
            adamw=path.adamw,
        )
    return sft["tokens"] / sft["seconds"]


def _measure(model_dir: str, path: PathSpec, sizes: SpeedSizes) -> dict[str, float]:
    """Every measurement of one path (run in its own process), and its peak RSS."""
    torch.manual_seed(0)
    result = _rollout_rates(model_dir, path, sizes)
    result["learner_tokens_per_s"] = _learner_rate(model_dir, path, sizes)
    if path.bf16:
        result[LEARNER_RECOMPUTE] = _learner_rate(model_dir, path, sizes, from_update=False)
    result["sft_tokens_per_s"] = _sft_rate(model_dir, path, sizes)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def _child(model_dir: str, path: PathSpec, sizes: SpeedSizes, threads: int, queue: Any) -> None:
    torch.set_num_threads(threads)
    queue.put(_measure(model_dir, path, sizes))


def measure_in_process(model_dir: str, path: PathSpec, sizes: SpeedSizes) -> dict[str, float]:
    """`_measure` in a fresh spawned process (its own peak RSS, no shared caches), with the machine's 1-minute load
    average before and after it (the machine may be shared: the ratios hold only as far as the load stayed)."""
    load_before = os.getloadavg()[0]
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_child, args=(model_dir, path, sizes, torch.get_num_threads(), queue))
    process.start()
    result: dict[str, float] = queue.get()
    process.join()
    return {**result, "load_before": load_before, "load_after": os.getloadavg()[0]}


def _linear_calls(m: int, k: int, n: int) -> dict[str, Any]:
    """The calls `matmul_probe` times, on an (m, k) input and a (k -> n) weight."""
    a32, w32 = torch.randn(m, k), torch.randn(n, k)
    a16, w16 = a32.bfloat16(), w32.bfloat16()
    linear = torch.nn.Linear(k, n, bias=False)
    linear16 = copy.deepcopy(linear).bfloat16()

    def autocast_linear() -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return linear(a32)

    return {
        "F.linear fp32": lambda: torch.nn.functional.linear(a32, w32),
        "F.linear bf16": lambda: torch.nn.functional.linear(a16, w16),
        "a @ b bf16": lambda: a16 @ w16.t(),
        "nn.Linear bf16 weights": lambda: linear16(a16),
        "nn.Linear fp32 under autocast": autocast_linear,
    }


def matmul_probe(rows: tuple[int, ...] = (16, 512, 2048), k: int = 576, n: int = 1536) -> list[dict[str, float]]:
    """GFLOP/s of the calls a model can make at SmolLM2's MLP shape (k -> n): which reaches the matrix units."""
    out = []
    for m in rows:
        with torch.no_grad():
            row = {name: 2 * m * k * n / _best(fn, 5) / 1e9 for name, fn in _linear_calls(m, k, n).items()}
        out.append({"rows": float(m), **row})
    return out


def logprob_differences(model_dir: str, sizes: SpeedSizes) -> dict[str, float]:
    """Mean and max |bf16 - fp32| of response-token log-probs: the hf backend with bf16 weights, and the learner's
    forward under CPU autocast (fp32 weights), both against the fp32 forward."""
    from trainer.backends.hf import HFBackend
    from trainer.experiments.bench import synthetic_batch
    from trainer.learner import token_logprobs
    from trainer.models.loading import load_model

    fp32 = load_model(model_dir)
    bf16 = copy.deepcopy(fp32).bfloat16()
    small = SpeedSizes(sessions=4, turns=2, new_tokens=sizes.new_tokens, prompt=sizes.prompt)
    rows = _chats(HFBackend(bf16, eos_token_ids=[], pad_token_id=0), small, int(fp32.config.vocab_size))
    prompts, responses = [p for p, _ in rows], [r for _, r in rows]
    ref = HFBackend(fp32, eos_token_ids=[], pad_token_id=0).score(prompts, responses)
    got = HFBackend(bf16, eos_token_ids=[], pad_token_id=0).score(prompts, responses)
    backend_diff = (torch.tensor([x for row in got for x in row]) - torch.tensor([x for row in ref for x in row])).abs()
    batch = synthetic_batch(fp32, rows=4, prompt=64, response=32)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logp, _ = token_logprobs(fp32, batch.input_ids, batch.attention_mask)
    learner_diff = (logp.float() - batch.logp_old)[batch.loss_mask].abs()
    return {
        "backend_bf16_mean": float(backend_diff.mean()),
        "backend_bf16_max": float(backend_diff.max()),
        "learner_autocast_mean": float(learner_diff.mean()),
        "learner_autocast_max": float(learner_diff.max()),
    }


def run_speed_bench(
    out_dir: str | Path, models: dict[str, str], sizes: SpeedSizes, setting: str = "auto"
) -> dict[str, Any]:
    """Old and new path per model (name -> local HF folder); writes and returns the results."""
    new = new_path(setting)
    result: dict[str, Any] = {
        "threads": torch.get_num_threads(),
        "cpu_bf16_flags": list(cpu_bf16_flags()),
        "sizes": asdict(sizes),
        "paths": {"old": OLD.name, "new": new.name},
        "matmul_gflops": matmul_probe(),
        "models": {},
    }
    for name, folder in models.items():
        old_row = measure_in_process(folder, OLD, sizes)
        new_row = measure_in_process(folder, new, sizes)
        ratios = {key: new_row[key] / old_row[base] for key, _, _, base in MEASURES if key in new_row}
        result["models"][name] = {
            "old": old_row,
            "new": new_row,
            "ratio": ratios,
            "logprob_diff": logprob_differences(folder, sizes),
        }
        print(name, json.dumps(result["models"][name], indent=1), flush=True)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "trainer-bench-speed.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "trainer-bench-speed.md").write_text(speed_markdown(result))
    return result


LEARNER_RECOMPUTE = "learner_recompute_tokens_per_s"
"""The bf16 path's learner with a separate logp_old recompute forward (029's new path), against the same old one."""
MEASURES = (
    ("generation_tokens_per_s", "generation tokens/s", 4.0, "generation_tokens_per_s"),
    ("scoring_tokens_per_s", "teacher scoring tokens/s", 4.0, "scoring_tokens_per_s"),
    ("learner_tokens_per_s", "learner tokens/s", 3.0, "learner_tokens_per_s"),
    (LEARNER_RECOMPUTE, "learner tokens/s, separate logp_old recompute (029)", 3.0, "learner_tokens_per_s"),
    ("sft_tokens_per_s", "SFT tokens/s", 3.0, "sft_tokens_per_s"),
    ("peak_rss_mb", "peak RSS MB", 0.0, "peak_rss_mb"),
)
"""(key in the new path's results, label, the issue's goal for new / old (0: no goal), the old path's key it is
measured against); a key the new path did not measure (no bf16 here: no recompute) is left out."""


def speed_markdown(result: dict[str, Any]) -> str:
    """The results as the markdown page docs quote."""
    sizes = result["sizes"]
    lines = [
        "# Trainer speed benchmark: CPU bf16, kept KV cache, shared-prefix scoring, supervised-only logits "
        "(docs/design/019, 029, 033)\n",
        f"CPU, {result['threads']} torch threads, bf16 flags: {', '.join(result['cpu_bf16_flags']) or 'none'}. "
        f"Old path: {result['paths']['old']}. New path: {result['paths']['new']}. Each path in its own process, "
        f"same run. Generation: {sizes['sessions']} sequences, {sizes['turns']}-turn full-context chats "
        f"({sizes['prompt']}-token first prompt, {sizes['new_tokens']} new tokens and a {sizes['follow_up']}-token "
        f"follow-up a turn); scoring: every turn of those chats; learner: {sizes['learner_rows']} rows of "
        f"{sizes['learner_prompt']} + {sizes['learner_response']} tokens, GRPO (new path: logp_old from the "
        "update's forward, docs/design/033, and, on its own row, from a separate recompute forward, 029); "
        f"SFT: {sizes['sft_steps']} steps of ~{sizes['sft_batch_tokens']} tokens.\n",
        "| model | measure | old | new | new / old | goal |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, row in result["models"].items():
        for key, label, goal, base in MEASURES:
            if key not in row["new"]:
                continue
            lines.append(
                f"| {name} | {label} | {row['old'][base]:.0f} | {row['new'][key]:.0f} | {row['ratio'][key]:.2f}x | "
                + (f">= {goal:.0f}x |" if goal else "<= 4096 (quickstart) |" if key == "peak_rss_mb" else "|")
            )
    lines += [
        "",
        "Load average (1 minute) before and after each path's process (the machine is shared):",
        "",
        "| model | old path | new path |",
        "|---|---|---|",
    ]
    for name, row in result["models"].items():
        old, new = row["old"], row["new"]
        lines.append(
            f"| {name} | {old['load_before']:.1f} -> {old['load_after']:.1f} | "
            f"{new['load_before']:.1f} -> {new['load_after']:.1f} |"
        )
    lines += [
        "",
        "bf16 log-prob differences from fp32 (response tokens):",
        "",
        "| model | hf backend bf16 mean | max | learner autocast mean | max |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, row in result["models"].items():
        d = row["logprob_diff"]
        lines.append(
            f"| {name} | {d['backend_bf16_mean']:.4f} | {d['backend_bf16_max']:.4f} | "
            f"{d['learner_autocast_mean']:.4f} | {d['learner_autocast_max']:.4f} |"
        )
    probe = result["matmul_gflops"]
    names = [key for key in probe[0] if key != "rows"]
    lines += [
        "",
        "Matmul probe at SmolLM2's MLP shape (576 -> 1536), GFLOP/s:",
        "",
        "| rows | " + " | ".join(names) + " |",
        "|---:|" + "---:|" * len(names),
    ]
    lines += [f"| {row['rows']:.0f} | " + " | ".join(f"{row[n]:.0f}" for n in names) + " |" for row in probe]
    return "\n".join(lines) + "\n"


def speed_bench(out_dir: str | Path, models: dict[str, str], sizes: SpeedSizes) -> dict[str, Any]:
    """`run_speed_bench` over the tiny student (made in a temporary folder) and `models`."""
    import tempfile

    from trainer.models.corpus import SEED_TEXTS
    from trainer.models.tiny import TinySpec, make_tiny_models

    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        tiny = make_tiny_models(tmp, SEED_TEXTS * 4, student=TinySpec(64, 2), teacher=TinySpec(64, 2))
        return run_speed_bench(out_dir, {"tiny (hidden 64, 2 layers)": str(tiny.student), **models}, sizes)
