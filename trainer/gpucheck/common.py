"""What every gpu-check stage shares: its result file, random models of a given shape, a synthetic batch,
the one-rank process group, and the GPU limits throughput is compared with.

A stage is a module run as its own process (`python -m trainer.gpucheck.<stage> --device D --out DIR
[--until T | --limit-s S]`) in a folder of its own that the orchestrator empties before each run (so
nothing a previous run left is counted); it records named checks (pass/fail with the numbers behind them)
and metrics, and writes `DIR/record.json` (atomically; a stage may write it as it goes) even when it raises
(the traceback is in its log, its last line becomes a failed check). `T` is when the orchestrator ends it
(seconds since the epoch, so the stage's own start-up counts; `--limit-s S`: S seconds from now, for a
stage run by hand): what the stage waits for itself (the IPC receiver, the throughput parts) is sized to
end before it.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from trainer.gpucheck.summary import make_record, write_json
from trainer.objectives.batch import TokenBatch
from trainer.sizing import ModelShape

BF16_PEAK_FLOPS = 790e12
"""bf16 dense matmul measured on the lent H200 (GPU-FACTS section 8): the compute limit."""
MEMORY_BANDWIDTH = 4.3e12
"""Device memory copy measured there, bytes/s read plus written (GPU-FACTS section 8): the bandwidth limit."""
RECORD = "record.json"
"""A stage's record in its folder."""
INJECT = "GPUCHECK_INJECT"
"""Test hook: a comma-separated list of points (`<stage>`, `<size>/<part>`) where a stage raises on purpose,
so the CPU tests can show that a failure in one place keeps the figures of the others."""
TINY = ModelShape("tiny", hidden=128, layers=2, heads=4, kv_heads=2, head_dim=32, intermediate=256, vocab=1024,
                  tied_embeddings=True)  # fmt: skip
"""The shape of the correctness stages' random models (and of throughput on CPU)."""


@dataclass
class Check:
    """One named pass/fail with the numbers behind it."""

    name: str
    ok: bool
    detail: str


