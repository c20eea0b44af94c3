"""`python -m trainer.gpucheck` (`make gpu-check`): the GPU path checked on the one machine this project can be
lent (GPU-FACTS section 8: one H200, Python 3.12, torch 2.11, no network, no vLLM, no Ray), in one command.

1. env: the image's versions against `wheels.NEEDS`; the carried wheels it lacks (`--wheels`, made here by
   `make gpu-wheels`) installed into `<work>/site` with pip, no index, no dependencies, a group of wheels
   per pip call (a wheel that fails skips only the stages that import it); torch is never brought; torch's
   view of the device (a probe with a time limit of its own).
2. the stages, most informative first, each a process group of its own with `<work>/site` first on
   PYTHONPATH, in a folder of its own emptied first (`<work>/<stage>`), its log in `<work>/logs`:
   throughput, learner, fsdp, ipc, hf, train (their modules' docstrings say what each checks). Each stage
   has a budget, and the budgets add up to the run's: a stage may use its own and whatever the stages
   before it left, never the time of the stages after it; one that cannot have its stated minimum is
   skipped, one that overruns is ended with everything it started.
3. after each stage, `<out>/records.json`, `<out>/summary.txt`, `<out>/summary.json` and `<out>/logs.txt`
   rewritten (atomically), so a run cut short still leaves what it found; the one-screen summary printed
   at the end; exit 1 if a stage failed.

`<out>` is `$OUT` when that is set (the device tool returns what is under it: `make gpu-check` there needs no
other command), else runs/gpu-check; `<work>` is runs/gpu-check/work.

`--device cpu` runs the same on CPU (gloo instead of NCCL, the IPC stage skipped, tiny sizes): CI runs it.
Standard library only here: nothing may be imported before the wheels are in place.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.gpucheck.procs import run_limited, tail
from trainer.gpucheck.summary import (
    exit_code,
    is_record,
    make_record,
    read_json,
    stage_lines,
    throughput_lines,
    write_outputs,
    write_text,
)
from trainer.gpucheck.wheels import blocked_stages, image_versions, install, plan

ROOT = Path(__file__).resolve().parents[2]
RECORD = "record.json"
"""A stage's record in its folder (common.RECORD; common imports torch, this module must not)."""


@dataclass(frozen=True)
class StageSpec:
    """One stage: its module, its share of the run's time on CUDA, and the least time it starts with."""

    name: str
    module: str
    budget_s: float
    min_s: float


ENV_BUDGET_S = 40.0
"""The env step's share: the carried wheels' install (about 28 MiB, a pip call per group) and the torch probe."""
PROBE_TIMEOUT_S = 60.0
"""The torch probe's own limit (importing torch and starting CUDA takes seconds)."""
STAGES = (
    StageSpec("throughput", "trainer.gpucheck.throughput", 190, 90),
    StageSpec("learner", "trainer.gpucheck.learner_check", 40, 20),
    StageSpec("fsdp", "trainer.gpucheck.fsdp_check", 50, 25),
    StageSpec("ipc", "trainer.gpucheck.ipc_check", 40, 20),
    StageSpec("hf", "trainer.gpucheck.hf_check", 40, 20),
    StageSpec("train", "trainer.gpucheck.train_check", 80, 45),
)
"""In order, most informative first: each a budget (seconds on CUDA) and the least time it starts with."""
CUDA_BUDGET_S = ENV_BUDGET_S + sum(s.budget_s for s in STAGES)
"""The run's time on the H200, the budgets added up: 480 s (docs/gpu.md's device call gives the command 540 s)."""
CPU_SLACK = 4.0
"""On CPU (CI, a shared machine) every budget and minimum is this many times its CUDA figure."""
LOG_TAIL_BYTES = 256 * 1024
"""Of each stage's log, at most this much (its end) goes into `<out>/logs.txt`."""

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


def default_out() -> Path:
    """`$OUT` when set (what the device machine returns), else runs/gpu-check."""
    return Path(os.environ["OUT"]) if os.environ.get("OUT") else Path("runs/gpu-check")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trainer.gpucheck", description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--out", type=Path, help="records, summary, logs (default: $OUT if set, else runs/gpu-check)")
    parser.add_argument("--work", type=Path, default=Path("runs/gpu-check/work"), help="each stage's own folder")
    parser.add_argument("--wheels", type=Path, default=ROOT / ".gpu-wheels", help="carried wheels (make gpu-wheels)")
    parser.add_argument(
        "--budget-s",
        type=float,
        help=f"the run's time limit, shared out in the stages' proportions (default {CUDA_BUDGET_S:.0f} s on CUDA, "
        f"{CPU_SLACK:.0f} times that on CPU)",
    )
    parser.add_argument("--only", action="append", default=[], help="run only these stages (repeatable)")
    return parser


