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


def release_memory() -> bool:
    """Collect garbage, then return the heap's free memory to the OS; whether the C library could trim."""
    gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
