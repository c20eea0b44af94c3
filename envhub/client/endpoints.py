"""Replica addresses from a list of targets, where a DNS name may stand for many replicas.

`expand(["dns:///envhub-alfworld.envhub.svc.cluster.local:50051"])` returns one "ip:port" per
address the name resolves to (a Kubernetes headless Service answers every ready replica), so a
`PoolTransport` gets one channel per replica; plain "host:port" targets are kept as they are.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

DNS_PREFIX = "dns:///"


def expand(targets: Sequence[str], family: socket.AddressFamily = socket.AF_INET) -> list[str]:
    """`targets` with each "dns:///host:port" replaced by every address of host (in resolver order, once)."""
    expanded: list[str] = []
    for target in targets:
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
