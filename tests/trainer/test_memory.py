"""`release_memory` finds glibc's `malloc_trim` (its effect on a real SFT, 1,632 -> 404 MB RSS, is measured in
docs/design/029: a pattern of freed heap blocks glibc keeps is not reproducible at unit-test size)."""

from __future__ import annotations

import platform

import pytest

from trainer.memory import release_memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc_trim")
def test_release_memory_trims_the_glibc_heap() -> None:
    assert release_memory()
