"""`make gpu-check DEVICE=cpu`: the GPU check's own command on CPU (gloo, IPC skipped, tiny sizes), so the
script is known to work before a lent GPU minute is spent on it. Every stage runs as on the H200: the
learner against its CPU reference, FSDP2 + DCP on a one-rank group, the hf backend, a real ATOD run
against a local ALFWorld server, and the throughput code at a tiny size."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.gpucheck.__main__ import STAGES

ROOT = Path(__file__).parents[3]


@pytest.mark.slow
def test_gpu_check_passes_on_cpu_and_summarises_on_one_screen(tmp_path: Path) -> None:
    pytest.importorskip("alfworld")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ENVHUB_CACHE": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "trainer.gpucheck", "--device", "cpu", "--out", str(tmp_path / "out")]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert done.returncode == 0, done.stdout[-3000:]
    lines = summary.splitlines()
    assert lines[-1].startswith("RESULT: PASS") and len(lines) <= 30, summary
    statuses = json.loads((tmp_path / "out" / "summary.json").read_text())["stages"]
    assert statuses == {"env": "pass", **{s.name: "skip" if s.name == "ipc" else "pass" for s in STAGES}}
    train = json.loads((tmp_path / "out" / "train.json").read_text())
    assert {c["name"] for c in train["checks"] if c["ok"]} >= {"steps logged", "checkpoint holds updated weights"}
    throughput = json.loads((tmp_path / "out" / "throughput.json").read_text())["metrics"]["tiny"]
    assert throughput["learner_tok_s"] > 0 and throughput["gen_tok_s"] > 0
