"""Server subprocesses for the benchmark, and the memory of a process tree."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self


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


def tree_pids(pid: int) -> list[int]:
    """`pid` and all its descendants (Linux /proc)."""
    tree, found, stack = _children(), [], [pid]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(tree.get(current, []))
    return found


def tree_rss_mb(pid: int) -> float:
    """Resident memory of `pid` and all its descendants, in MB (Linux /proc)."""
    total = 0.0
    for current in tree_pids(pid):
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            continue
    return total


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far; 0 if it is gone (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_s(excluding: int) -> float:
    """CPU seconds used so far by this process and its descendants (e.g. an environment's JVM),
    leaving out the process tree of `excluding` (a server this process started)."""
    skip = set(tree_pids(excluding))
    return sum(cpu_s(pid) for pid in tree_pids(os.getpid()) if pid not in skip)


class PortFileProcess:
    """A server subprocess that binds port 0 and writes the port it bound to a file, then serves:
    `command(port_file)` is its command line, `environ` what it adds to this process's environment."""

    def __init__(
        self, command: Callable[[str], list[str]], startup_s: float = 120.0, environ: Mapping[str, str] = {}
    ) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="envhub-serve-")
        port_file = Path(self._folder.name) / "port"
        line = command(str(port_file))
        self.process = subprocess.Popen(line, env={**os.environ, "PYTHONUNBUFFERED": "1", **environ})
        deadline = time.monotonic() + startup_s
        while not port_file.exists() or not port_file.read_text().endswith("\n"):  # written once serving
            if self.process.poll() is not None:
                raise RuntimeError(f"{' '.join(line)} exited with {self.process.returncode}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"{' '.join(line)} did not start within {startup_s} s")
            time.sleep(0.05)
        self.port = int(port_file.read_text())
        self.target = f"localhost:{self.port}"

    def rss_mb(self) -> float:
        return tree_rss_mb(self.process.pid)

    def cpu_s(self) -> tuple[float, float]:
        """CPU seconds used so far by (the server's main process, all its child processes together)."""
        main = self.process.pid
        return cpu_s(main), sum(cpu_s(pid) for pid in tree_pids(main) if pid != main)

    def stop(self) -> None:
        self._folder.cleanup()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class ServerProcess(PortFileProcess):
    """`envhub serve` as a subprocess on port 0 (the port it bound is read back from `--port-file`);
    `python_args` go to the interpreter before the module (e.g. `-m envhub.bench.profiled FILE`); with a
    `source_tree`, envhub is imported from there (another checkout, to compare versions in one run)."""

    def __init__(
        self,
        environment: str,
        workers: int = 1,
        max_sessions: int = 256,
        startup_s: float = 120.0,
        extra: Sequence[str] = (),
        python_args: Sequence[str] = (),
        source_tree: str | None = None,
    ) -> None:
        # -P: with another tree on PYTHONPATH, the current directory (maybe this checkout) must not come first
        interpreter = [sys.executable, *(["-P"] if source_tree else []), *python_args]

        def command(port_file: str) -> list[str]:
            line = [*interpreter, "-m", "envhub.cli", "--log-level", "WARNING", "serve"]
            line += ["--env", environment, "--port", "0", "--port-file", port_file, "--workers", str(workers)]
            return [*line, "--max-sessions", str(max_sessions), *extra]

        super().__init__(command, startup_s, {"PYTHONPATH": source_tree} if source_tree else {})
