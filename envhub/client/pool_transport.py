"""`PoolTransport`: a blocking transport over several replicas, routing each call to the replica it concerns.

New sessions (create, restore) go to the replica with the fewest sessions this pool placed
there (round robin among equals) among those hosting the environment; every call of a
session goes to the replica named by its id prefix ("<replica_id>.<suffix>");
`list_environments` merges every replica's answer; a StepBatch is split into one StepBatch per
replica, sent in parallel.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from google.protobuf.message import Message

from envhub.client import calls
from envhub.client.transport import ChannelTransport
from envhub.core import errors
from envhub.core.errors import EnvhubError
from envhub.core.status import to_rpc_status
from envhub.v1 import envhub_pb2 as pb


class PoolTransport:
    """One `ChannelTransport` per replica and the routing between them."""

    def __init__(self, replicas: Sequence[ChannelTransport]) -> None:
        if not replicas:
            raise ValueError("a pool needs at least one target")
        self.replicas: dict[str, ChannelTransport] = {}
        self._hosts: dict[str, set[str]] = {}
        for transport in replicas:
            answer = transport.send(calls.list_environments())
            replica: str = answer.replica_id  # type: ignore[attr-defined]
            if replica in self.replicas:
                raise ValueError(f"{transport.target} and {self.replicas[replica].target} are the same replica")
            self.replicas[replica] = transport
            self._hosts[replica] = {info.name for info in answer.environments}  # type: ignore[attr-defined]
        self._load = dict.fromkeys(self.replicas, 0)
        self._turn = itertools.count()

    def owner(self, session_id: str) -> str:
        """The replica owning `session_id`; NOT_FOUND (UNKNOWN_REPLICA) when it is not in this pool."""
        replica = session_id.split(".", 1)[0]
        if replica not in self.replicas:
            raise errors.not_found(f"no replica {replica!r} in this pool for session {session_id!r}", "UNKNOWN_REPLICA")
        return replica

    def retire(self, replica: str) -> None:
        """Place no new session on `replica` (it is draining or gone); its sessions' calls still route there."""
        self._hosts.pop(replica, None)

    def _place(self, environment: str) -> str:
        candidates = [name for name, hosted in self._hosts.items() if not environment or environment in hosted]
        if not candidates:
            raise errors.invalid_argument(f"no replica in this pool serves {environment!r}", "UNKNOWN_ENVIRONMENT")
        turn = next(self._turn) % len(candidates)
        return min(candidates[turn:] + candidates[:turn], key=lambda replica: self._load[replica])

    def send(self, call: calls.Call[Any]) -> Message:
        if call.method == "ListEnvironments" and not call.session_id:
            return self._merged_environments(call)
        if call.method == "StepBatch":
            return self._split_batch(call)
        replica = self.owner(call.session_id) if call.session_id else self._place(call.environment)
        response = self.replicas[replica].send(call)
        self._load[replica] = max(0, self._load[replica] + call.new_sessions(response))
        return response

    def _merged_environments(self, call: calls.Call[Any]) -> Message:
        merged = pb.ListEnvironmentsResponse()
        seen: set[str] = set()
        for replica in self._hosts:  # retired replicas are left out
            for info in self.replicas[replica].send(call).environments:  # type: ignore[attr-defined]
                if info.name not in seen:
                    seen.add(info.name)
                    merged.environments.append(info)
        return merged

    def _split_batch(self, call: calls.Call[Any]) -> Message:
        """A StepBatch as one StepBatch per replica, in parallel; each step answered in its place
        (a step of a replica outside this pool: NOT_FOUND, UNKNOWN_REPLICA; of a replica whose
        call failed: that call's error)."""
        request: pb.StepBatchRequest = call.request  # type: ignore[assignment]
        merged = pb.StepBatchResponse()
        entries = [merged.results.add() for _ in request.steps]
        shares: dict[str, list[int]] = {}
        for position, step in enumerate(request.steps):
            try:
                shares.setdefault(self.owner(step.session_id), []).append(position)
            except EnvhubError as exc:
                entries[position].error.CopyFrom(to_rpc_status(exc))

        def play(replica: str) -> None:
            positions = shares[replica]
            share = pb.StepBatchRequest(steps=[request.steps[p] for p in positions])
            try:
                answer = self.replicas[replica].send(dataclasses.replace(call, request=share))
            except EnvhubError as exc:  # the replica failed (e.g. draining, gone): each of its steps failed
                for position in positions:
                    entries[position].error.CopyFrom(to_rpc_status(exc))
                return
            for position, entry in zip(positions, answer.results, strict=True):  # type: ignore[attr-defined]
                entries[position].CopyFrom(entry)

        if len(shares) == 1:
            play(next(iter(shares)))
        elif shares:
            with ThreadPoolExecutor(max_workers=len(shares)) as executor:
                list(executor.map(play, shares))
        return merged

    def close(self) -> None:
        for transport in self.replicas.values():
            transport.close()
