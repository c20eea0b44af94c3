"""Server subprocesses for the benchmark, and the memory of a process tree."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import grpc

from envhub.v1 import envhub_pb2, envhub_pb2_grpc


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        port: int = sock.getsockname()[1]
        return port


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # the process exited while we looked
                continue
            tree.setdefault(int(fields[1]), []).append(int(entry.name))
    return tree


def tree_rss_mb(pid: int) -> float:
    """Resident memory of `pid` and all its descendants, in MB (Linux /proc)."""
    tree, total, stack = _children(), 0.0, [pid]
    while stack:
        current = stack.pop()
        stack.extend(tree.get(current, []))
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            continue
    return total


class ServerProcess:
    """`envhub serve` as a subprocess on a free port; a context manager."""

    def __init__(self, environment: str, workers: int = 1, max_sessions: int = 256, startup_s: float = 120.0) -> None:
        self.port = free_port()
        self.target = f"localhost:{self.port}"
        command = [sys.executable, "-m", "envhub.cli", "--log-level", "WARNING", "serve", "--env", environment]
        command += ["--port", str(self.port), "--workers", str(workers), "--max-sessions", str(max_sessions)]
        self.process = subprocess.Popen(command, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + startup_s
        with grpc.insecure_channel(self.target) as channel:
            stub = envhub_pb2_grpc.EnvHubStub(channel)
            while True:
                try:
                    stub.ListEnvironments(envhub_pb2.ListEnvironmentsRequest(), wait_for_ready=True, timeout=1.0)
                    return
                except grpc.RpcError:
                    if self.process.poll() is not None:
                        raise RuntimeError(f"{' '.join(command)} exited with {self.process.returncode}") from None
                    if time.monotonic() > deadline:
                        self.stop()
                        raise

    def rss_mb(self) -> float:
        return tree_rss_mb(self.process.pid)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
