"""Start an envhub server as a child process on a free port (`env.targets: [local]`).

`LocalServer("alfworld")` runs `python -m trainer.rollout.local_server --env alfworld`, which
binds port 0 on `host` (loopback by default), prints `ENVHUB_PORT <n>` once serving, and drains on
SIGTERM. For actors on other nodes, bind every interface and advertise this node's routable address
(`host="0.0.0.0", advertise=<node ip>`, what `env.local_host` does on a Ray cluster).

A local server serves the environment's own defaults (ALFWorld: whole rooms, as ALFWorld's own games and
`envhub serve --env alfworld`); pass `settings=` (the trainer's `env.server_settings`, e.g. the quickstart's
`{"rooms": "small"}` for short games) to choose otherwise. `prepare=` names the tasks a run will play (the first N
of some splits) for an environment that makes its tasks' data on first use (its kind has a `prepare_ahead`
setting, as ALFWorld's generated games): the server starts making them at once, so the first rollout does not
wait for them.
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
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from envhub.core.registry import kind_class

READY = "ENVHUB_PORT"


class LocalServer:
    """A child envhub server process; use as a context manager or call `stop()`."""

    def __init__(
        self,
        environment: str,
        *,
        workers: int = 1,
        start_timeout_s: float = 180.0,
        settings: Mapping[str, str] | None = None,
        host: str = "localhost",
        advertise: str | None = None,
        prepare: Mapping[str, int] | None = None,
        log: str | Path | None = None,
    ) -> None:
        self.environment = environment
        self.log = Path(log) if log is not None else None
        """File the server's stderr (its log) goes to; None: this process's stderr."""
        self.advertise = advertise or host
        """The host others reach the server at (`address`); `host` is what it binds."""
        chosen = dict(settings or {})
        command = [
            sys.executable,
            "-m",
            "trainer.rollout.local_server",
            "--env",
            environment,
            "--workers",
            str(workers),
            "--host",
            host,
        ]
        command += [item for key, value in chosen.items() for item in ("--set", f"{key}={value}")]
        counts = [f"{split}:{count}" for split, count in (prepare or {}).items() if count > 0]
        command += ["--prepare", ",".join(counts)] if counts else []
        if self.log is not None:
            self.log.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as files:
            stderr = files.enter_context(self.log.open("w")) if self.log is not None else None
            self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True)
        self.port = self._wait_ready(start_timeout_s)

    @property
    def address(self) -> str:
        """ "host:port" to connect to (the advertised host)."""
        return f"{self.advertise}:{self.port}"

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
            + (f"its log: {self.log}; " if self.log is not None else "")
            + f"run `python -m trainer.rollout.local_server --env {self.environment}` to see why "
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


async def _serve(environment: str, workers: int, settings: dict[str, str], host: str) -> None:
    from envhub.server import ServerConfig, create_server

    config = ServerConfig(
        environments=(environment,),
        environment_config={environment: settings} if settings else {},
        host=host,
        port=0,
        workers=workers,
        max_sessions=1024,
    )
    server, port = await create_server(config)
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
    parser.add_argument("--host", default="localhost", help='address to bind ("0.0.0.0": every interface)')
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an environment setting")
    parser.add_argument(
        "--prepare",
        default="",
        metavar="SPLIT:N[,SPLIT:N]",
        help="tasks to make from the start, where the environment has a prepare_ahead setting (else ignored)",
    )
    args = parser.parse_args()
    settings = dict(item.split("=", 1) for item in args.set)
    if args.prepare and "prepare_ahead" in kind_class(args.env).config_keys:
        settings.setdefault("prepare_ahead", args.prepare)
    asyncio.run(_serve(args.env, args.workers, settings, args.host))


if __name__ == "__main__":
    main()