@dataclass
class Run:
    """One run's settings, clock and records."""

    device: str
    out: Path
    work: Path
    stages: tuple[StageSpec, ...]
    scale: float
    """Each budget and minimum is its CUDA figure times this."""
    start: float
    records: dict[str, dict[str, Any]]

    @property
    def budget_s(self) -> float:
        return self.scale * (ENV_BUDGET_S + sum(s.budget_s for s in self.stages))

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def deadline(self, name: str) -> float:
        """Seconds from the start by which stage `name` ("env" or a stage) must be done: its budget plus
        every budget before it."""
        total = ENV_BUDGET_S
        for spec in self.stages:
            if name == "env":
                break
            total += spec.budget_s
            if spec.name == name:
                break
        return self.scale * total

    def publish(self, *, done: bool = False) -> str:
        """Rewrite the outputs from the records so far."""
        order = [s.name for s in self.stages]
        return write_outputs(self.out, self.records, self.elapsed(), self.budget_s, order, done=done)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    selected = tuple(s for s in STAGES if not args.only or s.name in args.only)
    unknown = set(args.only) - {s.name for s in STAGES}
    if unknown:
        _parser().error(f"no such stage: {', '.join(sorted(unknown))}")
    slack = 1.0 if args.device == "cuda" else CPU_SLACK
    default = slack * (ENV_BUDGET_S + sum(s.budget_s for s in selected))
    scale = slack * (args.budget_s / default if args.budget_s else 1.0)
    out, work = (args.out or default_out()).resolve(), args.work.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for name in ("records.json", "summary.txt", "summary.json", "logs.txt"):
        (out / name).unlink(missing_ok=True)  # this run's outputs only
    shutil.rmtree(work / "logs", ignore_errors=True)
    (work / "logs").mkdir(parents=True, exist_ok=True)
    run = Run(args.device, out, work, selected, scale, time.monotonic(), {})
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("ENVHUB_CACHE", str(work / "envhub-cache"))  # ALFWorld's generated games: a cache, kept
    try:
        blocked = _environment(run, args.wheels, env)
        run.publish()
        for spec in selected:
            run.records[spec.name] = _stage(run, spec, env, blocked)
            _print_stage(run.records[spec.name])
            _collect_logs(run)
            run.publish()
    except BaseException as exc:  # the summary is written whatever happened; the error is in it
        traceback.print_exc()
        run.records.setdefault("env", make_record("env", args.device, "fail"))
        run.records["gpu-check"] = make_record(
            "gpu-check", args.device, "fail",
            checks=[{"name": "orchestrator", "ok": False, "detail": f"{type(exc).__name__}: {exc}"[:300]}],
        )  # fmt: skip
        if not isinstance(exc, Exception):
            _finish(run)
            raise
    return _finish(run)


def _finish(run: Run) -> int:
    _collect_logs(run)
    summary = run.publish(done=True)
    print(summary, flush=True)
    return exit_code(run.records)


def _environment(run: Run, wheels: Path, env: dict[str, str]) -> dict[str, str]:
    """Versions, the wheels brought, torch's device: the `env` record. Returns, for each stage that cannot run,
    why (an empty reason list means all can)."""
    start = time.monotonic()
    log = run.work / "logs" / "env.log"
    decisions = plan(image_versions())
    unmet = [d for d in decisions if d.action == "unmet"]
    brought = [d for d in decisions if d.action == "bring"]
    checks = [{"name": f"{d.need.dist} on the image", "ok": False, "detail": d.reason} for d in unmet]
    metrics: dict[str, Any] = {
        "python": sys.version.split()[0],
        "image": {d.need.dist: d.installed for d in decisions},
        "brought": {d.need.dist: f"{d.need.version} ({d.reason})" for d in brought},
    }
    site = run.work / "site"
    shutil.rmtree(site, ignore_errors=True)
    installed = install(brought, wheels, site, timeout_s=max(run.deadline("env") - run.elapsed() - 10, 15))
    write_text(log, "\n".join(installed.log) + "\n")
    metrics["brought_mib"] = round(sum(w.stat().st_size for w in installed.wheels) / 2**20, 1)
    for dist, why in installed.failed.items():
        checks.append({"name": f"{dist} installed", "ok": False, "detail": why})
    if brought:
        detail = f"{len(installed.wheels)} of {len(brought)} into {site}"
        checks.append({"name": "carried wheels installed", "ok": not installed.failed, "detail": detail})
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    names = [s.name for s in run.stages]
    blocked = {
        stage: f"needs {', '.join(dists)} (not usable: see env)"
        for stage, dists in blocked_stages([d.need.dist for d in unmet] + list(installed.failed), names).items()
    }
    torch_ok = _probe(run, env, checks, metrics, log)
    if not torch_ok:
        blocked = dict.fromkeys(names, "torch's probe failed (see env)")
    status = "pass" if all(c["ok"] for c in checks) else "fail"
    record = make_record("env", run.device, status, checks=checks, metrics=metrics, seconds=time.monotonic() - start)
    run.records["env"] = record
    _print_stage(record)
    return blocked


