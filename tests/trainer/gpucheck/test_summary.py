"""gpu-check's one-screen summary: a line per stage, every failed check under its stage, throughput beside
the H200's limits (a part that gave no figure shown as "-", the others kept), and the verdict last; the
outputs written whole or not at all; the exit status from the run's own records only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.gpucheck.summary import (
    exit_code,
    make_record,
    summary_text,
    throughput_lines,
    write_outputs,
    write_text,
)

PAPER = {
    "learner_tok_s": 25_000.0,
    "learner_step_s": 0.65,
    "learner_peak_gib": 40.2,
    "learner_predicted_gib": 29.5,
    "learner_mfu": 0.41,
    "export_s": 1.9,
    "export_bw_fraction": 0.12,
    "gen_tok_s": 2400.0,
    "gen_hbm_fraction": 0.05,
}


def _records() -> dict[str, dict]:
    torch = {"torch": "2.11.0+cu130", "cuda": "13.0", "nccl": "2.27.7", "gpu": "NVIDIA H200", "gpu_gib": 139.8}
    env = {"python": "3.12.3", "torch": torch, "image": {"pydantic": None, "grpcio": "1.84.2"}, "brought_mib": 28.0}
    env["brought"] = {"pydantic": "2.14.4 (missing)", "grpcio": "1.85.3 (image has 1.84.2 < 1.85.1)"}
    failed = {"name": "score = generation log-probs", "ok": False, "detail": "max |diff| 3e-2 <= 2e-3"}
    passed = [{"name": "x", "ok": True, "detail": ""}]
    sizes = {"Qwen3-1.7B": PAPER, "Qwen3-4B": PAPER}
    return {
        "env": make_record("env", "cuda", "pass", checks=passed, metrics=env),
        "throughput": make_record("throughput", "cuda", "pass", checks=passed, metrics=sizes),
        "ipc": make_record("ipc", "cuda", "skip", skipped="3 s of its budget left, under its minimum of 20 s"),
        "hf": make_record("hf", "cuda", "fail", seconds=12.3, checks=[failed]),
    }


def test_summary_shows_each_stage_each_failure_and_the_throughput_fractions(tmp_path: Path) -> None:
    records = _records()
    text = write_outputs(tmp_path, records, 312, 480, ["throughput", "learner", "ipc", "hf"])
    lines = text.splitlines()
    assert lines[0] == "envhub gpu-check  device cuda  312 s of 480 s"
    assert "NVIDIA H200 139.8 GiB" in lines[1] and "NCCL 2.27.7" in lines[1]
    assert "replaced: grpcio 1.84.2 -> 1.85.3" in lines[2] and "missing: pydantic" in lines[3]
    assert "    FAIL  score = generation log-probs: max |diff| 3e-2 <= 2e-3" in lines
    assert any(line.startswith("ipc") and "SKIP" in line and "minimum" in line for line in lines)
    assert any(line.startswith("learner tok/s (MFU)") and "25,000 (0.41)" in line for line in lines)
    assert any(line.startswith("learner peak GiB") and "40.2 (est 29.5)" in line for line in lines)
    assert lines[-1] == "RESULT: FAIL (4 stages: 2 pass, 1 fail, 1 skip)" and len(lines) <= 30
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["stages"]["hf"] == "fail" and summary["result"] == "FAIL"
    assert (tmp_path / "summary.txt").read_text() == text + "\n"
    assert json.loads((tmp_path / "records.json").read_text()) == records
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records.json", "summary.json", "summary.txt"]


def test_a_run_in_progress_says_how_far_it_got() -> None:
    records = {k: v for k, v in _records().items() if k in ("env", "throughput")}
    text = summary_text(records, 100, 480, ["throughput", "learner", "fsdp"], out=Path("/o"), done=False)
    assert text.splitlines()[-1] == "RESULT: INCOMPLETE (2 of 4 stages so far: 2 pass)"


def test_a_size_missing_a_part_keeps_the_figures_of_the_others() -> None:
    learner_only = {k: v for k, v in PAPER.items() if k.startswith("learner")}
    generation_only = {"gen_tok_s": 900.0, "gen_hbm_fraction": 0.02}
    metrics = {"Qwen3-1.7B": learner_only, "Qwen3-4B": generation_only}
    record = make_record("throughput", "cuda", "fail", metrics=metrics)
    lines = throughput_lines(record)
    row = {line[:19].strip(): line[19:].split() for line in lines[1:]}
    assert row["learner tok/s (MFU)"] == ["25,000", "(0.41)", "-"]
    assert "export s (BW)" not in row  # no size gave one
    assert row["hf gen tok/s (BW)"] == ["-", "900", "(0.02)"]


def test_the_exit_status_comes_from_the_records_alone() -> None:
    records = _records()
    assert exit_code(records) == 1
    del records["hf"]
    assert exit_code(records) == 0


def test_outputs_are_replaced_whole(tmp_path: Path) -> None:
    path = write_text(tmp_path / "summary.txt", "old\n")

    with pytest.raises(TypeError):
        write_text(path, 123)  # type: ignore[arg-type]
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.txt"]  # no temporary left behind
