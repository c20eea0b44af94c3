"""Run a module as `__main__` under cProfile timed by this thread's CPU time, not wall time (an event
loop's wall time is mostly waiting in epoll): `python -m envhub.bench.profiled OUT.pstats [-m] module args...`.
The stats are written when the module returns or exits (e.g. `envhub serve` after SIGTERM's drain)."""

from __future__ import annotations

import cProfile
import runpy
import sys
import time


def main() -> None:
    out, *rest = sys.argv[1:]
    module, *args = rest[1:] if rest[0] == "-m" else rest
    sys.argv = [module, *args]
    profile = cProfile.Profile(time.thread_time)
    profile.enable()
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        profile.disable()
        profile.dump_stats(out)


if __name__ == "__main__":
    main()
