"""What a long command shows while it runs: numbered phase lines, one progress bar per long phase, quiet libraries.

`Phases(n)` prints `[k/n] what -> where` when a phase starts and `[k/n] done in 12 s` when it ends;
`bar(total, desc)` is a tqdm bar on stderr; `quiet_libraries()` silences transformers' per-load bars
("Loading weights", "Writing model shards") and its info/warning logs (kept with `--verbose`).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from tqdm import tqdm


class Phases:
    """Numbered phase lines of one command (`[k/n] title -> output folder`), with each phase's wall time."""

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total = total
        self.stream = stream
        self.index = 0
        self._start = 0.0
        self.seconds: dict[str, float] = {}
        """Wall seconds of each finished phase, by its key."""
        self._key = ""

    def start(self, key: str, title: str, out: str | Path | None = None) -> None:
        """End the running phase (if any) and announce the next one."""
        self.end()
        self.index += 1
        self._key = key
        self._start = time.perf_counter()
        where = f" -> {out}" if out is not None else ""
        self._print(f"[{self.index}/{self.total}] {title}{where}")

    def end(self, note: str = "") -> None:
        """Close the running phase: record and print its wall time (and `note`)."""
        if not self._key:
            return
        seconds = time.perf_counter() - self._start
        self.seconds[self._key] = seconds
        self._print(f"[{self.index}/{self.total}] done in {seconds:.0f} s{f': {note}' if note else ''}")
        self._key = ""

    def _print(self, line: str) -> None:
        tqdm.write(line, file=self.stream or sys.stdout)


def bar(total: int, desc: str, unit: str = "it") -> tqdm:
    """A progress bar on stderr for one phase (close it, or use it as a context manager)."""
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True, leave=True)


def counter(progress: tqdm) -> Callable[[int], None]:
    """A callback that sets the bar to an absolute count (for code that reports `done so far`)."""

    def update(done: int) -> None:
        progress.update(done - progress.n)

    return update


def quiet_libraries() -> None:
    """Silence transformers' and huggingface_hub's progress bars and info/warning logs, here and in children."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
