"""Channel settings shared by the sync and asyncio clients: TLS, token metadata, size caps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]

Tls = bool | str | bytes | None
"""None/False: plaintext; True: TLS with the system roots; str: a CA file path; bytes: CA PEM."""


def credentials(tls: Tls) -> grpc.ChannelCredentials | None:
    """Channel credentials for `tls`, or None for a plaintext channel."""
    if tls is None or tls is False:
        return None
    if tls is True:
        return grpc.ssl_channel_credentials()
    roots = tls if isinstance(tls, bytes) else Path(tls).read_bytes()
    return grpc.ssl_channel_credentials(root_certificates=roots)


def call_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The `authorization: Bearer` metadata for a shared token (empty without one)."""
    return (("authorization", f"Bearer {token}"),) if token else ()


def open_channel(api: Any, target: str, tls: Tls) -> Any:
    """A channel to `target` from `api` (`grpc` or `grpc.aio`), plaintext or TLS, with the size caps."""
    creds = credentials(tls)
    if creds is None:
        return api.insecure_channel(target, options=OPTIONS)
    return api.secure_channel(target, creds, options=OPTIONS)
