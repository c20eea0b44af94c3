"""The server's end of a worker pipe: whole messages both ways with a blocking `Connection` at the other end,
larger than the socket's buffer, with neither end waiting on the other; the other end's close is reported."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from multiprocessing.connection import Connection
from typing import Any

import pytest

from envhub.server.worker_pipe import PipeEnd


def _echo(conn: Connection) -> None:
    """The worker's part: answer each message with a blocking send before reading the next (as a worker's
    reading thread does when it applies what it reads); at None, close (as a worker's process ends)."""
    while (message := conn.recv()) is not None:
        conn.send(("echo", message))
    conn.close()


@pytest.mark.parametrize("event_loop", ["asyncio", "uvloop"])
def test_large_messages_cross_both_ways_while_the_loop_keeps_sending(event_loop: str) -> None:
    if event_loop == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        new_loop = uvloop.new_event_loop
    else:
        new_loop = asyncio.new_event_loop
    ours, theirs = multiprocessing.Pipe()
    worker = threading.Thread(target=_echo, args=(theirs,), daemon=True)
    worker.start()
    payloads = [bytes([index]) * (3 << 20) for index in range(6)] + [b"small"] * 50  # 3 MiB each: past any buffer

    async def play() -> tuple[list[Any], bool]:
        received: list[Any] = []
        everything, closed = asyncio.Event(), asyncio.Event()

        def on_message(message: Any) -> None:
            received.append(message)
            if len(received) == len(payloads):
                everything.set()

        pipe = PipeEnd(ours, on_message, closed.set)
        for payload in payloads:  # all sent before any answer is read: a blocking end would deadlock here
            pipe.send(payload)
        await asyncio.wait_for(everything.wait(), 60)
        pipe.send(None)  # the worker's end goes away: reported
        await asyncio.wait_for(closed.wait(), 10)
        with pytest.raises(OSError):
            pipe.send(b"late")
        return received, pipe.closed

    loop = new_loop()
    try:
        received, closed = loop.run_until_complete(play())
    finally:
        loop.close()
    assert received == [("echo", payload) for payload in payloads] and closed
