"""The worker side of the pipe: one environment kind, many `Session`s, one `Op` at a time.

`worker_main` runs in a child process. Its first message is a `Reply` holding the kind's
`KindCatalog` (or the error that stopped it); then every message is a `(call_id, Op)` (see
`envhub.server.worker_ops`), answered by a `(call_id, Reply)`. Operations are applied one by
one, in arrival order (by the worker's serving thread, or by its reading thread when the serving
thread is idle: `Lanes.take_now`), so this is where a step's
`expected_step_index` and the remembered answer to a repeated `request_id` are checked: a
retried call can never overtake or double the original. Operations of one session are applied in
arrival order; across sessions, steps go before queued session starts (`envhub.server.lanes`).
For a kind with `EnvironmentKind.concurrent_starts` (and unless the server asks for `inline_starts`),
creates, resets, restores and forks are applied on a second thread, the start thread, while steps go
on (design note 031): the reading thread applies steps (every operation but those) itself as they
arrive, so a step waits for no session start, only for its share of the interpreter, which the
worker's threads hand over every `SWITCH_INTERVAL_S`.

One exception to arrival order, so that a slow creation does not hold up other sessions'
steps (head-of-line blocking): a create or restore on a task the kind says is not prepared yet
(`EnvironmentKind.prepared`) waits in the worker's preparation lane (`envhub.server.preparer`)
and is applied once its task is ready; operations behind it go on meanwhile. No other
operation can concern its new session before it is answered, except a Close after the server
gave up on it, which cancels it.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import grpc

from envhub.core import errors
from envhub.core.environment import EnvironmentKind, TaskSpec
from envhub.core.registry import build_kind
from envhub.core.session import Session
from envhub.server import worker_ops as ops
from envhub.server.catalog import KindCatalog
from envhub.server.lanes import Item, Lanes
from envhub.server.preparer import Preparer

log = logging.getLogger(__name__)
SWITCH_INTERVAL_S = 0.001
"""With a start thread: how long one thread may hold the interpreter while another waits (Python's default is
5 ms). A step arriving while the start thread runs waits for it about twice (once read off the pipe, once its
answer written), so 1 ms bounds that to ~2 ms, under a step's median on a loaded server (the worker's own step
p99 measured 6-11 ms while creating, design note 031); the start thread pays a few more switches."""


STARTS = (ops.Create, ops.Reset, ops.Restore, ops.Fork)
"""Operations that start a session (or a new episode of one)."""


def freeze_young() -> None:
    """Collect what was made since the last freeze (the young generations, `gc.collect(1)`: a start's cyclic
    garbage, ~80-250 objects for an ALFWorld create), then freeze the rest, so no later collection walks it
    (`EnvironmentKind.gc_freeze_starts`, design note 037)."""
    gc.collect(1)
    gc.freeze()


@dataclass
class _Remembered:
    """The last keyed call of a session: its key, what it asked, and its answer."""

    request_id: str
    fingerprint: Hashable
    result: Any


class WorkerState:
    """The sessions of one worker process and the operations the server may ask for."""

    def __init__(self, kind: EnvironmentKind) -> None:
        self.kind = kind
        self.catalog = KindCatalog.of(kind)
        self.sessions: dict[str, Session] = {}
        self._last: dict[str, _Remembered] = {}
        self.preparing: set[str] = set()
        """Sessions whose create or restore waits in the preparation lane."""
        self._cancelled: set[str] = set()
        self._starting = threading.Lock()
        """Makes a start's admission and a Close of a preparing session one step each (two serving threads)."""
        self._handlers: dict[type[ops.Op[Any]], Callable[[Any], Any]] = {
            ops.Create: self.create,
            ops.Reset: self.reset,
            ops.Step: self.step,
            ops.StepMany: self.step_many,
            ops.Close: self.close,
            ops.ExpertActions: self.expert,
            ops.TakeSnapshot: self.snapshot,
            ops.Restore: self.restore,
            ops.Fork: self.fork,
        }

    def handle(self, op: ops.Op[Any]) -> Any:
        """Apply one operation; raises what the operation raises."""
        try:
            return self._handlers[type(op)](op)
        finally:
            if self.kind.gc_freeze_starts and isinstance(op, STARTS):
                freeze_young()

    def unprepared_task(self, op: ops.Op[Any]) -> tuple[str, TaskSpec] | None:
        """(new session, task) when `op` creates or restores a session on a task not prepared yet, else None.

        Never raises: a bad task id is the operation's own error, reported when it is applied.
        """
        try:
            if isinstance(op, ops.Create):
                session_id, task = op.session_id, self.catalog.task(op.task_id)
            elif isinstance(op, ops.Restore):
                session_id, task = op.session_id, self.catalog.task(op.state.task_id)
            else:
                return None
            return None if self.kind.prepared(task) else (session_id, task)
        except Exception:
            return None

    def _admit(self, session_id: str) -> None:
        """Before a session starts: refused if the server closed it while its task was being prepared."""
        with self._starting:
            self.preparing.discard(session_id)
            if session_id in self._cancelled:
                self._cancelled.discard(session_id)
                raise errors.EnvhubError(grpc.StatusCode.ABORTED, "the session was closed while starting", "CLOSED")

    def _session(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise errors.not_found(f"session {session_id!r} is unknown or closed", "SESSION_NOT_FOUND")
        return session

    @staticmethod
    def _view(session: Session, admissible: bool) -> ops.View:
        actions = tuple(session.admissible_actions()) if admissible else None
        return ops.View(session.task.task_id, session.observation, session.step_index, actions)

    def _keyed(self, session_id: str, request_id: str, fingerprint: Hashable, apply: Callable[[], Any]) -> Any:
        """`apply()`, or the remembered answer when `request_id` repeats the session's last keyed call.

        Only the last call is remembered; an unkeyed call forgets it (a retry is only ever of the last call).
        """
        if not request_id:
            self._last.pop(session_id, None)
            return apply()
        last = self._last.get(session_id)
        if last is not None and last.request_id == request_id:
            if last.fingerprint != fingerprint:
                raise errors.invalid_argument(
                    f"request_id {request_id!r} was already used for another call on this session",
                    "REQUEST_ID_REUSED",
                    request_id=request_id,
                )
            return last.result
        result = apply()
        self._last[session_id] = _Remembered(request_id, fingerprint, result)
        return result

    def create(self, op: ops.Create) -> ops.View:
        self._admit(op.session_id)
        spec = self.catalog.task(op.task_id)
        session = Session.start(self.kind, spec, seed=op.seed, options=op.options, max_steps=op.max_steps)
        self.sessions[op.session_id] = session
        return self._view(session, op.admissible)

    def reset(self, op: ops.Reset) -> ops.View:
        session = self._session(op.session_id)

        def apply() -> ops.View:
            session.reset(self.catalog.task(op.task_id) if op.task_id else None, op.seed)
            return self._view(session, op.admissible)

        return self._keyed(op.session_id, op.request_id, ("reset", op.task_id, op.seed), apply)

    def step(self, op: ops.Step) -> ops.StepOutcome:
        session = self._session(op.session_id)

        def apply() -> ops.StepOutcome:
            if op.expected_step_index is not None and op.expected_step_index != session.step_index:
                raise errors.failed_precondition(
                    f"the session is at step {session.step_index}, not {op.expected_step_index}",
                    "STEP_INDEX_MISMATCH",
                    step_index=str(session.step_index),
                )
            step = session.step(op.action)
            return ops.StepOutcome(step, tuple(session.admissible_actions()) if op.admissible else None)

        return self._keyed(op.session_id, op.request_id, ("step", op.action), apply)

    def step_many(self, op: ops.StepMany) -> tuple[ops.Reply, ...]:
        replies = []
        for step in op.steps:
            try:
                replies.append(ops.Reply(value=self.step(step)))
            except Exception as exc:  # this step's answer; the batch goes on
                replies.append(ops.Reply(error=_as_envhub_error(exc)))
        return tuple(replies)

    def close(self, op: ops.Close) -> None:
        with self._starting:
            if op.session_id in self.preparing:  # not started yet: it never will be
                self._cancelled.add(op.session_id)
                return
        self._session(op.session_id).close()
        del self.sessions[op.session_id]
        self._last.pop(op.session_id, None)

    def expert(self, op: ops.ExpertActions) -> tuple[str, ...]:
        return tuple(self._session(op.session_id).expert_actions())

    def snapshot(self, op: ops.TakeSnapshot) -> Any:
        return self._session(op.session_id).state()

    def restore(self, op: ops.Restore) -> ops.View:
        self._admit(op.session_id)
        session = Session.restore(self.kind, op.state, other_versions=op.other_versions)
        self.sessions[op.session_id] = session
        return self._view(session, op.admissible)

    def fork(self, op: ops.Fork) -> None:
        source = self._session(op.session_id)
        forks: dict[str, Session] = {}
        try:
            for new_id in op.new_ids:
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
        return errors.unsupported(str(exc))
    log.exception("environment call failed")
    return errors.EnvhubError(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}", "ENVIRONMENT_ERROR")


class _Answers:
    """The worker's end of the pipe for answers, shared by its serving threads."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def send(self, call_id: int, reply: ops.Reply) -> bool:
        """Answer one call; False once the server went away."""
        try:
            with self._lock:
                self._conn.send((call_id, reply))
        except OSError:  # the server went away first: nothing to answer
            return False
        return True


def _apply(state: WorkerState, op: ops.Op[Any]) -> ops.Reply:
    try:
        return ops.Reply(value=state.handle(op))
    except Exception as exc:  # one bad request never kills the worker: it answers with the error
        return ops.Reply(error=_as_envhub_error(exc))


def _answer(state: WorkerState, answers: _Answers, inbox: Lanes, item: Item) -> bool:
    """Apply one item taken from `inbox` and answer it; False once the server went away."""
    try:
        reply = _apply(state, item[1])
    finally:
        inbox.done(item)
    return answers.send(item[0], reply)


def _read(
    conn: Connection, state: WorkerState, preparer: Preparer, inbox: Lanes, answers: _Answers, start_thread: bool
) -> bool:
    """The reading thread: operations into `inbox` (its lanes), unprepared creations via the preparer. It applies
    and answers a quick operation itself when the serving thread is idle (`Lanes.take_now`), and with
    `start_thread` (a start thread serves the slow lane) every operation that is not queued behind a slow one.

    Ends (and so ends the worker) at Stop (True), or when the server went away: its end of the pipe closed, or a
    bad message (False).
    """
    try:
        while True:
            item: Item = conn.recv()
            call_id, op = item
            if isinstance(op, ops.Stop):
                return True
            unprepared = state.unprepared_task(op)
            if unprepared is not None:
                session_id, task = unprepared
                state.preparing.add(session_id)
                preparer.prepare(task, functools.partial(inbox.put, item))
            elif start_thread:
                if not inbox.put_slow(item) and not answers.send(call_id, _apply(state, op)):
                    return False
            elif inbox.take_now(item):
                if not _answer(state, answers, inbox, item):
                    return False
            else:
                inbox.put(item)
    except (EOFError, OSError):
        return False
    finally:
        inbox.close()


def _serve(state: WorkerState, answers: _Answers, inbox: Lanes, take: Callable[[], Item | None]) -> None:
    """A serving thread: apply each operation `take()` gives and answer it."""
    while (item := take()) is not None:
        if not _answer(state, answers, inbox, item):
            break


def serve(state: WorkerState, conn: Connection, preparer: Preparer, start_thread: bool) -> bool:
    """Read and apply operations until the server stops (True) or goes away (False).

    One reading thread fills the lanes, served by this thread (the reading thread applies a quick operation
    itself when this one is idle); or, with `start_thread`, a start thread serves the slow lane while this
    thread reads and applies the rest (no hand-off between threads for a step).
    """
    answers, inbox = _Answers(conn), Lanes()
    if not start_thread:
        stopped: list[bool] = []
        reader = threading.Thread(
            target=lambda: stopped.append(_read(conn, state, preparer, inbox, answers, False)),
            name="envhub-read",
            daemon=True,
        )
        reader.start()
        _serve(state, answers, inbox, inbox.get)
        reader.join()  # it closed the inbox, so it has ended or is ending
        return stopped == [True]
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    starts = threading.Thread(target=_serve, args=(state, answers, inbox, inbox.get_slow), name="envhub-starts")
    starts.start()
    try:
        return _read(conn, state, preparer, inbox, answers, True)
    finally:
        inbox.close()  # the start thread ends once its lane is empty
        starts.join()


def _leave(state: WorkerState) -> None:
    """End a worker whose server went away without a Stop (killed, crashed): no answer will be read, so its
    sessions are not closed one by one and the interpreter is not torn down (for 256 ALFWorld sessions that
    took ~0.4 s of CPU per worker, on a machine whose other replicas are taking the sessions over: design note
    035); only the kind's own resources outside the process (e.g. ScienceWorld's JVM) are closed."""
    try:
        state.kind.close()
    finally:
        logging.shutdown()
        os._exit(0)


def worker_main(
    environment: str,
    config: dict[str, Any],
    conn: Connection,
    index: int = 0,
    workers: int = 1,
    inline_starts: bool = False,
) -> None:
    """Entry point of a worker process: build the kind, announce the catalog, serve operations.

    Worker `index` of `workers` prepares every `workers`-th of the kind's `tasks_to_prepare` in the background.
    Session starts get their own thread when the kind allows it (`EnvironmentKind.concurrent_starts`) unless
    `inline_starts`.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when workers stop
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s worker[{environment}] %(levelname)s %(message)s")
    try:
        state = WorkerState(build_kind(environment, config))
    except Exception as exc:  # reported to the server, which refuses to start with this message
        conn.send(ops.Reply(error=errors.failed_precondition(str(exc), "ENVIRONMENT_START")))
        return
    if state.kind.gc_thresholds is not None:
        gc.set_threshold(*state.kind.gc_thresholds)
    conn.send(ops.Reply(value=state.catalog))
    preparer = Preparer(environment, config, state.kind)
    stopped = True
    try:
        preparer.ahead(list(state.kind.tasks_to_prepare())[index::workers])
        stopped = serve(state, conn, preparer, state.kind.concurrent_starts and not inline_starts)
    finally:
        preparer.close()
        if not stopped:
            _leave(state)
        state.shutdown()
