"""`release_memory` finds glibc's `malloc_trim` (its effect on a real SFT, 1,632 -> 404 MB RSS, is measured in
docs/design/029: a pattern of freed heap blocks glibc keeps is not reproducible at unit-test size)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from trainer.memory import release_memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc_trim")
def test_release_memory_trims_the_glibc_heap() -> None:
    assert release_memory()


HELD_AFTER_FREE = """
import sys, torch
from trainer.memory import map_large_allocations

def rss_mb():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS")) // 1024

if sys.argv[1] == "mapped":
    assert map_large_allocations()
big = torch.ones(4 << 20)  # 16 MB: glibc maps it, and once it is freed maps nothing smaller than it
del big
before = rss_mb()
blocks = [torch.ones(1 << 20) for _ in range(100)]  # 100 x 4 MB
del blocks[:-1]  # all freed but the last, which holds the heap's top
print(rss_mb() - before)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_mapped_large_allocations_leave_the_process_when_freed() -> None:
    """glibc's default: 4 MB tensors come from the heap after a 16 MB one was freed, and stay resident freed; with
    `map_large_allocations` each has its own mapping and goes with it (fresh processes: the setting is global)."""
    held = {}
    for mode in ("default", "mapped"):
        out = subprocess.run([sys.executable, "-c", HELD_AFTER_FREE, mode], capture_output=True, text=True, check=True)
        held[mode] = int(out.stdout.split()[-1])
    assert held["default"] > 300 and held["mapped"] < 40, held