def _probe(run: Run, env: dict[str, str], checks: list[dict[str, Any]], metrics: dict[str, Any], log: Path) -> bool:
    """Ask torch, in a process of its own with a time limit, about the device; whether the stages can run."""
    command = [sys.executable, "-c", PROBE]
    try:
        probe = subprocess.run(command, capture_output=True, text=True, env=env, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        with log.open("a") as handle:
            handle.write(f"torch probe timed out after {PROBE_TIMEOUT_S:.0f} s\n{stderr}\n")
        checks.append({"name": "torch probe", "ok": False, "detail": f"timed out after {PROBE_TIMEOUT_S:.0f} s"})
        return False
    with log.open("a") as handle:
        handle.write(probe.stdout + probe.stderr)
    if probe.returncode != 0:
        checks.append({"name": "torch imports", "ok": False, "detail": probe.stderr.strip()[-300:]})
        return False
    try:
        metrics["torch"] = json.loads(probe.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        checks.append({"name": "torch probe", "ok": False, "detail": f"unreadable output {probe.stdout[-200:]!r}"})
        return False
    checks.append({"name": "torch imports", "ok": True, "detail": metrics["torch"]["torch"]})
    if run.device == "cuda":
        cuda = bool(metrics["torch"]["cuda_available"])
        checks.append({"name": "CUDA visible to torch", "ok": cuda, "detail": str(metrics["torch"])})
        return cuda
    return True


def _stage(run: Run, spec: StageSpec, env: dict[str, str], blocked: dict[str, str]) -> dict[str, Any]:
    """Run one stage (or say why not): its record."""
    left = run.deadline(spec.name) - run.elapsed()
    least = run.scale * spec.min_s
    if spec.name in blocked:
        return make_record(spec.name, run.device, "skip", skipped=blocked[spec.name])
    if left < least:
        why = f"{max(left, 0):.0f} s of its budget left, under its minimum of {least:.0f} s"
        return make_record(spec.name, run.device, "skip", skipped=why)
    folder = run.work / spec.name
    shutil.rmtree(folder, ignore_errors=True)  # nothing a previous run left is counted
    folder.mkdir(parents=True)
    log = run.work / "logs" / f"{spec.name}.log"
    command = [sys.executable, "-m", spec.module, "--device", run.device, "--out", str(folder),
               "--until", f"{time.time() + left:.1f}"]  # fmt: skip
    print(f"gpu-check: {spec.name} (up to {left:.0f} s, log {log})", flush=True)
    finished = run_limited(command, log, left, env=env, cwd=ROOT)
    found = read_json(folder / RECORD)
    record: dict[str, Any] = found if is_record(found) else make_record(spec.name, run.device, "fail")
    record["seconds"] = round(finished.seconds, 1)
    if finished.timed_out:
        why = f"ended at its limit of {left:.0f} s" + ("; the figures above are what it recorded" if found else "")
        record["checks"].append({"name": "finished in time", "ok": False, "detail": why})
    elif not is_record(found):
        why = f"exit {finished.code}: {tail(log)}"
        record["checks"].append({"name": "stage ran", "ok": False, "detail": why})
    elif finished.code != 0 and record["status"] == "pass":
        record["checks"].append({"name": "exited cleanly", "ok": False, "detail": f"exit {finished.code}: {tail(log)}"})
    if any(not c["ok"] for c in record["checks"]) or (not record["checks"] and record["status"] != "skip"):
        record["status"] = "fail"
    return record


def _print_stage(record: dict[str, Any]) -> None:
    lines = stage_lines(record)
    if record["stage"] == "throughput":
        lines += throughput_lines(record)
    print("\n".join(lines), flush=True)


def _collect_logs(run: Run) -> None:
    """`<out>/logs.txt`: the end of every log so far (env first, then the stages in order)."""
    parts = []
    for name in ["env", *(s.name for s in run.stages)]:
        path = run.work / "logs" / f"{name}.log"
        if not path.is_file():
            continue
        data = path.read_bytes()
        cut = len(data) > LOG_TAIL_BYTES
        text = data[-LOG_TAIL_BYTES:].decode(errors="replace")
        parts.append(f"===== {name}{' (its last 256 KiB)' if cut else ''} =====\n{text.rstrip()}\n")
    write_text(run.out / "logs.txt", "\n".join(parts))


if __name__ == "__main__":
    raise SystemExit(main())
