"""The worker process: one environment kind, many `Session`s, one request at a time.

The server talks to a worker over a `multiprocessing` pipe with pickled tuples
(our own trusted child process; bytes from the wire never get here unparsed).
A request is `(op, args)`; the reply is `(True, result)` or `(False, EnvhubError)`.
Replies come back in request order, so the server keeps a FIFO of futures per worker.
The first message a worker sends is its `Catalog` (or the error that stopped it).
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import grpc

from envhub.core import errors
from envhub.core.environment import EnvironmentKind, Observation
from envhub.core.registry import kind_class
from envhub.core.session import Session, SessionState, SessionStep
from envhub.server.catalog import Catalog

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class View:
    """A session's current observation as the server returns it."""

    task_id: str
    observation: Observation
    step_index: int
    admissible: tuple[str, ...] | None


class WorkerState:
    """The sessions of one worker process and the operations the server may ask for."""

    def __init__(self, kind: EnvironmentKind) -> None:
        self.kind = kind
        self.catalog = Catalog.of(kind)
        self.sessions: dict[str, Session] = {}

    def _session(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise errors.not_found(f"session {session_id!r} is unknown or closed", "SESSION_NOT_FOUND")
        return session

    @staticmethod
    def _view(session: Session, admissible: bool) -> View:
        actions = tuple(session.admissible_actions()) if admissible else None
        return View(session.task.task_id, session.observation, session.step_index, actions)

    def create(
        self, session_id: str, task_id: str, seed: int, options: Mapping[str, str], max_steps: int, admissible: bool
    ) -> View:
        session = Session.start(self.kind, self.catalog.task(task_id), seed=seed, options=options, max_steps=max_steps)
        self.sessions[session_id] = session
        return self._view(session, admissible)

    def reset(self, session_id: str, task_id: str | None, seed: int | None, admissible: bool) -> View:
        session = self._session(session_id)
        session.reset(self.catalog.task(task_id) if task_id else None, seed)
        return self._view(session, admissible)

    def step(self, session_id: str, action: str, admissible: bool) -> tuple[SessionStep, tuple[str, ...] | None]:
        session = self._session(session_id)
        step = session.step(action)
        return step, (tuple(session.admissible_actions()) if admissible else None)

    def close(self, session_id: str) -> None:
        self._session(session_id).close()
        del self.sessions[session_id]

    def expert(self, session_id: str) -> list[str]:
        return self._session(session_id).expert_actions()

    def snapshot(self, session_id: str) -> SessionState:
        return self._session(session_id).state()

    def restore(self, session_id: str, state: SessionState, admissible: bool) -> View:
        session = Session.restore(self.kind, state)
        self.sessions[session_id] = session
        return self._view(session, admissible)

    def fork(self, session_id: str, new_ids: list[str]) -> None:
        source = self._session(session_id)
        forks: dict[str, Session] = {}
        try:
            for new_id in new_ids:
                forks[new_id] = source.fork()
        except BaseException:
            for fork in forks.values():
                fork.close()
            raise
        self.sessions.update(forks)

    def shutdown(self) -> None:
        for session in self.sessions.values():
            session.close()
        self.sessions.clear()
        self.kind.close()


def _as_envhub_error(exc: Exception) -> errors.EnvhubError:
    if isinstance(exc, errors.EnvhubError):
        return exc
    if isinstance(exc, NotImplementedError):
        return errors.EnvhubError(grpc.StatusCode.UNIMPLEMENTED, str(exc), "UNSUPPORTED")
    log.exception("environment call failed")
    return errors.EnvhubError(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}", "ENVIRONMENT_ERROR")


def worker_main(environment: str, conn: Connection) -> None:
    """Entry point of a worker process: build the kind, announce the catalog, serve requests."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when workers stop
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s worker[{environment}] %(levelname)s %(message)s")
    try:
        state = WorkerState(kind_class(environment)())
    except Exception as exc:  # reported to the server, which refuses to start with this message
        conn.send((False, errors.EnvhubError(grpc.StatusCode.FAILED_PRECONDITION, str(exc), "ENVIRONMENT_START")))
        return
    conn.send((True, state.catalog))
    operations: dict[str, Callable[..., Any]] = {
        "create": state.create,
        "reset": state.reset,
        "step": state.step,
        "close": state.close,
        "expert": state.expert,
        "snapshot": state.snapshot,
        "restore": state.restore,
        "fork": state.fork,
    }
    try:
        while True:
            try:
                op, args = conn.recv()
            except EOFError:
                break
            if op == "stop":
                break
            try:
                reply: tuple[bool, Any] = (True, operations[op](*args))
            except Exception as exc:  # one bad request never kills the worker: it answers with the error
                reply = (False, _as_envhub_error(exc))
            try:
                conn.send(reply)
            except (BrokenPipeError, ConnectionResetError):  # the server went away first: nothing to answer
                break
    finally:
        state.shutdown()
