"""gpu-check stage `throughput`: speed and memory at the papers' model sizes, random-initialised from
Qwen3-1.7B's and Qwen3-4B's shapes (no weights travel; `trainer.sizing.QWEN3`), beside the H200's limits.

Each size's learner (with its weight export) and its hf generation run as separate processes, one after
another (`trainer.gpucheck.throughput_part` says what each measures): a size's memory figures are its own,
and an OOM, a crash or a hang in one part costs only that part's figures. Each part has a share of the
stage's time (its own and what the parts before it left, never the later parts'); the stage record is
rewritten as each part finishes, with its figures, so a stage ended at its limit still reports every part
that finished. On CPU the same code runs at a tiny size as a rehearsal (fractions not computed).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from trainer.gpucheck.common import Stage, log, stage_main
from trainer.gpucheck.procs import run_limited
from trainer.gpucheck.summary import read_json
from trainer.gpucheck.throughput_part import PARTS, SIZES

PART_WEIGHT = {"learner": 0.6, "generation": 0.4}
"""A size's time split between its parts."""
MARGIN_S = 5.0
"""Kept back from the stage's limit: the record is written after the last part."""
MIN_PART_S = {"cuda": 20.0, "cpu": 10.0}
"""A part starts only with at least this long to run (process start, imports, CUDA, a model built)."""


def size_weight(params: int) -> float:
    """A size's share of the stage: a fixed part (process start, imports) plus one growing with its parameters."""
    return 1.0 + params / 1e9


def schedule(device: str, seconds: float) -> list[tuple[str, str, float]]:
    """Every (size, part) in order with the time from the stage's start by which it must be done."""
    shapes = SIZES[device].shapes
    total = sum(size_weight(s.params) for s in shapes)
    out, until = [], 0.0
    for shape in shapes:
        for part in PARTS:
            until += seconds * size_weight(shape.params) / total * PART_WEIGHT[part]
            out.append((shape.name, part, until))
    return out


def run(stage: Stage) -> None:
    start, limit = time.monotonic(), stage.time_left()
    usable = (limit - MARGIN_S) if limit != float("inf") else 1200.0
    for size, part, until in schedule(stage.device, usable):
        figures = stage.metrics.setdefault(size, {})
        left = min(until - (time.monotonic() - start), stage.time_left() - MARGIN_S)
        if left < MIN_PART_S[stage.device]:
            stage.check(f"{size} {part}", False, f"not started: {max(left, 0):.0f} s left for it")
            stage.write()
            continue
        path = stage.out / f"{size}-{part}.json"
        command = [sys.executable, "-m", "trainer.gpucheck.throughput_part", "--device", stage.device,
                   "--size", size, "--part", part, "--figures", str(path)]  # fmt: skip
        log(f"throughput: {size} {part} (up to {left:.0f} s)")
        finished = run_limited(command, None, left, own_group=False)  # its output: this stage's log
        got = read_json(path)
        got = got if isinstance(got, dict) else {}
        error = got.pop("error", None)
        figures.update({k: v for k, v in got.items() if isinstance(v, int | float)})
        ok = finished.code == 0 and not error and bool(got)
        if finished.timed_out:
            why = f"ended at its limit of {left:.0f} s"
        elif error:
            why = error
        elif finished.code != 0:
            why = f"exit {finished.code} (its output is in this stage's log)"
        else:
            why = _describe(got)
        if not ok and got:
            why += f"; kept: {_describe(got)}"
        stage.check(f"{size} {part}", ok, why)
        stage.write()
    for size in list(stage.metrics):
        if not stage.metrics[size]:
            del stage.metrics[size]


def _describe(values: dict[str, object]) -> str:
    return ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in values.items())


def part_figures(folder: Path) -> dict[str, dict[str, object]]:
    """Every part's figures file in a stage folder, by file stem (for tests and reading a run by hand)."""
    return {p.stem: read_json(p) or {} for p in sorted(folder.glob("*-*.json"))}


if __name__ == "__main__":
    raise SystemExit(stage_main("throughput", run))
