"""Channel settings shared by the sync and asyncio clients: TLS, token metadata, size caps, liveness."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from envhub.core.status import MIN_KEEPALIVE_S

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]


@dataclass(frozen=True)
class Liveness:
    """How soon a channel finds its server gone (docs/protocol.md, "Connections").

    Two kinds of gone, told apart by who stops answering. A node that vanished without closing its
    connections (node loss, a pulled cable) no longer acknowledges TCP: with keepalive pings every
    `keepalive_s` there is always data in flight, and gRPC sets TCP_USER_TIMEOUT to
    `keepalive_timeout_s`, so the kernel drops the connection within about `keepalive_s +
    keepalive_timeout_s`, also while no call is in flight. A server process that is there but answers
    nothing (frozen, deadlocked) still has its kernel acknowledge TCP; it is found when a ping goes
    unanswered for `ping_timeout_s`, which must be long: a busy server on a loaded machine answers
    pings late (1 s failed a live replica under load 8 on 2 cores, measured). Either way the calls on
    the connection fail UNAVAILABLE then, not at their deadlines. A new connection that is not up
    within `connect_timeout_s` (an address nothing answers at) fails too, and so do the calls waiting
    for it (calls are not `wait_for_ready`). gRPC's defaults: no keepalive, a 60 s ping timeout, a 20 s
    connect timeout.
    """

    connect_timeout_s: float = 2.0
    """Give up a connection attempt (TCP, TLS, and the server's HTTP/2 settings) after this long: a
    connect to a live server takes milliseconds, its settings come late only when it is very busy."""
    keepalive_s: float = 1.0
    """Ping the server after this long without a ping, also with no call in flight (at least
    `MIN_KEEPALIVE_S`): a ping is 17 bytes each way."""
    keepalive_timeout_s: float = 1.0
    """Drop the connection when data sent (a ping, a request) is not acknowledged by the peer's TCP
    within this long (TCP_USER_TIMEOUT): a live node's kernel acknowledges in well under that, however
    busy its processes are; a data-centre network retransmits a lost packet within it."""
    ping_timeout_s: float = 20.0
    """Drop the connection when the server process answers no ping for this long (frozen or stuck)."""

    def __post_init__(self) -> None:
        timeouts = (self.keepalive_timeout_s, self.ping_timeout_s, self.connect_timeout_s)
        if self.keepalive_s < MIN_KEEPALIVE_S or min(timeouts) <= 0:
            raise ValueError(
                f"Liveness needs keepalive_s >= {MIN_KEEPALIVE_S} (servers refuse pings more often) and positive "
                f"timeouts; got {self}"
            )

    def options(self) -> list[tuple[str, int]]:
        """The gRPC channel arguments: keepalive (its timeout is gRPC's TCP_USER_TIMEOUT; an unanswered
        ping is timed by the ping timeout), and the connect deadline (gRPC's minimum connect timeout,
        and the first reconnect backoff, which the first attempt's deadline may not undercut)."""
        connect_ms = round(self.connect_timeout_s * 1000)
        return [
            ("grpc.keepalive_time_ms", round(self.keepalive_s * 1000)),
            ("grpc.keepalive_timeout_ms", round(self.keepalive_timeout_s * 1000)),
            ("grpc.http2.ping_timeout_ms", round(self.ping_timeout_s * 1000)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.min_reconnect_backoff_ms", connect_ms),
            ("grpc.initial_reconnect_backoff_ms", connect_ms),
        ]


DEFAULT_LIVENESS = Liveness()


def _pem(source: str | bytes) -> bytes:
    """PEM bytes as given, or read from the file a str names."""
    return source if isinstance(source, bytes) else Path(source).read_bytes()


@dataclass(frozen=True)
class MutualTls:
    """TLS with a client certificate, for a server started with `--tls-client-ca` (mutual TLS).

    Each field is PEM bytes or the path of a PEM file. The certificate's names (subject CN, DNS
    SANs) may identify a tenant of the server's tenants file.
    """

    certificate: str | bytes
    """The client's certificate chain."""
    key: str | bytes
    """The client certificate's private key."""
    roots: str | bytes | None = None
    """The CA that signed the server's certificate (None: the system roots)."""


Tls = bool | str | bytes | MutualTls | None
"""None/False: plaintext; True: TLS with the system roots; str: a CA file path; bytes: CA PEM;
`MutualTls`: TLS with a client certificate."""


def credentials(tls: Tls) -> grpc.ChannelCredentials | None:
    """Channel credentials for `tls`, or None for a plaintext channel."""
    if tls is None or tls is False:
        return None
    if tls is True:
        return grpc.ssl_channel_credentials()
    if isinstance(tls, MutualTls):
        roots = None if tls.roots is None else _pem(tls.roots)
        return grpc.ssl_channel_credentials(roots, _pem(tls.key), _pem(tls.certificate))
    return grpc.ssl_channel_credentials(root_certificates=_pem(tls))


def call_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The `authorization: Bearer` metadata for a shared token (empty without one)."""
    return (("authorization", f"Bearer {token}"),) if token else ()


def open_channel(api: Any, target: str, tls: Tls, liveness: Liveness = DEFAULT_LIVENESS) -> Any:
    """A channel to `target` from `api` (`grpc` or `grpc.aio`), plaintext or TLS, with the size caps,
    keepalive and connect deadline of `liveness`."""
    creds = credentials(tls)
    options = OPTIONS + liveness.options()
    if creds is None:
        return api.insecure_channel(target, options=options)
    return api.secure_channel(target, creds, options=options)
