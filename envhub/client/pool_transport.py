"""`PoolTransport`: a blocking transport over several replicas, routing each call to the replica it concerns.

Routing follows each call's data (`calls.Call`), never its RPC name. New sessions (calls that
create: create, restore) go to the replica with the fewest sessions this pool placed
there (round robin among equals) among the live ones hosting the environment; if that replica
fails the call with it (refused as DRAINING, or UNAVAILABLE/CANCELLED and then a read-only
probe fails too) the pool retires it and places the session on another, raising UNAVAILABLE
(NO_REPLICA_LEFT) only when none is left. Every call of a session goes to the replica named
by its id prefix ("<replica_id>.<suffix>"); a read about the whole fleet (`list_environments`,
whose call says how to `merge`) asks every live replica; a step batch is split by its `parts` into one
StepBatch per replica, sent in parallel; a restore batch places each restore as a single one would be
placed (load counted as it goes), sends one RestoreSnapshotBatch per replica in parallel, and places the
restores of a replica that fails the call again on the others. With a
`Discovery` the pool re-resolves its targets (after retiring a replica, and every
`refresh_s` seconds before a placement): replicas at new addresses join, retired ones that
answer again come back, replicas whose address is no longer resolved are retired; it starts
with the addresses that answer and fails (UNAVAILABLE, NO_REPLICA_LEFT) only if none does.
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from envhub.client import calls
from envhub.client.endpoints import REFRESH_S, Discovery, resolver
from envhub.client.transport import ChannelTransport, Settings
from envhub.core import errors
from envhub.core.errors import EnvhubError
from envhub.core.status import to_rpc_status
from envhub.v1 import envhub_pb2 as pb

log = logging.getLogger(__name__)
R = TypeVar("R")
T = TypeVar("T")
FAILED = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})
"""Codes of a call whose replica may have failed: refused while draining, or cut off by its shutdown or death."""
PROBE_TIMEOUT_S = 5.0


def _environments(transport: ChannelTransport, timeout: float | None = None) -> pb.ListEnvironmentsResponse:
    """One replica's ListEnvironments answer: which replica it is and what it hosts."""
    return calls.expect(transport.send(calls.list_environments(timeout=timeout)), pb.ListEnvironmentsResponse)


