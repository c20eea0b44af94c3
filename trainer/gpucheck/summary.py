"""gpu-check's records (`<out>/<stage>.json`) and the one-screen summary made from them (standard library only).

    envhub gpu-check  device cuda  312 s of 420 s              <- when, on what, time used of the budget
    image    python 3.12.3  torch 2.11.0+cu130  CUDA 13.0 ...  <- the machine as torch sees it
    brought  pydantic 2.14.4 (missing), ...                    <- carried wheels installed, and why
    env        PASS    4 s  16/16 checks                       <- one line per stage: result, seconds, checks
      FAIL  <check>: <numbers>                                 <- under a stage, every failed check
    <size>  learner tok/s ...  limit                           <- throughput against the H200's limits
    RESULT: PASS (7 stages: 7 pass)

docs/gpu.md explains every line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

H200_LIMITS = "bf16 790 TFLOP/s, 4.3 TB/s (GPU-FACTS 8)"
"""The limits the throughput fractions are taken against (common.BF16_PEAK_FLOPS, common.MEMORY_BANDWIDTH)."""


def write_record(
    out: Path,
    name: str,
    device: str,
    status: str,
    *,
    seconds: float = 0.0,
    skipped: str = "",
    checks: Sequence[Mapping[str, Any]] = (),
    metrics: Mapping[str, Any] | None = None,
) -> Path:
    """Write one stage's record, `<out>/<name>.json`: status pass/fail/skip, its checks and metrics."""
    record = {
        "stage": name,
        "device": device,
        "status": status,
        "seconds": round(seconds, 1),
        "skipped": skipped,
        "checks": [dict(c) for c in checks],
        "metrics": dict(metrics or {}),
    }
    path = out / f"{name}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def _image_line(env: Mapping[str, Any]) -> str:
    metrics = env.get("metrics", {})
    torch = metrics.get("torch", {})
    parts = [f"python {metrics.get('python', '?')}", f"torch {torch.get('torch', '?')}"]
    if torch.get("gpu"):
        parts += [
            f"CUDA {torch.get('cuda')}",
            f"NCCL {torch.get('nccl')}",
            f"{torch['gpu']} {torch.get('gpu_gib')} GiB",
        ]
    image = metrics.get("image", {})
    parts += [f"{name} {image[name]}" for name in ("transformers", "grpcio", "protobuf") if image.get(name)]
    return "image    " + "  ".join(parts)


def _brought_lines(env: Mapping[str, Any]) -> list[str]:
    """What was installed from the carried wheels: the missing ones by name, the too-old ones with versions."""
    metrics = env.get("metrics", {})
    brought, image = metrics.get("brought", {}), metrics.get("image", {})
    if not brought:
        return ["brought  nothing (the image has every need)"]
    missing = [name for name in brought if image.get(name) is None]
    replaced = [f"{name} {image[name]} -> {brought[name].split()[0]}" for name in brought if image.get(name)]
    head = f"brought  {len(brought)} wheels, {metrics.get('brought_mib', '?')} MiB"
    lines = [head + (f"; replaced: {', '.join(replaced)}" if replaced else "")]
    words, line = [f"missing: {missing[0]}", *missing[1:]] if missing else [], "        "
    for word in words:
        if len(line) + len(word) > 110:
            lines.append(line.rstrip())
            line = "        "
        line += word + ", "
    return [*lines, line.rstrip(", ")] if words else lines


def _stage_lines(record: Mapping[str, Any]) -> list[str]:
    checks = record.get("checks", [])
    passed = sum(bool(c["ok"]) for c in checks)
    what = record["skipped"] if record["status"] == "skip" else f"{passed}/{len(checks)} checks"
    lines = [f"{record['stage']:<11} {record['status'].upper():<5} {record['seconds']:>5.0f} s  {what}"]
    lines += [f"    FAIL  {c['name']}: {c['detail']}" for c in checks if not c["ok"]]
    return lines


def _fraction(value: float | None) -> str:
    return f" ({value:.2f})" if value is not None else ""


def _throughput_lines(record: Mapping[str, Any]) -> list[str]:
    rows = {k: v for k, v in record.get("metrics", {}).items() if isinstance(v, dict)}
    if not rows:
        return []
    lines = [f"{'':15}" + "".join(f"{name:>26}" for name in rows) + f"   limit: {H200_LIMITS}"]
    cells = {
        "learner tok/s (MFU)": lambda m: f"{m['learner_tok_s']:,.0f}{_fraction(m.get('learner_mfu'))}",
        "learner peak GiB": lambda m: f"{m['learner_peak_gib']:.1f} (est {m['learner_predicted_gib']:.1f})",
        "export s (BW)": lambda m: f"{m['export_s']:.2f}{_fraction(m.get('export_bw_fraction'))}",
        "hf gen tok/s (BW)": lambda m: f"{m['gen_tok_s']:,.0f}{_fraction(m.get('gen_hbm_fraction'))}",
    }
    for label, cell in cells.items():
        try:
            lines.append(f"{label:<15}" + "".join(f"{cell(m):>26}" for m in rows.values()))
        except KeyError:
            continue
    return lines


def write_summary(out: Path, seconds: float, budget_s: float, order: Sequence[str]) -> str:
    """The summary of the records in `out` (stages in `order`, env first), written to summary.txt and .json."""
    records = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json") if p.stem != "summary"}
    env = records.get("env", {})
    device = env.get("device", "?")
    lines = [f"envhub gpu-check  device {device}  {seconds:.0f} s of {budget_s:.0f} s", _image_line(env)]
    lines += _brought_lines(env)
    present = [records[name] for name in ["env", *order] if name in records]
    for record in present:
        lines += _stage_lines(record)
    if "throughput" in records:
        lines += _throughput_lines(records["throughput"])
    counts = {s: sum(r["status"] == s for r in present) for s in ("pass", "fail", "skip")}
    verdict = "FAIL" if counts["fail"] else "PASS"
    tally = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    lines.append(f"logs {out}/logs/<stage>.log, records {out}/<stage>.json")
    lines.append(f"RESULT: {verdict} ({len(present)} stages: {tally})")
    text = "\n".join(lines)
    (out / "summary.txt").write_text(text + "\n")
    summary = {"result": verdict, "seconds": round(seconds, 1), "stages": {r["stage"]: r["status"] for r in present}}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return text
