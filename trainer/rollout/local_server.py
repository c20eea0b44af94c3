"""Start an envhub server as a child process on a free loopback port (`env.targets: [local]`).

`LocalServer("alfworld")` runs `python -m trainer.rollout.local_server --env alfworld`, which
binds port 0, prints `ENVHUB_PORT <n>` once serving, and drains on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from types import TracebackType

READY = "ENVHUB_PORT"


class LocalServer:
    """A child envhub server process; use as a context manager or call `stop()`."""

    def __init__(self, environment: str, *, workers: int = 1, start_timeout_s: float = 180.0) -> None:
        self.environment = environment
        self.process = subprocess.Popen(
            [sys.executable, "-m", "trainer.rollout.local_server", "--env", environment, "--workers", str(workers)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.port = self._wait_ready(start_timeout_s)

    @property
    def address(self) -> str:
        return f"localhost:{self.port}"

    def _wait_ready(self, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        while self.process.stdout is not None and time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            if line.startswith(READY):
                return int(line.split()[1])
        self.stop()
        raise RuntimeError(
            f"the local {self.environment} server did not start (exit code {self.process.returncode}); "
            f"run `python -m trainer.rollout.local_server --env {self.environment}` to see why "
            f"(is the envhub[{self.environment}] extra installed?)"
        )

    def stop(self) -> None:
        """SIGTERM (drain), then kill after 20 s."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


async def _serve(environment: str, workers: int) -> None:
    from envhub.server import ServerConfig, create_server

    server, port = await create_server(
        ServerConfig(environments=(environment,), port=0, workers=workers, max_sessions=1024)
    )
    print(f"{READY} {port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    parent = os.getppid()
    while not stop.is_set():  # also stop when the parent dies without signalling
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=1.0)
        if os.getppid() != parent:
            break
    await server.drain(grace=5.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--env", required=True)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    asyncio.run(_serve(args.env, args.workers))


if __name__ == "__main__":
    main()
