"""Give freed memory back to the operating system between a command's phases.

Model weights, gradients and AdamW moments are mostly tensors of a few MB, which glibc serves from its heap
rather than from their own mappings; freed, they stay in the process (its RSS) until the heap is trimmed. A
command that converts a model, fine-tunes it, evaluates and trains in one process (the quickstart) would
otherwise carry each phase's peak into the next (docs/design/029).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where the C library has none (macOS, musl)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None)
    return trim if callable(trim) else None


M_MMAP_THRESHOLD = -3
"""glibc's `mallopt` parameter number of the mmap threshold."""
LARGE_ALLOCATION = 1 << 20
"""Allocations from this size (bytes) get their own mapping under `map_large_allocations`."""


def map_large_allocations(threshold: int = LARGE_ALLOCATION) -> bool:
    """Serve every allocation of at least `threshold` bytes from its own mapping, so that freeing it returns it to the
    OS at once; whether the C library could. glibc's default threshold starts at 128 KB but rises to the size of
    each mapped block freed (up to 32 MB), after which activations, gradients and temporaries come from the heap and,
    freed, stay in the process between and within phases (docs/design/033); setting it fixes it."""
    name = ctypes.util.find_library("c")
    mallopt = getattr(ctypes.CDLL(name), "mallopt", None) if name else None
    return bool(callable(mallopt) and mallopt(M_MMAP_THRESHOLD, threshold))


def trim_heap() -> bool:
    """Return the heap's free pages to the OS (glibc `malloc_trim`); whether the C library could."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def release_memory() -> bool:
    """Collect garbage, then return the heap's free memory to the OS; whether the C library could trim."""
    gc.collect()
    return trim_heap()
