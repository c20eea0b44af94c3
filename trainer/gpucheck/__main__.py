"""`python -m trainer.gpucheck` (`make gpu-check`): the GPU path checked on the one machine this project can be
lent (GPU-FACTS section 8: one H200, Python 3.12, torch 2.11, no network, no vLLM, no Ray), in one command.

1. env: the image's versions against `wheels.NEEDS`; the carried wheels it lacks (`--wheels`, made here by
   `make gpu-wheels`) installed into `<out>/site` with pip, no index, no dependencies; torch is never brought;
   torch's view of the device.
2. the stages, each a process of its own with `<out>/site` first on PYTHONPATH, its log in `<out>/logs`:
   learner, fsdp, ipc, hf, train, throughput (their modules' docstrings say what each checks).
3. a one-screen summary (`<out>/summary.txt`, also printed) and `<out>/summary.json`; exit 1 if a stage failed.

`--device cpu` runs the same on CPU (gloo instead of NCCL, the IPC stage skipped, tiny sizes): CI runs it.
Standard library only here: nothing may be imported before the wheels are in place.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from trainer.gpucheck.summary import write_record, write_summary
from trainer.gpucheck.wheels import image_versions, install, plan

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class StageSpec:
    """One stage: its module and its time limit."""

    name: str
    module: str
    timeout_s: float


STAGES = (
    StageSpec("learner", "trainer.gpucheck.learner_check", 150),
    StageSpec("fsdp", "trainer.gpucheck.fsdp_check", 150),
    StageSpec("ipc", "trainer.gpucheck.ipc_check", 150),
    StageSpec("hf", "trainer.gpucheck.hf_check", 150),
    StageSpec("train", "trainer.gpucheck.train_check", 240),
    StageSpec("throughput", "trainer.gpucheck.throughput", 240),
)
CPU_SLACK = 4
"""On CPU (CI, a shared machine) every stage may take this many times its CUDA time limit."""
MIN_STAGE_S = 20.0
"""A stage starts only with at least this much of the budget left."""

PROBE = """
import json, os, torch
info = {"torch": torch.__version__, "cuda_available": torch.cuda.is_available(), "cuda": torch.version.cuda,
        "cpus": os.cpu_count()}
if torch.cuda.is_available():
    props = torch.cuda.get_device_properties(0)
    info.update(gpu=props.name, gpu_gib=round(props.total_memory / 2**30, 1), capability=f"{props.major}.{props.minor}",
                nccl=".".join(map(str, torch.cuda.nccl.version())))
print(json.dumps(info))
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trainer.gpucheck", description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--out", type=Path, default=Path("runs/gpu-check"))
    parser.add_argument("--wheels", type=Path, default=ROOT / ".gpu-wheels", help="carried wheels (make gpu-wheels)")
    parser.add_argument(
        "--budget-s", type=float, help="whole run's time limit (default: 7 min on CUDA, 30 min on a shared CPU)"
    )
    parser.add_argument("--only", action="append", default=[], help="run only these stages (repeatable)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    budget = args.budget_s or (420.0 if args.device == "cuda" else 1800.0)
    slack = 1 if args.device == "cuda" else CPU_SLACK
    start = time.monotonic()
    out: Path = args.out.resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.json"):
        old.unlink()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    ready = _environment(args, out, env)
    for spec in STAGES:
        if args.only and spec.name not in args.only:
            continue
        left = budget - (time.monotonic() - start)
        if not ready or left < MIN_STAGE_S:
            why = "the environment is not usable" if not ready else f"{left:.0f} s of the budget left"
            write_record(out, spec.name, args.device, "skip", skipped=why)
            continue
        _run_stage(spec, args.device, out, env, min(spec.timeout_s * slack, left))
    summary = write_summary(out, time.monotonic() - start, budget, [s.name for s in STAGES])
    print(summary, flush=True)
    records = [json.loads(p.read_text()) for p in out.glob("*.json") if p.name != "summary.json"]
    return 1 if any(r["status"] == "fail" for r in records) else 0


def _environment(args: argparse.Namespace, out: Path, env: dict[str, str]) -> bool:
    """Versions, the wheels brought, torch's device: the `env` record; whether the stages can run."""
    start = time.monotonic()
    decisions = plan(image_versions())
    unmet = [d for d in decisions if d.action == "unmet"]
    brought = [d for d in decisions if d.action == "bring"]
    checks = [{"name": f"{d.need.dist} on the image", "ok": False, "detail": d.reason} for d in unmet]
    metrics: dict[str, object] = {
        "python": sys.version.split()[0],
        "image": {d.need.dist: d.installed for d in decisions},
        "brought": {d.need.dist: f"{d.need.version} ({d.reason})" for d in brought},
    }
    site = out / "site"
    try:
        wheels = install(brought, args.wheels, site) if not unmet else []
        metrics["brought_mib"] = round(sum(w.stat().st_size for w in wheels) / 2**20, 1)
        checks.append({"name": "carried wheels installed", "ok": True, "detail": f"{len(wheels)} into {site}"})
    except (OSError, subprocess.CalledProcessError) as exc:
        checks.append({"name": "carried wheels installed", "ok": False, "detail": str(exc)})
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    probe = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120)
    if probe.returncode == 0:
        metrics["torch"] = json.loads(probe.stdout.strip().splitlines()[-1])
        cuda = bool(metrics["torch"]["cuda_available"])  # type: ignore[index]
        if args.device == "cuda":
            checks.append({"name": "CUDA visible to torch", "ok": cuda, "detail": str(metrics["torch"])})
    else:
        checks.append({"name": "torch imports", "ok": False, "detail": probe.stderr.strip()[-300:]})
    status = "pass" if all(c["ok"] for c in checks) else "fail"
    write_record(out, "env", args.device, status, checks=checks, metrics=metrics, seconds=time.monotonic() - start)
    return status == "pass"


def _run_stage(spec: StageSpec, device: str, out: Path, env: dict[str, str], timeout_s: float) -> None:
    """Run one stage's process; a stage that died or timed out without its record gets a failed one."""
    log = out / "logs" / f"{spec.name}.log"
    command = [sys.executable, "-m", spec.module, "--device", device, "--out", str(out)]
    print(f"gpu-check: {spec.name} (up to {timeout_s:.0f} s, log {log})", flush=True)
    start = time.monotonic()
    with log.open("w") as handle:
        try:
            code = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                  timeout=timeout_s).returncode  # fmt: skip
        except subprocess.TimeoutExpired:
            code = None
    if (out / f"{spec.name}.json").is_file():
        return
    tail = log.read_text().strip().splitlines()[-1:] if log.is_file() else []
    why = f"timed out after {timeout_s:.0f} s" if code is None else f"exit {code}: {' '.join(tail)[:300]}"
    failed = [{"name": "stage ran", "ok": False, "detail": why}]
    write_record(out, spec.name, device, "fail", checks=failed, seconds=time.monotonic() - start)


if __name__ == "__main__":
    raise SystemExit(main())
