"""`EnvhubPool`: one client over several replicas, routing each session to its owner.

New sessions go to the replica with the fewest sessions this pool placed there (round
robin among equals); every later call of a session goes to the replica named by its id
prefix ("<replica_id>.<suffix>"); a snapshot may be restored on any replica of its kind.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType

from envhub.client import channel, types
from envhub.client.sync import DEFAULT_TIMEOUT_S, EnvhubClient
from envhub.core import errors
from envhub.core.errors import EnvhubError


class EnvhubPool:
    """Sessions spread over several envhub servers, with the `EnvhubClient` session methods."""

    def __init__(
        self,
        targets: Sequence[str],
        token: str | None = None,
        tls: channel.Tls = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if not targets:
            raise ValueError("EnvhubPool needs at least one target")
        self._clients: dict[str, EnvhubClient] = {}
        self._hosts: dict[str, set[str]] = {}
        for target in targets:
            client = EnvhubClient(target, token=token, tls=tls, timeout=timeout)
            environments = client.list_environments()
            if client.replica_id in self._clients:
                raise ValueError(f"{target} and {self._clients[client.replica_id].target} are the same replica")
            self._clients[client.replica_id] = client
            self._hosts[client.replica_id] = {info.name for info in environments}
        self._load = dict.fromkeys(self._clients, 0)
        self._turn = itertools.count()

    @property
    def replicas(self) -> list[str]:
        return list(self._clients)

    def client_for(self, session_id: str) -> EnvhubClient:
        """The client of the replica owning `session_id`."""
        replica = session_id.split(".", 1)[0]
        client = self._clients.get(replica)
        if client is None:
            raise errors.not_found(f"no replica {replica!r} in this pool for session {session_id!r}", "UNKNOWN_REPLICA")
        return client

    def _place(self, environment: str | None) -> str:
        candidates = [
            replica for replica, hosted in self._hosts.items() if environment is None or environment in hosted
        ]
        if not candidates:
            raise errors.invalid_argument(f"no replica in this pool serves {environment!r}", "UNKNOWN_ENVIRONMENT")
        turn = next(self._turn)
        order = candidates[turn % len(candidates) :] + candidates[: turn % len(candidates)]
        return min(order, key=lambda replica: self._load[replica])

    def list_environments(self) -> list[types.EnvironmentInfo]:
        """Environments hosted by any replica (one entry per name)."""
        seen: dict[str, types.EnvironmentInfo] = {}
        for client in self._clients.values():
            for info in client.list_environments():
                seen.setdefault(info.name, info)
        return list(seen.values())

    def list_tasks(self, environment: str, split: str = "") -> list[types.TaskInfo]:
        return self._clients[self._place(environment)].list_tasks(environment, split)

    def create_session(
        self,
        environment: str,
        *,
        task_id: str | None = None,
        split: str | None = None,
        index: int | None = None,
        seed: int = 0,
        options: Mapping[str, str] | None = None,
        max_steps: int = 0,
        admissible: bool = False,
        timeout: float | None = None,
    ) -> types.SessionStart:
        replica = self._place(environment)
        start = self._clients[replica].create_session(
            environment,
            task_id=task_id,
            split=split,
            index=index,
            seed=seed,
            options=options,
            max_steps=max_steps,
            admissible=admissible,
            timeout=timeout,
        )
        self._load[replica] += 1
        return start

    def reset_session(
        self,
        session_id: str,
        *,
        task_id: str | None = None,
        split: str | None = None,
        index: int | None = None,
        seed: int | None = None,
        admissible: bool = False,
        timeout: float | None = None,
    ) -> types.SessionStart:
        return self.client_for(session_id).reset_session(
            session_id, task_id=task_id, split=split, index=index, seed=seed, admissible=admissible, timeout=timeout
        )

    def step(
        self, session_id: str, action: str, *, admissible: bool = False, timeout: float | None = None
    ) -> types.StepResult:
        return self.client_for(session_id).step(session_id, action, admissible=admissible, timeout=timeout)

    def step_many(
        self, steps: Sequence[tuple[str, str]], *, admissible: bool = False, timeout: float | None = None
    ) -> list[types.StepResult | EnvhubError]:
        """`EnvhubClient.step_many(..., return_errors=True)` across replicas: one stream round per replica,
        the rounds run in parallel; results (or errors, e.g. UNKNOWN_REPLICA) in `steps` order."""
        results: list[types.StepResult | EnvhubError | None] = [None] * len(steps)
        rounds: dict[str, list[int]] = {}
        for position, (session_id, _) in enumerate(steps):
            try:
                rounds.setdefault(self.client_for(session_id).replica_id, []).append(position)
            except EnvhubError as exc:
                results[position] = exc

        def play(replica: str) -> None:
            positions = rounds[replica]
            answers = self._clients[replica].step_many(
                [steps[p] for p in positions], admissible=admissible, timeout=timeout, return_errors=True
            )
            for position, answer in zip(positions, answers, strict=True):
                results[position] = answer

        with ThreadPoolExecutor(max_workers=max(1, len(rounds))) as executor:
            list(executor.map(play, rounds))
        return [result for result in results if result is not None]

    def close_session(self, session_id: str, timeout: float | None = None) -> None:
        client = self.client_for(session_id)
        client.close_session(session_id, timeout=timeout)
        self._load[client.replica_id] = max(0, self._load[client.replica_id] - 1)

    def expert_actions(self, session_id: str, timeout: float | None = None) -> list[str]:
        return self.client_for(session_id).expert_actions(session_id, timeout=timeout)

    def snapshot(self, session_id: str, timeout: float | None = None) -> types.Snapshot:
        return self.client_for(session_id).snapshot(session_id, timeout=timeout)

    def restore(
        self, snapshot: types.Snapshot | bytes, *, admissible: bool = False, timeout: float | None = None
    ) -> types.SessionStart:
        """Restore on the least-loaded replica serving the snapshot's environment (any replica for bare bytes)."""
        data = snapshot.data if isinstance(snapshot, types.Snapshot) else snapshot
        replica = self._place(snapshot.environment if isinstance(snapshot, types.Snapshot) else None)
        start = self._clients[replica].restore(data, admissible=admissible, timeout=timeout)
        self._load[replica] += 1
        return start

    def fork(self, session_id: str, count: int = 1, timeout: float | None = None) -> list[str]:
        client = self.client_for(session_id)
        ids = client.fork(session_id, count, timeout=timeout)
        self._load[client.replica_id] += len(ids)
        return ids

    def close(self) -> None:
        for client in self._clients.values():
            client.close()

    def __enter__(self) -> EnvhubPool:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
