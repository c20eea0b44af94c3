"""`make gpu-check DEVICE=cpu`: the GPU check's own command on CPU (gloo, IPC skipped, tiny sizes), so the
script is known to work before a lent GPU minute is spent on it. Every stage runs as on the H200: the
throughput code at a tiny size, the learner against its CPU reference, FSDP2 + DCP on a one-rank group,
the hf backend, a real ATOD run against a local ALFWorld server. Twice in the same folders: a retry on a
machine that kept the first run's files passes too. And the throughput stage with a failure injected in one
part keeps the figures of the others."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.gpucheck.__main__ import STAGES
from trainer.gpucheck.summary import OUTPUTS

ROOT = Path(__file__).parents[3]


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_gpu_check_passes_on_cpu_twice_in_a_row_and_summarises_on_one_screen(tmp_path: Path) -> None:
    pytest.importorskip("alfworld")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ENVHUB_CACHE": str(tmp_path / "cache")}
    env.pop("OUT", None)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "trainer.gpucheck", "--device", "cpu", "--out", str(out),
               "--work", str(tmp_path / "work")]  # fmt: skip
    for attempt in (1, 2):
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1100)
        summary = (out / "summary.txt").read_text()
        assert done.returncode == 0, f"run {attempt}: {done.stdout[-3000:]}"
        lines = summary.splitlines()
        assert lines[-1].startswith("RESULT: PASS") and len(lines) <= 30, summary
        assert done.stdout.rstrip().endswith(summary.rstrip())
    assert sorted(p.name for p in out.iterdir()) == sorted(OUTPUTS)
    assert json.loads((out / "summary.json").read_text())["stages"] == {
        "env": "pass",
        **{s.name: "skip" if s.name == "ipc" else "pass" for s in STAGES},
    }
    records = json.loads((out / "records.json").read_text())
    train = records["train"]
    assert {c["name"] for c in train["checks"] if c["ok"]} >= {"steps logged", "checkpoint holds updated weights"}
    throughput = records["throughput"]["metrics"]["tiny"]
    assert throughput["learner_tok_s"] > 0 and throughput["export_s"] > 0 and throughput["gen_tok_s"] > 0
    assert "===== train =====" in (out / "logs.txt").read_text()


@pytest.mark.slow
def test_a_failure_in_one_throughput_part_keeps_the_figures_of_the_others(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GPUCHECK_INJECT": "tiny/export"}
    command = [sys.executable, "-m", "trainer.gpucheck.throughput", "--device", "cpu", "--out", str(tmp_path),
               "--limit-s", "500"]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stderr[-3000:]
    record = json.loads((tmp_path / "record.json").read_text())
    checks = {c["name"]: c for c in record["checks"]}
    assert not checks["tiny learner"]["ok"] and "failure injected at tiny/export" in checks["tiny learner"]["detail"]
    assert "kept: learner_tok_s" in checks["tiny learner"]["detail"]
    assert checks["tiny generation"]["ok"]
    figures = record["metrics"]["tiny"]
    assert figures["learner_tok_s"] > 0 and figures["gen_tok_s"] > 0 and "export_s" not in figures
    assert "Traceback" in done.stderr and "RuntimeError: failure injected" in done.stderr  # kept in the log