class PoolTransport:
    """One `ChannelTransport` per replica and the routing between them."""

    def __init__(self, replicas: Sequence[ChannelTransport] = (), discovery: Discovery | None = None) -> None:
        """A pool of `replicas` (each must answer), and with `discovery` of every replica answering at
        the addresses it resolves to now (those that do not answer yet are asked again later)."""
        if not replicas and discovery is None:
            raise ValueError("a pool needs at least one target")
        self.replicas: dict[str, ChannelTransport] = {}
        self._hosts: dict[str, set[str]] = {}
        self._load: dict[str, int] = {}
        self._addresses: dict[str, str] = {}
        """Address -> the replica found there (by `_admit`)."""
        self.retired: set[str] = set()
        """Replicas no new session is placed on (draining or gone); their sessions' calls still route there."""
        self.share_failed: Callable[[str, EnvhubError], None] | None = None
        """Called with a replica and the error when its share of a step batch failed, on that share's thread,
        while the other replicas may still be answering theirs (a failover transport moves the replica's
        sessions then: design note 037)."""
        self._lock = threading.Lock()
        for transport in replicas:
            answer = _environments(transport)
            replica = answer.replica_id
            if replica in self.replicas:
                raise ValueError(f"{transport.target} and {self.replicas[replica].target} are the same replica")
            self._admit(transport, answer)
        self._turn = itertools.count()
        self.discovery = discovery
        self._refreshed_at = 0.0
        self.refresh()
        if not self.replicas:
            raise errors.unavailable("no replica answers at any address of this pool's targets", "NO_REPLICA_LEFT")

    @classmethod
    def over(
        cls, targets: Sequence[str], settings: Settings | None = None, refresh_s: float = REFRESH_S
    ) -> PoolTransport:
        """One channel per replica of `targets` ("dns:///name:port" stands for every address), resolved
        again after a replica is retired and every `refresh_s` seconds (see `Discovery`)."""
        settings = settings or Settings()
        return cls(
            discovery=Discovery(resolver(targets), lambda address: ChannelTransport(address, settings), refresh_s)
        )

    def _admit(self, transport: ChannelTransport, answer: pb.ListEnvironmentsResponse) -> None:
        """Add a replica; `_hosts` last, as placement (maybe on another thread) starts from it."""
        replica = answer.replica_id
        self._load[replica] = 0
        self.replicas[replica] = transport
        self._addresses[transport.target] = replica
        self._hosts[replica] = {info.name for info in answer.environments}

    def owner(self, session_id: str) -> str:
        """The replica owning `session_id`; NOT_FOUND (UNKNOWN_REPLICA) when it is not in this pool."""
        replica = session_id.split(".", 1)[0]
        if replica not in self.replicas:
            raise errors.not_found(f"no replica {replica!r} in this pool for session {session_id!r}", "UNKNOWN_REPLICA")
        return replica

    def retire(self, replica: str) -> None:
        """Place no new session on `replica` (it is draining or gone); its sessions' calls still route there.
        The first time, the pool looks for new replicas (with a `Discovery`): a replacement may have started."""
        with self._lock:
            if replica in self.retired:
                return
            self.retired.add(replica)
        log.warning("replica %s (%s) retired: no new session goes there", replica, self.replicas[replica].target)
        self.refresh(revive=False)

    def failed(self, replica: str, error: EnvhubError) -> bool:
        """Whether a call on `replica` that raised `error` failed with the replica: refused as DRAINING,
        or UNAVAILABLE/CANCELLED and then either its address is no longer among the targets' (with a
        `Discovery`: the Service dropped the pod; no probe, which to a vanished address may wait for
        a connect to fail) or it refuses, or does not answer, a read-only call."""
        if error.code not in FAILED:
            return False
        if error.reason == "DRAINING" or self._left(replica):
            return True
        try:
            self.replicas[replica].send(calls.list_environments(timeout=PROBE_TIMEOUT_S))
        except EnvhubError as probe:
            return probe.code in FAILED or probe.code == grpc.StatusCode.DEADLINE_EXCEEDED
        return False

    def _left(self, replica: str) -> bool:
        """Whether none of `replica`'s addresses is resolved any more (False without a `Discovery`, or
        when resolving fails)."""
        if self.discovery is None:
            return False
        try:
            addresses = set(self.discovery.resolve())
        except OSError:
            return False
        known = {address for address, name in self._addresses.items() if name == replica}
        if known & addresses:
            return False
        log.warning("replica %s left the targets' addresses after a failed call: failed, not probed", replica)
        return True

    def refresh(self, revive: bool = True) -> None:
        """Resolve the targets again (`Discovery.resolve`): admit the replica at each new address and,
        with `revive`, bring back a retired replica that answers again; addresses that do not answer
        are left for the next time; a replica none of whose addresses is resolved any more (its pod
        is not ready, or gone) is retired. Sessions stay where they are."""
        if self.discovery is None:
            return
        with self._lock:  # one refresh at a time; the probes of new addresses run under it
            self._refreshed_at = self.discovery.clock()
            try:
                addresses = list(self.discovery.resolve())
            except OSError as error:  # the resolver failed: keep the replicas known
                log.warning("re-resolving the pool's targets failed: %s", error)
                return
            for address in addresses:
                known = self._addresses.get(address)
                if known is None or (revive and known in self.retired):
                    self._probe(address)
            present = {self._addresses[address] for address in addresses if address in self._addresses}
            for replica in set(self.replicas) - present - self.retired:
                self.retired.add(replica)
                log.warning(
                    "replica %s (%s) left the targets' addresses: retired", replica, self.replicas[replica].target
                )

    def _probe(self, address: str) -> None:
        """Ask `address` which replica it is: a new one joins, a retired one answering again comes back."""
        assert self.discovery is not None
        transport = self.discovery.connect(address)
        try:
            answer = _environments(transport, PROBE_TIMEOUT_S)
        except EnvhubError as error:  # not ready yet, draining or gone
            transport.close()
            log.info("replica address %s does not answer (%s)", address, error.reason or error.code.name)
            return
        replica = answer.replica_id
        if replica not in self.replicas:
            self._admit(transport, answer)
            log.warning("replica %s (%s) joined the pool", replica, address)
            return
        transport.close()
        self._addresses[address] = replica
        if replica in self.retired:
            self.retired.discard(replica)
            log.warning("replica %s (%s) answers again: new sessions may go there", replica, address)

    def _place(self, environment: str, tried: Collection[str]) -> str:
        hosting = [name for name, hosted in list(self._hosts.items()) if not environment or environment in hosted]
        if not hosting:
            raise errors.invalid_argument(f"no replica in this pool serves {environment!r}", "UNKNOWN_ENVIRONMENT")
        candidates = [name for name in hosting if name not in self.retired and name not in tried]
        if not candidates:
            raise errors.unavailable(
                f"no replica serving {environment!r} is left: {sorted(hosting)} are draining, gone or failed this call",
                "NO_REPLICA_LEFT",
            )
        turn = next(self._turn) % len(candidates)
        return min(candidates[turn:] + candidates[:turn], key=lambda replica: self._load[replica])

    def send(self, call: calls.Call[Any]) -> Message:
        if call.merge is not None:
            return self._merged(call)
        if call.effect is calls.Effect.BATCHES:
            return self._split_batch(call)
        if call.effect is calls.Effect.RESTORES:
            return self._placed_batch(call)
        if call.session_id:
            replica = self.owner(call.session_id)
            response = self.replicas[replica].send(call)
        else:
            replica, response = self._placed(call)
        self._load[replica] = max(0, self._load[replica] + call.sessions_made(response))
        return response

    def _refresh_due(self) -> None:
        """`refresh` when `refresh_s` passed since the last one (with a `Discovery`), before a placement."""
        if self.discovery is not None and self.discovery.clock() - self._refreshed_at >= self.discovery.refresh_s:
            self.refresh()

    def _placed(self, call: calls.Call[Any]) -> tuple[str, Message]:
        """Send a call placing a new session; on a replica that fails it, retire that one and try another."""
        self._refresh_due()
        tried: set[str] = set()
        last: EnvhubError | None = None
        while True:
            try:
                replica = self._place(call.environment, tried)
            except EnvhubError as none_left:
                raise none_left from last
            try:
                return replica, self.replicas[replica].send(call)
            except EnvhubError as error:
                if not self.failed(replica, error):
                    raise
                log.warning("placing a %s session on replica %s failed (%s)", call.environment, replica, error)
                tried.add(replica)
                last = error
                self.retire(replica)

    def _placed_batch(self, call: calls.Call[Any]) -> Message:
        """A restore batch: each restore placed, one batch per replica in parallel; the restores of a
        replica that failed the call are placed again on the others (UNAVAILABLE, NO_REPLICA_LEFT, in
        their places when none is left); an error of the call that is not its replica's, in each place."""
        self._refresh_due()
        entries = [pb.RestoreSnapshotBatchEntry() for _ in call.parts]
        pending = list(range(len(call.parts)))
        tried: set[str] = set()
        while pending:
            shares: dict[str, list[int]] = {}
            for position in pending:
                try:
                    replica = self._place(call.parts[position].environment, tried)
                except EnvhubError as none_left:
                    entries[position] = pb.RestoreSnapshotBatchEntry(error=to_rpc_status(none_left))
                    continue
                shares.setdefault(replica, []).append(position)
                self._load[replica] += 1  # counted now, so the next restore sees it; failures given back
            share = functools.partial(self._restore_share, call, entries, tried)
            pending = [position for again in self._each_replica(share, list(shares.items())) for position in again]
        return pb.RestoreSnapshotBatchResponse(results=entries)

    def _restore_share(
        self,
        call: calls.Call[Any],
        entries: list[pb.RestoreSnapshotBatchEntry],
        tried: set[str],
        share: tuple[str, list[int]],
    ) -> list[int]:
        """Send one replica's share of a restore batch, its answers into `entries`; the positions to
        place again when the replica failed the call (it is then retired and `tried`)."""
        replica, positions = share
        batch = calls.restore_batch([call.parts[position] for position in positions], timeout=call.timeout)
        try:
            answer = calls.expect(self.replicas[replica].send(batch), pb.RestoreSnapshotBatchResponse)
        except EnvhubError as exc:
            self._load[replica] -= len(positions)
            if self.failed(replica, exc):
                log.warning("restoring %d session(s) on replica %s failed (%s)", len(positions), replica, exc)
                tried.add(replica)
                self.retire(replica)
                return positions
            for position in positions:
                entries[position] = pb.RestoreSnapshotBatchEntry(error=to_rpc_status(exc))
            return []
        for position, entry in zip(positions, answer.results, strict=True):
            entries[position] = entry
            self._load[replica] -= entry.HasField("error")
        return []

    def _merged(self, call: calls.Call[Any]) -> Message:
        """A read about the whole fleet: every live replica's answer, merged by the call."""
        assert call.merge is not None
        return call.merge([self.replicas[name].send(call) for name in list(self.replicas) if name not in self.retired])

    def _split_batch(self, call: calls.Call[Any]) -> Message:
        """A batch as one batch per replica, in parallel; each step answered in its place (a step of a
        replica outside this pool: NOT_FOUND, UNKNOWN_REPLICA; of a replica whose call failed: that
        call's error)."""
        entries = [pb.StepBatchEntry() for _ in call.parts]
        shares: dict[str, list[int]] = {}
        for position, part in enumerate(call.parts):
            try:
                shares.setdefault(self.owner(part.session_id), []).append(position)
            except EnvhubError as exc:
                entries[position] = pb.StepBatchEntry(error=to_rpc_status(exc))

        def play(replica: str) -> None:
            positions = shares[replica]
            share = calls.batch([call.parts[p] for p in positions], timeout=call.timeout)
            try:
                answer = calls.expect(self.replicas[replica].send(share), pb.StepBatchResponse)
            except EnvhubError as exc:  # the replica failed (e.g. draining, gone): each of its steps failed
                for position in positions:
                    entries[position] = pb.StepBatchEntry(error=to_rpc_status(exc))
                if self.share_failed is not None:
                    self.share_failed(replica, exc)
                return
            for position, entry in zip(positions, answer.results, strict=True):
                entries[position] = entry

        self._each_replica(play, list(shares))
        return pb.StepBatchResponse(results=entries)

    @staticmethod
    def _each_replica(play: Callable[[T], R], shares: Sequence[T]) -> list[R]:
        """`play` of every replica's share, in parallel when there are several."""
        if len(shares) <= 1:
            return [play(share) for share in shares]
        with ThreadPoolExecutor(max_workers=len(shares)) as executor:
            return list(executor.map(play, shares))

    def close(self) -> None:
        for transport in list(self.replicas.values()):
            transport.close()
