"""gpu-check's records and the one-screen summary made from them (standard library only).

A record is one stage's result: `{"stage", "device", "status": pass/fail/skip, "seconds", "skipped", "checks":
[{"name", "ok", "detail"}], "metrics"}`. The orchestrator keeps every record of the run and, after each stage,
rewrites the run's outputs (each file written whole to a temporary name, then renamed over the old one):

    records.json   every record so far, by stage
    summary.txt    the one-screen summary (also printed at the end)
    summary.json   the verdict and each stage's status

The summary:

    envhub gpu-check  device cuda  312 s of 440 s              <- what, on what, time used of the budget
    image    python 3.12.3  torch 2.11.0+cu130  CUDA 13.0 ...  <- the machine as torch sees it
    brought  22 wheels, 28 MiB; ...                            <- carried wheels installed, and why
    env        PASS    4 s  16/16 checks                       <- one line per stage: result, seconds, checks
        FAIL  <check>: <numbers>                               <- under a stage, every failed check
    <size>  learner tok/s ...  limit                           <- throughput against the H200's limits
    RESULT: PASS (7 stages: 7 pass)

docs/gpu.md explains every line.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

H200_LIMITS = "bf16 790 TFLOP/s, 4.3 TB/s (GPU-FACTS 8)"
"""The limits the throughput fractions are taken against (common.BF16_PEAK_FLOPS, common.MEMORY_BANDWIDTH)."""
OUTPUTS = ("records.json", "summary.txt", "summary.json", "logs.txt")
"""Every file the orchestrator writes into its output folder (the device returns at most 8 files of $OUT)."""


def write_text(path: Path, text: str) -> Path:
    """Write `text` to `path` atomically: a temporary file beside it, then `os.replace` (a reader, or a run killed
    mid-write, sees the old file or the new one, never half of one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(temp, 0o644)  # mkstemp's 0600 would be an odd mode for a report
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: Path, value: Any) -> Path:
    """`value` as indented JSON, written atomically."""
    return write_text(path, json.dumps(value, indent=2) + "\n")


def read_json(path: Path) -> Any:
    """The JSON in `path`; None when it is absent or not (yet) valid JSON."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def make_record(
    name: str,
    device: str,
    status: str,
    *,
    seconds: float = 0.0,
    skipped: str = "",
    checks: Sequence[Mapping[str, Any]] = (),
    metrics: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One stage's record."""
    return {
        "stage": name,
        "device": device,
        "status": status,
        "seconds": round(seconds, 1),
        "skipped": skipped,
        "checks": [dict(c) for c in checks],
        "metrics": dict(metrics or {}),
    }


def is_record(value: Any) -> bool:
    """Whether `value` has a record's shape (a stage's `record.json` may be absent or cut short)."""
    return isinstance(value, dict) and value.get("status") in ("pass", "fail", "skip") and "stage" in value


def verdict(records: Mapping[str, Mapping[str, Any]]) -> str:
    """FAIL when any record failed, else PASS."""
    return "FAIL" if any(r.get("status") == "fail" for r in records.values()) else "PASS"


def exit_code(records: Mapping[str, Mapping[str, Any]]) -> int:
    """The run's exit status: 1 when a stage failed, else 0 (from the run's own records, nothing else)."""
    return 1 if verdict(records) == "FAIL" else 0


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


def stage_lines(record: Mapping[str, Any]) -> list[str]:
    """A stage's line and, under it, each failed check."""
    checks = record.get("checks", [])
    passed = sum(bool(c["ok"]) for c in checks)
    what = record["skipped"] if record["status"] == "skip" else f"{passed}/{len(checks)} checks"
    lines = [f"{record['stage']:<11} {record['status'].upper():<5} {record['seconds']:>5.0f} s  {what}"]
    lines += [f"    FAIL  {c['name']}: {c['detail']}" for c in checks if not c["ok"]]
    return lines


def _fraction(value: float | None) -> str:
    return f" ({value:.2f})" if value is not None else ""


THROUGHPUT_CELLS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "learner tok/s (MFU)": lambda m: f"{m['learner_tok_s']:,.0f}{_fraction(m.get('learner_mfu'))}",
    "learner peak GiB": lambda m: f"{m['learner_peak_gib']:.1f} (est {m['learner_predicted_gib']:.1f})",
    "export s (BW)": lambda m: f"{m['export_s']:.2f}{_fraction(m.get('export_bw_fraction'))}",
    "hf gen tok/s (BW)": lambda m: f"{m['gen_tok_s']:,.0f}{_fraction(m.get('gen_hbm_fraction'))}",
}
"""The throughput table's rows: a cell per size, "-" where that part gave no figure."""


def _cell(make: Callable[[Mapping[str, Any]], str], figures: Mapping[str, Any]) -> str:
    try:
        return make(figures)
    except (KeyError, TypeError, ValueError):
        return "-"


def throughput_lines(record: Mapping[str, Any]) -> list[str]:
    """The figures of every size that gave any, a row per figure, beside the H200's limits."""
    rows = {k: v for k, v in record.get("metrics", {}).items() if isinstance(v, dict) and v}
    if not rows:
        return []
    lines = [f"{'':19}" + "".join(f"{name:>24}" for name in rows) + f"   limit: {H200_LIMITS}"]
    for label, make in THROUGHPUT_CELLS.items():
        cells = [_cell(make, m) for m in rows.values()]
        if any(c != "-" for c in cells):
            lines.append(f"{label:<19}" + "".join(f"{c:>24}" for c in cells))
    return lines


def summary_text(
    records: Mapping[str, Mapping[str, Any]],
    seconds: float,
    budget_s: float,
    order: Sequence[str],
    *,
    out: Path,
    done: bool = True,
) -> str:
    """The one-screen summary of `records` (env first, then the stages in `order`). While the run is still going
    (`done` False) the last line says how far it got instead of a verdict."""
    env = records.get("env", {})
    device = env.get("device", "?")
    lines = [f"envhub gpu-check  device {device}  {seconds:.0f} s of {budget_s:.0f} s", _image_line(env)]
    lines += _brought_lines(env)
    names = ["env", *order, *(n for n in records if n not in ("env", *order))]
    present = [records[name] for name in names if name in records]
    for record in present:
        lines += stage_lines(record)
    if "throughput" in records:
        lines += throughput_lines(records["throughput"])
    counts = {s: sum(r["status"] == s for r in present) for s in ("pass", "fail", "skip")}
    tally = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    lines.append(f"records {out}/records.json, logs {out}/logs.txt")
    if done:
        lines.append(f"RESULT: {verdict(records)} ({len(present)} stages: {tally})")
    else:
        lines.append(f"RESULT: INCOMPLETE ({len(present)} of {len(order) + 1} stages so far: {tally})")
    return "\n".join(lines)


def write_outputs(
    out: Path,
    records: Mapping[str, Mapping[str, Any]],
    seconds: float,
    budget_s: float,
    order: Sequence[str],
    *,
    done: bool = True,
) -> str:
    """Rewrite `records.json`, `summary.txt` and `summary.json` in `out` (each atomically); the summary text."""
    write_json(out / "records.json", dict(records))
    text = summary_text(records, seconds, budget_s, order, out=out, done=done)
    write_text(out / "summary.txt", text + "\n")
    result = verdict(records) if done else "INCOMPLETE"
    stages = {name: r["status"] for name, r in records.items()}
    write_json(out / "summary.json", {"result": result, "seconds": round(seconds, 1), "stages": stages})
    return text
