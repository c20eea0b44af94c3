"""gpu-check's one-screen summary: a line per stage, every failed check under its stage, throughput beside
the H200's limits, and the verdict last."""

from __future__ import annotations

import json
from pathlib import Path

from trainer.gpucheck.summary import write_record, write_summary

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


def test_summary_shows_each_stage_each_failure_and_the_throughput_fractions(tmp_path: Path) -> None:
    torch = {"torch": "2.11.0+cu130", "cuda": "13.0", "nccl": "2.27.7", "gpu": "NVIDIA H200", "gpu_gib": 139.8}
    env = {"python": "3.12.3", "torch": torch, "image": {"pydantic": None, "grpcio": "1.84.2"}, "brought_mib": 28.0}
    env["brought"] = {"pydantic": "2.14.4 (missing)", "grpcio": "1.85.3 (image has 1.84.2 < 1.85.1)"}
    write_record(tmp_path, "env", "cuda", "pass", checks=[{"name": "wheels", "ok": True, "detail": ""}], metrics=env)
    failed = {"name": "score = generation log-probs", "ok": False, "detail": "max |diff| 3e-2 <= 2e-3"}
    write_record(tmp_path, "hf", "cuda", "fail", seconds=12.3, checks=[failed])
    write_record(tmp_path, "ipc", "cuda", "skip", skipped="3 s of the budget left")
    metrics = {"Qwen3-1.7B": PAPER, "Qwen3-4B": PAPER}
    write_record(
        tmp_path, "throughput", "cuda", "pass", checks=[{"name": "x", "ok": True, "detail": ""}], metrics=metrics
    )
    text = write_summary(tmp_path, 312, 420, ["learner", "ipc", "hf", "throughput"])
    lines = text.splitlines()
    assert lines[0] == "envhub gpu-check  device cuda  312 s of 420 s"
    assert "NVIDIA H200 139.8 GiB" in lines[1] and "NCCL 2.27.7" in lines[1]
    assert "replaced: grpcio 1.84.2 -> 1.85.3" in lines[2] and "missing: pydantic" in lines[3]
    assert "    FAIL  score = generation log-probs: max |diff| 3e-2 <= 2e-3" in lines
    assert any(line.startswith("ipc") and "SKIP" in line and "budget left" in line for line in lines)
    assert any(line.startswith("learner tok/s (MFU)") and "25,000 (0.41)" in line for line in lines)
    assert any(line.startswith("learner peak GiB") and "40.2 (est 29.5)" in line for line in lines)
    assert lines[-1] == "RESULT: FAIL (4 stages: 2 pass, 1 fail, 1 skip)" and len(lines) <= 30
    assert json.loads((tmp_path / "summary.json").read_text())["stages"]["hf"] == "fail"
    assert (tmp_path / "summary.txt").read_text() == text + "\n"
