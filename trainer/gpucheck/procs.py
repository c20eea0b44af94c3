"""Child processes with a time limit, their output in a log (standard library only).

A stage runs as the leader of a process group of its own, so that when its time is up everything it started
(the throughput parts, the IPC receiver, an envhub server) goes with it and nothing is left holding the GPU
for the next stage. A throughput part stays in its stage's group (the stage's kill must reach it) and is
ended alone when its own time is up.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

GRACE_S = 3.0
"""After SIGTERM, how long a timed-out process group has before SIGKILL."""


@dataclass(frozen=True)
class Finished:
    """How a child ended: its exit status (None when it was killed at its time limit) and its wall time."""

    code: int | None
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.code is None


def run_limited(
    command: Sequence[str],
    log: Path | None,
    timeout_s: float,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    own_group: bool = True,
) -> Finished:
    """Run `command` for at most `timeout_s`, its stdout and stderr into `log` (None: this process's own). With
    `own_group` the child leads a new process group, which is ended whole when the time is up and after the
    child exits (nothing it started outlives it); otherwise only the child is killed at the limit."""
    start = time.monotonic()
    handle: IO[str] | None = None
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        handle = log.open("w")
    try:
        child = subprocess.Popen(
            list(command), stdout=handle, stderr=subprocess.STDOUT if handle else None,
            env=dict(env) if env is not None else None, cwd=cwd, start_new_session=own_group,
        )  # fmt: skip
        try:
            code: int | None = child.wait(timeout=max(timeout_s, 0.1))
        except subprocess.TimeoutExpired:
            code = None
            _end(child, own_group)
            print(f"\n[gpu-check] killed after its limit of {timeout_s:.0f} s", file=handle or sys.stderr, flush=True)
        if own_group:
            _signal_group(child.pid, signal.SIGKILL)  # whatever it left behind
    finally:
        if handle is not None:
            handle.close()
    return Finished(code, time.monotonic() - start)


def _end(child: subprocess.Popen[bytes], own_group: bool) -> None:
    if not own_group:
        child.kill()
        child.wait()
        return
    _signal_group(child.pid, signal.SIGTERM)
    try:
        child.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        _signal_group(child.pid, signal.SIGKILL)
        child.wait()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def tail(path: Path, lines: int = 1, chars: int = 300) -> str:
    """The last non-empty `lines` of a log, at most `chars` characters ("" when there is none)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept)[-chars:]
