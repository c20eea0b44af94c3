"""`FailoverTransport`: sessions that survive a replica draining or dying, over a `PoolTransport`.

Crash recovery for one client over several replicas sharing a snapshot key. For every session it
holds, the transport keeps the latest snapshot (taken every `snapshot_every` steps, after
creation and after each reset) and the steps taken since, with their results
(`envhub.client.recovery.Tracked`). A failure moves sessions, in parallel (`concurrency` at once):

* a replica found gone (a call fails with UNAVAILABLE or CANCELLED and a read-only probe fails
  too: SIGKILL, node loss): it is retired and **every** session this transport holds there is
  rebuilt on the other replicas at once (held snapshots restored in RestoreSnapshotBatch calls,
  steps since replayed in batched rounds, each replayed result checked against the recorded one);
  no call of those sessions goes to the dead address again, and one probe settles it for all of them;
* a replica refusing a call as DRAINING (SIGTERM; never retried there): it is retired and every
  session held there moves by a fresh snapshot taken on it (a draining server still admits
  CreateSnapshot and CloseSession), restored elsewhere in batches, the old one closed: no replay; a
  session whose fresh snapshot is refused is rebuilt from its held one;
* a session lost with its worker (UNAVAILABLE `SESSION_LOST`, or `WORKER_LOST` in flight): that
  session is rebuilt, its replica stays.

The call that failed is then sent again on the moved session (a refused call was not applied; a
step in flight when its replica died is applied once on the rebuilt session). Calls of a session
being moved wait for the move. The caller keeps using the session id it was given; the
transport maps it to the live session. A replay that does not reproduce fails the session with
FAILED_PRECONDITION (REPLAY_DIVERGED) instead of continuing a different episode.

Costs: one CreateSnapshot per `snapshot_every` steps (ALFWorld snapshots are a few KB), and the
steps since the last snapshot kept in memory.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Sequence
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from google.protobuf.message import Message

from envhub.client import calls, recovery
from envhub.client.endpoints import REFRESH_S
from envhub.client.errors import from_status
from envhub.client.pool_transport import FAILED, PoolTransport
from envhub.client.recovery import Tracked
from envhub.client.retry import DEFAULT_POLICY, NO_RETRY, RetryPolicy
from envhub.client.transport import Settings
from envhub.core.errors import EnvhubError
from envhub.core.status import to_rpc_status
from envhub.v1 import envhub_pb2 as pb

log = logging.getLogger(__name__)
R = TypeVar("R")
LOST = frozenset({"SESSION_LOST", "WORKER_LOST"})
"""Reasons of a session gone with its worker while its replica lives on."""
SNAPSHOT_EVERY = 2
"""Default steps between snapshots (docs/results/envhub-failover-recovery.md measures the cost)."""
REPLAY_BOUND = 16
"""`snapshot_every` for protection by a replay log: a session's snapshot is the one taken at its creation,
fork, restore or reset, and a new one only once 16 steps are to replay (a recovery replays up to 15 steps,
one batched round each: 0.06-0.07 s a round for 512 sessions on 2 cores, docs/results/envhub-failover-recovery.md;
docs/design/027-prepare-and-replay-protection.md)."""


@dataclasses.dataclass(frozen=True)
class ReplicaMove:
    """One move of every session a failover transport held on a failed replica, timed (perf_counter)."""

    replica: str
    reason: str
    sessions: int
    started: float
    """When the replica was found failed (its first failed call answered and probed)."""
    ended: float
    """When every session had moved (or broken)."""
    rebuilt: recovery.Rebuilt
    """The rebuild from held snapshots (for a draining replica: of the sessions a migration missed)."""


class FailoverTransport:
    """A blocking transport over a `PoolTransport` that moves sessions off replicas that fail.

    `EnvhubClient(FailoverTransport.over(["dns:///envhub-alfworld:50051"], snapshot_every=2))`.
    Thread-safe: rollouts call it from many threads.
    """

    def __init__(
        self,
        pool: PoolTransport,
        snapshot_every: int = SNAPSHOT_EVERY,
        concurrency: int = recovery.CONCURRENCY,
        policy: RetryPolicy = DEFAULT_POLICY,
        settings: Settings | None = None,
        batch_bytes: int = recovery.BATCH_BYTES,
        move_early: bool = True,
    ) -> None:
        """Over `pool`, whose transports should not retry (`over` builds them so): this transport
        retries a failed call by `policy` once a probe says its replica is still there. A move restores
        its sessions in RestoreSnapshotBatch calls of at most `batch_bytes` of snapshots (0: one
        RestoreSnapshot call per session, for servers older than RestoreSnapshotBatch). With `move_early`, a failed
        replica's sessions move as soon as its share of a step batch fails, while the other replicas answer theirs
        (else once the whole batch is answered)."""
        if snapshot_every < 1 or concurrency < 1:
            raise ValueError("snapshot_every and concurrency must be at least 1 (a snapshot every k steps)")
        self.pool = pool
        self.policy = policy
        self.settings = settings or Settings()
        """How the replicas are reached (token, TLS): also for the session streams of an asyncio client."""
        self.snapshot_every = snapshot_every
        self.concurrency = concurrency
        self.batch_bytes = batch_bytes
        self._sessions: dict[str, Tracked] = {}
        self._lock = threading.Lock()
        self._moves: dict[str, threading.Event] = {}
        """Replica -> the move of its sessions in progress."""
        self._renewals = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="envhub-snapshots")
        self._dispatch = ThreadPoolExecutor(max_workers=1, thread_name_prefix="envhub-snapshot-dispatch")
        """Hands the sessions a call made due to `_renewals`, off the caller's thread."""
        self._renewing: set[futures.Future[None]] = set()
        self.recoveries = 0
        """Sessions moved to another replica so far."""
        self.migrations = 0
        """Of `recoveries`, those moved by a fresh snapshot taken on their draining replica (no replay)."""
        self.last_move: ReplicaMove | None = None
        """The latest move of a failed replica's sessions, timed."""
        if move_early:
            pool.share_failed = self._share_failed

    @classmethod
    def over(
        cls,
        targets: Sequence[str],
        snapshot_every: int = SNAPSHOT_EVERY,
        settings: Settings | None = None,
        refresh_s: float = REFRESH_S,
        concurrency: int = recovery.CONCURRENCY,
        batch_bytes: int = recovery.BATCH_BYTES,
        move_early: bool = True,
    ) -> FailoverTransport:
        """`PoolTransport.over(targets, settings, refresh_s)` ("dns:///name:port" stands for every
        address, looked up again every `refresh_s` seconds and after a replica fails), with failover;
        the replicas' transports do not retry, this one does by `settings.policy`."""
        settings = settings or Settings()
        pool = PoolTransport.over(targets, dataclasses.replace(settings, policy=NO_RETRY), refresh_s)
        return cls(pool, snapshot_every, concurrency, settings.policy, settings, batch_bytes, move_early)

    def close(self) -> None:
        self._dispatch.shutdown(wait=False, cancel_futures=True)
        self._renewals.shutdown(wait=False, cancel_futures=True)
        self.pool.close()

    # ------------------------------------------------------------ calls

    def send(self, call: calls.Call[Any]) -> Message:
        if call.effect is calls.Effect.BATCHES:
            return self._batch(call)
        session = self._sessions.get(call.session_id) if call.session_id else None
        if session is None:
            return self._untracked(call)
        attempt = 0
        while True:
            live_id, epoch = self.live(session)
            try:
                response = self.pool.send(call.addressed_to(live_id))
            except EnvhubError as error:
                if session.epoch != epoch or self.handle(call.session_id, session, live_id, error):
                    continue  # moved (by this call's failure or another's): send it there
                if not self.policy.should_retry(call.retry, error, attempt):
                    raise
                time.sleep(self.policy.delay_s(attempt))  # its replica answers: a passing failure
                attempt += 1
                continue
            if self.record(call, response, session, epoch):
                return response

    def tracked(self, session_id: str) -> Tracked | None:
        """The session this transport holds under the caller's id `session_id`, if any."""
        return self._sessions.get(session_id)

    def live(self, session: Tracked) -> tuple[str, int]:
        """The session's live id and epoch, once any move of it finished; raises why it could not move."""
        moving = session.moving
        if moving is not None:
            moving.wait()
        if session.broken is not None:
            raise session.broken
        return session.live_id, session.epoch

    def record(
        self, call: calls.Call[Any], response: Message, session: Tracked, epoch: int, checkpoint: bool = True
    ) -> bool:
        """Keep the bookkeeping of a call answered by the session's copy of `epoch` (without the
        snapshot a step may be due, unless `checkpoint`); False when the session moved meanwhile
        (that copy is gone: the call is to be sent to the new one)."""
        if call.effect is calls.Effect.STEPS:
            if not self.log_step(call, calls.expect(response, pb.StepResponse).result, session, epoch):
                return False
        elif session.epoch != epoch:
            return False
        if checkpoint or call.effect is not calls.Effect.STEPS:
            self._after(call, response, session)
        return True

    def log_step(self, call: calls.Call[Any], result: pb.StepResult, session: Tracked, epoch: int) -> bool:
        """Keep a step answered by the session's copy of `epoch` in its replay log (the result as answered:
        no copy, no decoding); False when the session moved meanwhile and its new copy lacks the step."""
        step_index = result.observation.step_index
        with session.lock:
            if session.epoch != epoch:  # a step the fresh snapshot of a migration holds is answered
                moved_at = session.moved_at_step
                return moved_at is not None and step_index <= moved_at
            held = session.snapshot
            if held is None or step_index > held.step_index:  # else a background snapshot holds it
                session.replay.append((call, result))
        return True

    def due(self, session: Tracked) -> bool:
        """Whether the session's steps since its snapshot call for a new one."""
        return len(session.replay) >= self.snapshot_every

    def handle(self, caller_id: str, session: Tracked, live_id: str, error: EnvhubError) -> bool:
        """Move what `error` (a call of `session` on `live_id` failed with it) says is lost; False when
        the error is the call's own (raise it)."""
        if error.code in FAILED and error.reason in LOST:
            self._move_one(caller_id, session, error)
            return True
        replica = self.pool.owner(live_id)
        running = self._moves.get(replica)
        if running is not None and error.code in FAILED:  # another call found it failed: no second probe
            running.wait()
            return True
        if not self.pool.failed(replica, error):
            return False
        self.move_replica(replica, error)
        return True

    def _untracked(self, call: calls.Call[Any]) -> Message:
        """A call of no tracked session; a new session whose replica fails before its first snapshot
        (which `_after` takes) is placed again, on another replica."""
        while True:
            response = self._retried(call)
            try:
                self._after(call, response, None)
            except EnvhubError as error:
                if call.effect is not calls.Effect.CREATES:
                    raise
                replica = self.pool.owner(call.created(response)[0])
                if not self.pool.failed(replica, error):
                    raise
                log.warning("a new session's replica %s failed before its first snapshot (%s)", replica, error)
                self.pool.retire(replica)
                continue
            return response

    def _retried(self, call: calls.Call[Any]) -> Message:
        """`call` sent by the pool, retried by `policy` (creates are placed again by the pool itself)."""
        for attempt in itertools.count():
            try:
                return self.pool.send(call)
            except EnvhubError as error:
                if not self.policy.should_retry(call.retry, error, attempt):
                    raise
            time.sleep(self.policy.delay_s(attempt))
        raise AssertionError("unreachable")

    def _batch(self, call: calls.Call[Any]) -> Message:
        """The batch sent with each tracked session's live id; the steps failing with their replica or
        their worker move their sessions (every session of a failed replica at once) and are sent
        again as one batch; every step that went through is recorded. The snapshots it makes due are
        asked for once every step is answered (they do not compete with the steps sent again)."""
        entries: list[pb.StepBatchEntry | None] = [None] * len(call.parts)
        pending = list(range(len(call.parts)))
        due: list[Tracked] = []
        for attempt in range(max(3, self.policy.attempts)):  # a step whose new replica fails too moves again
            pending, passing, answer = self._batch_round(call, pending, entries, attempt, due)
            if not pending and attempt == 0 and len(answer.results) == len(call.parts):
                self.renew_all(due)
                return answer  # every step answered by the first batch, in order: no copy
            if not pending:
                break
            if passing:
                time.sleep(self.policy.delay_s(attempt))
        self.renew_all(due)
        return pb.StepBatchResponse(results=[entry or pb.StepBatchEntry() for entry in entries])

    def _batch_round(
        self,
        call: calls.Call[Any],
        positions: list[int],
        entries: list[pb.StepBatchEntry | None],
        attempt: int,
        due: list[Tracked],
    ) -> tuple[list[int], bool, pb.StepBatchResponse]:
        """Send the steps at `positions` as one batch, each answer (or its last error) into `entries`,
        the sessions due for a snapshot onto `due`; returns the positions to send again, whether some
        are retried after a passing failure, and the batch's answer."""
        sent: dict[int, tuple[Tracked, str, int]] = {}
        parts = []
        for position in positions:
            part = call.parts[position]
            session = self._sessions.get(part.session_id)
            if session is not None:
                try:
                    live_id, epoch = self.live(session)
                except EnvhubError as error:
                    entries[position] = pb.StepBatchEntry(error=to_rpc_status(error))
                    continue
                sent[position] = (session, live_id, epoch)
                part = part.addressed_to(live_id)
            parts.append((position, part))
        if not parts:
            return [], False, pb.StepBatchResponse()
        batch = calls.batch([part for _, part in parts], timeout=call.timeout)
        answer = calls.expect(self.pool.send(batch), pb.StepBatchResponse)
        again: list[int] = []
        failures: dict[str, EnvhubError] = {}
        lost: list[tuple[str, Tracked, EnvhubError]] = []
        passing = False
        for (position, _), entry in zip(parts, answer.results, strict=True):
            held = sent.get(position)
            entries[position] = entry  # kept unless a later round answers it
            if held is None:
                continue
            session, live_id, epoch = held
            if not entry.HasField("error"):
                if not self.log_step(call.parts[position], entry.result, session, epoch):
                    again.append(position)  # answered by a copy that moved meanwhile
                elif self.due(session):
                    due.append(session)
                continue
            failure = from_status(entry.error)
            if failure.code in FAILED and session.epoch != epoch:
                again.append(position)
            elif failure.code in FAILED and failure.reason in LOST:
                lost.append((call.parts[position].session_id, session, failure))
                again.append(position)
            elif failure.code in FAILED:
                failures.setdefault(self.pool.owner(live_id), failure)
                again.append(position)
            elif self.policy.should_retry(call.retry, failure, attempt):
                again.append(position)
                passing = True
        for replica, cause in failures.items():
            if self.pool.failed(replica, cause):
                self.move_replica(replica, cause)
            else:  # the replica answers: a passing failure, retried after a delay
                passing = True
        if lost:
            self._move_group(lost, lost[0][2])
        return again, passing, answer

    # ------------------------------------------------------------ bookkeeping

    def _after(self, call: calls.Call[Any], response: Message, session: Tracked | None) -> None:
        """Track sessions the call created, checkpoint resets and every `snapshot_every` steps, forget closed ones."""
        for session_id in call.created(response):
            self._track(session_id)
        if session is None:
            return
        if call.effect is calls.Effect.RESETS:
            with session.lock:  # the old episode's snapshot and steps are no way back to the new one
                session.episode += 1
                session.snapshot = None
                session.replay.clear()
            self._checkpoint(session)
        elif call.effect is calls.Effect.STEPS and self.due(session):
            self.renew_all([session])
        elif call.effect is calls.Effect.CLOSES:
            with self._lock:
                self._sessions.pop(call.session_id, None)

    def _track(self, session_id: str) -> None:
        session = Tracked(session_id)
        self._checkpoint(session)
        with self._lock:
            self._sessions[session_id] = session

    def _renew(self, session: Tracked) -> None:
        """A new snapshot of a session that stepped `snapshot_every` times; when it fails the older one
        and the steps since stay (a failing replica is dealt with when a call of its sessions fails)."""
        try:
            self._checkpoint(session)
        except EnvhubError as error:
            log.info("session %s: no new snapshot (%s); the older one stays", session.live_id, error)
        finally:
            session.renewing = False

    def renew_all(self, sessions: Sequence[Tracked]) -> None:
        """New snapshots of `sessions` (due for one), taken in the background, `concurrency` at a time:
        the calls of the sessions go on meanwhile (steps taken meanwhile stay to replay). The caller only
        marks them; a dispatching thread hands each to the snapshot threads (handing 1,024 over from the
        caller's thread, while the first ones already ran, held a failover bench turn up 0.27-0.29 s:
        docs/design/035-recovery-within-3-s.md)."""
        chosen = []
        for session in sessions:
            with session.lock:
                if session.renewing:
                    continue
                session.renewing = True
            chosen.append(session)
        if chosen:
            self._remember([self._dispatch.submit(self._hand_over, chosen)])

    def _hand_over(self, sessions: list[Tracked]) -> None:
        """On the dispatching thread: one background snapshot per session (`settle` waits for them)."""
        self._remember([self._renewals.submit(self._renew, session) for session in sessions])

    def _remember(self, submitted: list[futures.Future[None]]) -> None:
        """Keep `submitted` for `settle`, dropping the finished ones (one pass per batch, not per session)."""
        with self._lock:
            self._renewing = {pending for pending in self._renewing if not pending.done()}
            self._renewing.update(submitted)

    def settle(self) -> None:
        """Wait until the background snapshots asked for so far are taken (tests, benchmarks)."""
        while True:
            with self._lock:
                pending = [future for future in self._renewing if not future.done()]
            if not pending:
                return
            futures.wait(pending)  # a hand-over is done once its snapshots are submitted: look again

    def _checkpoint(self, session: Tracked) -> None:
        epoch, episode = session.epoch, session.episode
        call = calls.snapshot(session.live_id)
        snapshot = call.decode(self._retried(call))
        with session.lock:
            if (session.epoch, session.episode) == (epoch, episode) and session.moving is None:
                session.snapshot = snapshot  # (else a move or a reset came since: the snapshot is stale)
                newer = [
                    (step, result)
                    for step, result in session.replay
                    if result.observation.step_index > snapshot.step_index
                ]
                session.replay = newer

    # ------------------------------------------------------------ moves

    def move_replica(self, replica: str, cause: EnvhubError) -> None:
        """Move every session held on `replica` (refused as DRAINING, or gone), all at once; a second
        caller finding the same replica failed waits for the first one's move."""
        group: list[tuple[str, Tracked]] = []
        with self._lock:
            running = self._moves.get(replica)
            started = running is None
            if running is None:
                running = self._moves[replica] = threading.Event()
                group = [(caller_id, s) for caller_id, s in self._sessions.items() if self._on(s, replica)]
                for _, session in group:
                    session.moving = running
        if not started:
            running.wait()
            return
        try:
            began = time.perf_counter()
            self.pool.retire(replica)
            log.warning("replica %s failed (%s): moving its %d session(s)", replica, cause.reason, len(group))
            rebuilt = self._relocate(group, cause)
            move = self.last_move = ReplicaMove(replica, cause.reason, len(group), began, time.perf_counter(), rebuilt)
            log.warning(
                "replica %s: %d session(s) moved in %.2f s (%d rebuilt from held snapshots: restores %.2f s, "
                "replay %.2f s)",
                replica,
                len(group),
                move.ended - move.started,
                rebuilt.sessions,
                rebuilt.restore_s,
                rebuilt.replay_s,
            )
        finally:
            with self._lock:
                del self._moves[replica]
                for _, session in group:
                    session.moving = None
            running.set()

    def _share_failed(self, replica: str, error: EnvhubError) -> None:
        """A step batch's share on `replica` failed: when the replica failed, move its sessions now, beside the
        other replicas' shares (the batch sends the moved sessions' steps again once every share is answered)."""
        if self.pool.failed(replica, error):
            self.move_replica(replica, error)

    def _on(self, session: Tracked, replica: str) -> bool:
        return session.live_id.split(".", 1)[0] == replica and session.broken is None

    def _move_one(self, caller_id: str, session: Tracked, cause: EnvhubError) -> None:
        self._move_group([(caller_id, session, cause)], cause)

    def _move_group(self, lost: list[tuple[str, Tracked, EnvhubError]], cause: EnvhubError) -> None:
        """Rebuild sessions lost with their worker (their replicas stay)."""
        event = threading.Event()
        group = []
        with self._lock:
            for caller_id, session, _ in lost:
                if session.moving is None:
                    session.moving = event
                    group.append((caller_id, session))
        try:
            rebuilt = self._relocate(group, cause)
            log.warning(
                "%d session(s) lost with their worker (%s): %d rebuilt", len(group), cause.reason, rebuilt.sessions
            )
        finally:
            for _, session in group:
                session.moving = None
            event.set()

    def _relocate(self, group: list[tuple[str, Tracked]], cause: EnvhubError) -> recovery.Rebuilt:
        """Move `group` (migrate a draining replica's sessions, rebuild the rest); what the rebuild did."""
        send = self.pool.send
        if cause.reason == "DRAINING":
            left = recovery.migrate(send, group, self.concurrency, self.batch_bytes)
            self.migrations += len(group) - len(left)
            self.recoveries += len(group) - len(left)
            group = left
        rebuilt = recovery.rebuild(send, group, cause, self.concurrency, self.batch_bytes)
        self.recoveries += rebuilt.sessions
        return rebuilt
