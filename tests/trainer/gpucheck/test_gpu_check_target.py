"""`make gpu-check` as the device is called with it: the Makefile target writes under `$OUT` when set (the device
returns only what is there, at most 8 files), both gpu targets are phony, and docs/gpu.md gives that one call
with a time limit above the run's budget, and points to the design note of gpu-check."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from trainer.gpucheck.__main__ import CUDA_BUDGET_S
from trainer.gpucheck.summary import OUTPUTS

ROOT = Path(__file__).parents[3]


def _make_n(*args: str, **env: str) -> str:
    """The commands `make -n gpu-check` prints, as a user's shell would run it: not as a sub-make of `make test`
    (whose MAKELEVEL / MAKEFLAGS would add "Entering directory" lines and the parent's variables)."""
    import os

    parent = {"OUT", "MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES"}
    environ = {k: v for k, v in os.environ.items() if k not in parent} | env
    return subprocess.run(["make", "-n", "gpu-check", *args], cwd=ROOT, env=environ, capture_output=True,
                          text=True, check=True).stdout  # fmt: skip


def test_the_target_writes_under_OUT_when_set() -> None:
    assert _make_n().strip() == "python3 -m trainer.gpucheck --device cuda --out runs/gpu-check"
    assert _make_n(OUT="/dev/out").strip() == "python3 -m trainer.gpucheck --device cuda --out /dev/out"
    assert len(OUTPUTS) <= 8


def test_gpu_check_and_gpu_wheels_are_phony() -> None:
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    phony = re.search(r"^\.PHONY:(.*)$", text, re.M)
    assert phony and {"gpu-check", "gpu-wheels", "gpu-smoke"} <= set(phony[1].split())


def test_docs_give_the_one_device_call() -> None:
    docs = (ROOT / "docs" / "gpu.md").read_text()
    call = re.search(r'run\(command="make gpu-check", carry=\["\.gpu-wheels"\], timeout_s=(\d+)\)', docs)
    assert call, "docs/gpu.md must give the device call"
    assert int(call[1]) >= CUDA_BUDGET_S + 30
    assert "design note 015" not in docs and "design note 014" in docs


def test_a_retry_of_one_stage_is_the_same_target() -> None:
    line = _make_n("GPU_CHECK_ARGS=--only train").strip()
    assert line == "python3 -m trainer.gpucheck --device cuda --out runs/gpu-check --only train"
