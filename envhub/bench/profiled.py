"""Run a module as `__main__` under cProfile timed by this thread's CPU time, not wall time (an event
loop's wall time is mostly waiting in epoll): `python -m envhub.bench.profiled OUT.pstats [-m] module args...`.

Profiling starts at SIGUSR1 and stops at SIGUSR2 (so start-up is left out: send them around the
measured stretch); the stats are written when the module returns or exits (e.g. `envhub serve` after
SIGTERM's drain).
"""

from __future__ import annotations

import cProfile
import runpy
import signal
import sys
import time
from types import FrameType


def main() -> None:
    out, *rest = sys.argv[1:]
    module, *args = rest[1:] if rest[0] == "-m" else rest
    sys.argv = [module, *args]
    profile = cProfile.Profile(time.thread_time)

    def toggle(signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGUSR1:
            profile.enable()
        else:
            profile.disable()

    signal.signal(signal.SIGUSR1, toggle)
    signal.signal(signal.SIGUSR2, toggle)
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        profile.disable()
        profile.dump_stats(out)


if __name__ == "__main__":
    main()
