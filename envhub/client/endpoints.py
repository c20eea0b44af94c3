"""Replica addresses from a list of targets, where a DNS name may stand for many replicas.

`expand(["dns:///envhub-alfworld.envhub.svc.cluster.local:50051"])` returns one "ip:port" per
address the name resolves to (a Kubernetes headless Service answers every ready replica), so a
`PoolTransport` gets one channel per replica; gRPC's address lists ("ipv4:10.0.0.1:50051,
10.0.0.2:50051", "ipv6:[::1]:50051,...") stand for each of their addresses; plain "host:port"
targets are kept as they are. `replicas(target)` says whether a target names several replicas.
A `Discovery` lets a pool expand its targets again later, so replicas started since join it.
"""

from __future__ import annotations

import functools
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from envhub.client.transport import ChannelTransport

DNS_PREFIX = "dns:///"
LIST_PREFIXES = ("ipv4:", "ipv6:")
"""gRPC's address-list schemes: "ipv4:host:port,host:port"."""
REFRESH_S = 30.0
"""Default seconds between two re-resolutions of a pool's targets (besides one after each retired replica)."""


def expand(targets: Sequence[str], family: socket.AddressFamily = socket.AF_INET) -> list[str]:
    """`targets` with each "dns:///host:port" replaced by every address of host (in resolver order, once)."""
    expanded: list[str] = []
    for target in targets:
        if target.startswith(LIST_PREFIXES):
            expanded += [address for address in target.split(":", 1)[1].split(",") if address not in expanded]
            continue
        if not target.startswith(DNS_PREFIX):
            expanded.append(target)
            continue
        host, _, port = target.removeprefix(DNS_PREFIX).rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"{target!r} is not dns:///host:port")
        for info in socket.getaddrinfo(host, int(port), family, socket.SOCK_STREAM):
            address = str(info[4][0])
            name = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
            if name not in expanded:
                expanded.append(name)
    return expanded


@dataclass(frozen=True)
class Discovery:
    """How a `PoolTransport` finds replicas again after it started.

    `resolve()` returns the replica addresses now (`resolver(targets)`: `expand` again);
    `connect(address)` opens a transport to one. The pool re-resolves when it retires a
    replica, and before placing a new session once `refresh_s` seconds of `clock` have
    passed since it last did.
    """

    resolve: Callable[[], Sequence[str]]
    connect: Callable[[str], ChannelTransport]
    refresh_s: float = REFRESH_S
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        if self.refresh_s < 0:
            raise ValueError(f"refresh_s must be at least 0 seconds, not {self.refresh_s}")


def several(target: str) -> bool:
    """Whether `target` may stand for more than one replica: a DNS name (replicas come and go behind
    it) or an address list of several addresses."""
    return target.startswith(DNS_PREFIX) or len(expand([target])) > 1


def resolver(targets: Sequence[str]) -> Callable[[], list[str]]:
    """A `Discovery.resolve` that expands `targets` (their DNS names looked up again) on each call."""
    return functools.partial(expand, list(targets))
