"""The server's end of a worker's pipe, on the event loop: whole messages in and out, never blocking the loop.

The worker (`envhub.server.worker_process`) reads and writes its end with a blocking
`multiprocessing.connection.Connection`: each message is its pickle behind a 4-byte big-endian length (a
length of -1 and then 8 bytes for one over 2 GiB). `PipeEnd` speaks the same frames over its end set
non-blocking: a message the socket's buffer cannot take at once waits in an outbox, written as the socket
drains (`add_writer`); what arrives is read as it comes and cut into whole messages. So the loop never
waits on a worker. With a blocking end (what it was), a loop blocked writing a large StepBatch to a worker
that was itself blocked writing a large answer back (its reading thread answers what it applies) would
never read that answer: both would wait forever. And uvloop (libuv) makes a descriptor it polls
non-blocking anyway, so a blocking `Connection.recv` of an answer larger than the socket's buffer failed
half-way (BlockingIOError), which was taken for the worker's death.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import struct
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

READ_BYTES = 1 << 18
"""Most bytes read per readable event (the loop calls again while more is waiting)."""
_LENGTH = struct.Struct("!i")
_LONG_LENGTH = struct.Struct("!Q")
_LONGEST_SHORT = 0x7FFFFFFF


def frame(message: Any) -> bytes:
    """`message` as one frame of the pipe: its length, then its pickle."""
    data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
    if len(data) > _LONGEST_SHORT:
        return _LENGTH.pack(-1) + _LONG_LENGTH.pack(len(data)) + data
    return _LENGTH.pack(len(data)) + data


class PipeEnd:
    """One end of a `multiprocessing` pipe on the running loop: `send(message)` without blocking, each message
    received handed to `on_message`, `on_closed()` called once when the other end closes or the pipe fails."""

    def __init__(self, conn: Connection, on_message: Callable[[Any], None], on_closed: Callable[[], None]) -> None:
        self._conn = conn
        self._fd = conn.fileno()
        self._on_message = on_message
        self._on_closed = on_closed
        self._inbox = bytearray()
        self._outbox = bytearray()
        self._loop = asyncio.get_running_loop()
        self.closed = False
        os.set_blocking(self._fd, False)
        self._loop.add_reader(self._fd, self._readable)

    def send(self, message: Any) -> None:
        """Queue one message (written now as far as the socket takes it); OSError once the pipe is broken."""
        if self.closed:
            raise BrokenPipeError("the pipe is closed")
        data = frame(message)
        if self._outbox:  # behind what is still waiting
            self._outbox += data
            return
        try:
            sent = os.write(self._fd, data)
        except BlockingIOError:
            sent = 0
        if sent < len(data):
            self._outbox += memoryview(data)[sent:]
            self._loop.add_writer(self._fd, self._writable)

    def _writable(self) -> None:
        try:
            sent = os.write(self._fd, self._outbox)
        except BlockingIOError:
            return
        except OSError:
            self._fail()
            return
        del self._outbox[:sent]
        if not self._outbox:
            self._loop.remove_writer(self._fd)

    def _readable(self) -> None:
        try:
            chunk = os.read(self._fd, READ_BYTES)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:  # end of file: the other end closed (its process ended)
            self._fail()
            return
        self._inbox += chunk
        inbox, start, messages = self._inbox, 0, []
        while len(inbox) - start >= _LENGTH.size:
            (size,) = _LENGTH.unpack_from(inbox, start)
            header = _LENGTH.size
            if size == -1:
                if len(inbox) - start < header + _LONG_LENGTH.size:
                    break
                (size,) = _LONG_LENGTH.unpack_from(inbox, start + header)
                header += _LONG_LENGTH.size
            end = start + header + size
            if len(inbox) < end:
                break
            messages.append(pickle.loads(inbox[start + header : end]))
            start = end
        del inbox[:start]
        for message in messages:
            if self.closed:
                return
            self._on_message(message)

    def _fail(self) -> None:
        if not self.closed:
            self.close()
            self._on_closed()

    def close(self) -> None:
        """Stop reading and writing, drop what waits in the outbox, and close this end."""
        if self.closed:
            return
        self.closed = True
        self._loop.remove_reader(self._fd)
        if self._outbox:
            self._loop.remove_writer(self._fd)
        self._conn.close()