@dataclass
class Stage:
    """A stage's record: checks, metrics (numbers for the summary), and a skip reason if it did not apply."""

    name: str
    device: str
    out: Path
    checks: list[Check] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    skipped: str = ""
    until: float | None = None
    """When (`time.time()`) the orchestrator ends this stage; None: no limit."""
    started: float = field(default_factory=time.monotonic)

    def time_left(self) -> float:
        """Seconds until the orchestrator ends this stage (infinite without a limit)."""
        return float("inf") if self.until is None else self.until - time.time()

    def check(self, name: str, ok: bool, detail: str) -> bool:
        """Record one check; returns `ok`."""
        self.checks.append(Check(name, bool(ok), detail))
        print(f"[{self.name}] {'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)
        return bool(ok)

    def close_to(self, name: str, got: float, want: float, *, atol: float, rtol: float = 0.0) -> bool:
        """Check |got - want| <= atol + rtol |want|, printing both and the difference."""
        diff = abs(got - want)
        bound = atol + rtol * abs(want)
        return self.check(name, diff <= bound, f"{got:.6g} vs {want:.6g} (|diff| {diff:.3g} <= {bound:.3g})")

    @property
    def status(self) -> str:
        """ "skip", "pass" (every check passed, at least one) or "fail"."""
        if self.skipped:
            return "skip"
        return "pass" if self.checks and all(c.ok for c in self.checks) else "fail"

    def write(self) -> Path:
        """Write `<out>/record.json` as things stand (atomically: a stage killed later keeps what it wrote)."""
        checks = [asdict(c) for c in self.checks]
        record = make_record(self.name, self.device, self.status, seconds=time.monotonic() - self.started,
                             skipped=self.skipped, checks=checks, metrics=self.metrics)  # fmt: skip
        return write_json(self.out / RECORD, record)


def injected(point: str) -> bool:
    """Whether the `GPUCHECK_INJECT` test hook names `point`."""
    return point in {p.strip() for p in os.environ.get(INJECT, "").split(",") if p.strip()}


def inject(point: str) -> None:
    """Raise here when the test hook names `point`."""
    if injected(point):
        raise RuntimeError(f"failure injected at {point} ({INJECT})")


def stage_main(name: str, run: Callable[[Stage], None], argv: Sequence[str] | None = None) -> int:
    """Parse `--device/--out/--until/--limit-s`, run the stage, write its record whatever happens; exit 0 unless
    it failed."""
    parser = argparse.ArgumentParser(prog=f"python -m trainer.gpucheck.{name}")
    parser.add_argument("--device", choices=["cuda", "cpu"], required=True)
    parser.add_argument("--out", type=Path, required=True, help="this stage's own folder (its record.json)")
    parser.add_argument("--until", type=float, help="when the orchestrator ends this stage (seconds since the epoch)")
    parser.add_argument("--limit-s", type=float, help="or: this many seconds from now")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    until = args.until if args.until is not None else time.time() + args.limit_s if args.limit_s else None
    stage = Stage(name, args.device, args.out.resolve(), until=until)
    try:
        inject(name)
        run(stage)
    except Exception as exc:  # the record says what broke; the orchestrator goes on with the next stage
        traceback.print_exc()
        stage.check("raised", False, f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
    finally:
        stage.write()
    return 1 if stage.status == "fail" else 0


def synchronize(device: str) -> None:
    """Wait for the device's queued work (timings)."""
    if device == "cuda":
        torch.cuda.synchronize()


def random_lm(shape: ModelShape, *, device: str, dtype: torch.dtype, seed: int = 0) -> Any:
    """A randomly initialised causal LM of `shape` (a Qwen3 config), built directly on `device`."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**shape.hf_config())
    torch.manual_seed(seed)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=dtype)


def random_batch(vocab: int, *, rows: int, prompt: int, response: int, seed: int = 0) -> TokenBatch:
    """`rows` one-turn trajectories of random tokens, row i supervising its last `response - (i % 4) x
    response / 8` tokens (unequal counts, so a token-mean loss at ratio 1 is not 0), groups of 4 with rewards
    0/1 alternating, `logp_old` still 0 (`Learner.recompute_old_logprobs` fills it)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (rows, prompt + response), generator=gen)
    attention = torch.ones_like(ids, dtype=torch.bool)
    supervised = torch.zeros_like(attention)
    for row in range(rows):
        supervised[row, prompt + (row % 4) * (response // 8) :] = True
    turns = torch.where(supervised, torch.arange(rows)[:, None].expand_as(ids), torch.full_like(ids, -1))
    return TokenBatch(
        input_ids=ids,
        attention_mask=attention,
        loss_mask=supervised,
        logp_old=torch.zeros(ids.shape),
        logp_teacher=None,
        turn_ids=turns,
        traj_ids=torch.arange(rows),
        rewards=(torch.arange(rows) % 2).float(),
        group_ids=torch.arange(rows) // 4,
    )


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def one_rank_group(device: str) -> str:
    """Join a one-rank default process group on loopback (NCCL on CUDA, gloo on CPU); its backend."""
    from trainer.workers.learner import Rendezvous, join_process_group

    join_process_group(Rendezvous(0, 1, "127.0.0.1", free_port()), device)
    return str(torch.distributed.get_backend())


def learner_configs(**optim: Any) -> tuple[Any, Any]:
    """GRPO with token-mean reduction and an optimiser config (lr 1e-4 unless given)."""
    from trainer.config import ObjectiveConfig, OptimConfig

    objective = ObjectiveConfig.model_validate({"name": "grpo", "reduction": "token-mean"})
    return objective, OptimConfig.model_validate({"lr": 1e-4, **optim})


def gib(nbytes: float) -> float:
    """Bytes in GiB."""
    return nbytes / 2**30


def log(message: str) -> None:
    """A progress line on stderr (the stage's log)."""
    print(message, file=sys.stderr, flush=True)
