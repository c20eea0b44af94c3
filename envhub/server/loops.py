"""The event loop a server's front runs on: uvloop where it is installed (the default, `auto`), else asyncio's.

The front's CPU per call is mostly grpc.aio and the event loop running it (design note 025): asyncio's loop
is Python (a handle object per callback, `_run_once` per turn); uvloop's is C (libuv), and grpc.aio runs on
either. `auto` takes uvloop when it can be imported (`envhub[server]` installs it where it has wheels) and
falls back to asyncio's loop otherwise; `asyncio` keeps asyncio's loop (to compare, or as a way back).
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
EVENT_LOOPS = ("auto", "uvloop", "asyncio")


def loop_factory(event_loop: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes a new loop of the kind `event_loop` names (one of `EVENT_LOOPS`); ValueError for an unknown
    name, or for `uvloop` when the package is not installed."""
    if event_loop not in EVENT_LOOPS:
        raise ValueError(f"unknown event loop {event_loop!r}: one of {', '.join(EVENT_LOOPS)}")
    if event_loop != "asyncio":
        try:
            uvloop = importlib.import_module("uvloop")
        except ImportError:
            if event_loop == "uvloop":
                raise ValueError("event loop uvloop: the uvloop package is not installed") from None
        else:
            factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
            return factory
    return asyncio.new_event_loop


def run(main: Callable[[], Coroutine[Any, Any, T]], event_loop: str) -> T:
    """`main()` run to completion on a new loop of the kind `event_loop` names (checked before `main` is called)."""
    with asyncio.Runner(loop_factory=loop_factory(event_loop)) as runner:
        return runner.run(main())
