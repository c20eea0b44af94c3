"""bf16 on the CPU (`precision.cpu_bf16`): whether it is on, the model dtype and autocast that follow from it.

`auto` reads the CPU flags: bf16 matrix instructions (`amx_bf16`, `avx512_bf16`) make bf16 `F.linear` several
times faster than fp32 (docs/results/trainer-bench-speed.md); without them bf16 is emulated and slower.
torch's `get_cpu_capability()` says only `AVX512` on such a CPU, so the flags are read from /proc/cpuinfo.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from pathlib import Path
from typing import Literal

import torch

CpuBf16 = Literal["auto", "on", "off"]
BF16_FLAGS = ("amx_bf16", "avx512_bf16")
"""CPU flags of bf16 matrix instructions, best first."""

log = logging.getLogger(__name__)


@functools.cache
def cpu_bf16_flags(cpuinfo: str = "/proc/cpuinfo") -> tuple[str, ...]:
    """The `BF16_FLAGS` this CPU lists (none where /proc/cpuinfo is unreadable, e.g. macOS)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return ()
    words = set(text.split())
    return tuple(flag for flag in BF16_FLAGS if flag in words)


def decide_cpu_bf16(setting: CpuBf16, flags: tuple[str, ...]) -> tuple[bool, str]:
    """Whether CPU work runs in bf16 under `setting` on a CPU with `flags`, and why."""
    if setting == "on":
        return True, "precision.cpu_bf16: on"
    if setting == "off":
        return False, "precision.cpu_bf16: off"
    if flags:
        return True, f"precision.cpu_bf16: auto, the CPU has {', '.join(flags)}"
    return False, f"precision.cpu_bf16: auto, the CPU lists none of {', '.join(BF16_FLAGS)}"


@functools.cache
def _log_once(reason: str, on: bool) -> None:
    log.info("CPU bf16 %s (%s)", "on" if on else "off", reason)


def cpu_bf16(setting: CpuBf16, device: str | torch.device) -> bool:
    """Whether work on `device` runs in bf16 because of `precision.cpu_bf16` (False off the CPU: the CUDA
    path has its own, unchanged, rules). The decision is logged once per process."""
    if torch.device(device).type != "cpu":
        return False
    on, reason = decide_cpu_bf16(setting, cpu_bf16_flags())
    _log_once(reason, on)
    return on


def model_dtype(setting: CpuBf16, device: str | torch.device) -> torch.dtype:
    """The dtype to load an inference model (rollout, teacher) in: bf16 where `cpu_bf16` says so, else fp32."""
    return torch.bfloat16 if cpu_bf16(setting, device) else torch.float32


def autocast(device: torch.device, cpu: bool) -> contextlib.AbstractContextManager[object]:
    """bf16 autocast for a training forward: always on CUDA, on the CPU when `cpu` (fp32 master weights)."""
    enabled = device.type == "cuda" or (device.type == "cpu" and cpu)
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=enabled)
