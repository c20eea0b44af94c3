"""A worker's preparation lane: slow one-off task work (`EnvironmentKind.prepare`) in a helper process.

A session created on a task that is not prepared yet (e.g. an ALFWorld game generated on first
use, about 0.4 s of CPU) would hold up every step queued behind it in its worker. The worker
hands such a task to its `Preparer` instead and only applies the create once the task is
ready, so steps of other sessions go on meanwhile. The helper process (started on first use,
with a lower CPU priority) builds its own instance of the kind from the worker's configuration
and leaves what it prepares where the worker finds it (a cache on disk). Tasks asked for by a
create go before the background ones (`tasks_to_prepare`), which are done one at a time.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from typing import IO, Any

from envhub.core.environment import EnvironmentKind, TaskSpec
from envhub.core.registry import build_kind

log = logging.getLogger(__name__)
_HELPER = "from envhub.server.preparer import helper_entry; helper_entry()"
NICENESS = 10
"""How much lower the helper's CPU priority is than the worker's (preparing must not slow serving)."""
_ASKED, _AHEAD = 0, 1


def helper_main(environment: str, config: dict[str, Any], tasks: IO[str], answers: IO[str]) -> None:
    """The helper process: prepare each task id read from `tasks` (one a line); answer "ok" or the error."""
    os.nice(NICENESS)
    kind = build_kind(environment, config)
    try:
        for line in tasks:
            try:
                kind.prepare(kind.task(line.strip()))
                answer = "ok"
            except Exception as exc:  # the create will meet the same problem and report it
                answer = f"{type(exc).__name__}: {exc}".replace("\n", " ")
            answers.write(answer + "\n")
            answers.flush()
    finally:
        kind.close()


def helper_entry() -> None:
    """`python -c` entry of the helper: arguments environment, JSON configuration; stdin/stdout the lane."""
    answers = os.fdopen(os.dup(1), "w")  # only answers go to the worker: anything printed goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    with contextlib.suppress(BrokenPipeError, KeyboardInterrupt):  # the worker is gone
        helper_main(sys.argv[1], json.loads(sys.argv[2]), sys.stdin, answers)


class Preparer:
    """The preparation lane of one worker: a thread feeding one helper process."""

    def __init__(self, environment: str, config: dict[str, Any], kind: EnvironmentKind) -> None:
        self._environment = environment
        self._config = config
        self._kind = kind
        self._jobs: queue.PriorityQueue[tuple[int, int, TaskSpec | None, Callable[[], None] | None]] = (
            queue.PriorityQueue()
        )
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._process: subprocess.Popen[str] | None = None

    def prepare(self, task: TaskSpec, then: Callable[[], None]) -> None:
        """Prepare `task` ahead of any background work, then call `then()` (from the lane's thread)."""
        self._put(_ASKED, task, then)

    def ahead(self, tasks: Iterable[TaskSpec]) -> None:
        """Prepare `tasks` in the background, one at a time, after any asked for."""
        for task in tasks:
            self._put(_AHEAD, task, None)

    def _put(self, priority: int, task: TaskSpec | None, then: Callable[[], None] | None) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="envhub-prepare", daemon=True)
            self._thread.start()
        self._jobs.put((priority, next(self._order), task, then))

    def _run(self) -> None:
        while True:
            _, _, task, then = self._jobs.get()
            if task is None:
                return
            try:
                if not self._kind.prepared(task):
                    self._in_helper(task)
            except Exception:  # never lose a create: it goes on and does the work itself
                log.exception("preparing %s failed", task.task_id)
            finally:
                if then is not None:
                    then()

    def _in_helper(self, task: TaskSpec) -> None:
        # A plain subprocess: the worker is a daemon process, which multiprocessing forbids children;
        # the helper ends by itself when its input closes (the worker is gone).
        if self._process is None or self._process.poll() is not None:
            command = [sys.executable, "-c", _HELPER, self._environment, json.dumps(self._config)]
            self._process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        process = self._process
        if process.stdin is None or process.stdout is None:
            raise RuntimeError("the preparation helper has no pipes")
        process.stdin.write(task.task_id + "\n")
        process.stdin.flush()
        answer = process.stdout.readline().strip()
        if answer != "ok":
            log.warning("preparing %s failed in the helper: %s", task.task_id, answer or "it exited")

    def close(self) -> None:
        """Stop the lane; the helper process is killed (what it was preparing is redone when needed)."""
        if self._thread is not None:
            self._jobs.put((-1, -1, None, None))
        if self._process is not None:
            self._process.kill()
            self._process.wait()
