"""Channel settings shared by the sync and asyncio clients: TLS, token metadata, size caps."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]


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


def open_channel(api: Any, target: str, tls: Tls) -> Any:
    """A channel to `target` from `api` (`grpc` or `grpc.aio`), plaintext or TLS, with the size caps."""
    creds = credentials(tls)
    if creds is None:
        return api.insecure_channel(target, options=OPTIONS)
    return api.secure_channel(target, creds, options=OPTIONS)
