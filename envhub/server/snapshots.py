"""Signed snapshots: `SessionState` <-> `SnapshotState` bytes wrapped in an HMAC-signed envelope.

Bytes from the wire are only ever parsed as protobuf, and only after the HMAC-SHA256
signature verifies. The signature covers the key id as well as the state. A server signs
with one key and accepts a list of keys (the signing key plus older ones during a rotation),
looked up by the envelope's key id; replicas share them through `--snapshot-key-file` (or
ENVHUB_SNAPSHOT_KEY) and `--snapshot-accept-key-file`.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
from collections.abc import Sequence
from pathlib import Path

from google.protobuf.message import DecodeError

from envhub.core import errors
from envhub.core.session import SessionState
from envhub.server import convert
from envhub.v1 import snapshot_pb2 as spb

FORMAT = 1
"""The `SnapshotState.format` this module writes and reads."""
KEY_ENV_VAR = "ENVHUB_SNAPSHOT_KEY"
MIN_KEY_BYTES = 16
_DOMAIN = b"envhub-snapshot-v1\x00"
log = logging.getLogger(__name__)


def key_id(key: bytes) -> str:
    """The public identifier of a key: 12 hex digits of SHA-256("envhub-key-id:" + key)."""
    return hashlib.sha256(b"envhub-key-id:" + key).hexdigest()[:12]


def _read_key(path: str) -> bytes:
    key = Path(path).read_bytes().strip()
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"the snapshot key in {path} must have at least {MIN_KEY_BYTES} bytes")
    return key


class SnapshotSigner:
    """Signs with one HMAC-SHA256 key; verifies with any accepted key, chosen by the signed key id."""

    def __init__(self, key: bytes, accepted: Sequence[bytes] = ()) -> None:
        for candidate in (key, *accepted):
            if len(candidate) < MIN_KEY_BYTES:
                raise ValueError(f"a snapshot key must have at least {MIN_KEY_BYTES} bytes")
        self._key = key
        self.key_id = key_id(key)
        self._accepted = {key_id(candidate): candidate for candidate in (key, *accepted)}

    @property
    def accepted_key_ids(self) -> list[str]:
        """Ids of every key this signer verifies with (the signing key's first)."""
        return list(self._accepted)

    @classmethod
    def from_sources(cls, key_file: str | None, accept_files: Sequence[str] = ()) -> SnapshotSigner:
        """The signing key from `key_file`, else ENVHUB_SNAPSHOT_KEY, else a random one (logged);
        the keys of `accept_files` are accepted as well (the previous keys of a rotation)."""
        accepted = [_read_key(path) for path in accept_files]
        if key_file:
            return cls(_read_key(key_file), accepted)
        env_key = os.environ.get(KEY_ENV_VAR, "")
        if env_key:
            return cls(env_key.encode("utf-8"), accepted)
        log.warning(
            "no snapshot key given (--snapshot-key-file or %s): using a random key, so snapshots "
            "only restore on this server process",
            KEY_ENV_VAR,
        )
        return cls(secrets.token_bytes(32), accepted)

    @staticmethod
    def _mac(key: bytes, key_name: str, payload: bytes) -> bytes:
        message = _DOMAIN + key_name.encode("ascii") + b"\x00" + payload
        return hmac.new(key, message, hashlib.sha256).digest()

    def sign(self, state: SessionState) -> bytes:
        """A serialized `SignedSnapshot` of `state`."""
        payload = to_wire(state).SerializeToString(deterministic=True)
        signature = self._mac(self._key, self.key_id, payload)
        return spb.SignedSnapshot(state=payload, signature=signature, key_id=self.key_id).SerializeToString()

    def verify(self, data: bytes) -> SessionState:
        """The `SessionState` inside signed snapshot bytes; INVALID_ARGUMENT if anything is wrong."""
        if not data:
            raise errors.invalid_argument("the snapshot is empty", "SNAPSHOT_MALFORMED")
        envelope = spb.SignedSnapshot()
        try:
            envelope.ParseFromString(data)
        except DecodeError as exc:
            raise errors.invalid_argument("the bytes are not an envhub snapshot", "SNAPSHOT_MALFORMED") from exc
        key = self._accepted.get(envelope.key_id)
        if key is None:
            raise errors.invalid_argument(
                "the snapshot was signed with a key this server does not accept (replicas must share "
                "--snapshot-key-file / ENVHUB_SNAPSHOT_KEY; add old keys with --snapshot-accept-key-file)",
                "SNAPSHOT_KEY_UNKNOWN",
                key_id=envelope.key_id[:64],
            )
        if not hmac.compare_digest(self._mac(key, envelope.key_id, envelope.state), envelope.signature):
            raise errors.invalid_argument(
                "the snapshot signature does not verify: it was altered or truncated", "SNAPSHOT_SIGNATURE"
            )
        message = spb.SnapshotState()
        try:
            message.ParseFromString(envelope.state)
        except DecodeError as exc:  # signed by us, so only a bug gets here
            raise errors.invalid_argument("the signed snapshot state does not parse", "SNAPSHOT_MALFORMED") from exc
        if message.format != FORMAT:
            raise errors.invalid_argument(
                f"snapshot format {message.format} is not supported (this server reads {FORMAT})", "SNAPSHOT_FORMAT"
            )
        return from_wire(message)


def to_wire(state: SessionState) -> spb.SnapshotState:
    """`SessionState` -> `SnapshotState`."""
    return spb.SnapshotState(
        format=FORMAT,
        environment=state.environment,
        environment_version=state.environment_version,
        task_id=state.task_id,
        seed=state.seed,
        options=dict(state.options),
        max_steps=state.max_steps,
        step_index=state.step_index,
        action_log=[
            spb.ReplayStep(action=action, observation_digest=digest)
            for action, digest in zip(state.actions, state.digests, strict=True)
        ],
        reset_digest=state.reset_digest,
        native_state=state.native_state,
        last_observation=convert.observation(state.last_observation, state.step_index),
        done=state.done,
    )


def from_wire(message: spb.SnapshotState) -> SessionState:
    """`SnapshotState` -> `SessionState`."""
    return SessionState(
        environment=message.environment,
        environment_version=message.environment_version,
        task_id=message.task_id,
        seed=message.seed,
        options=dict(message.options),
        max_steps=message.max_steps,
        step_index=message.step_index,
        actions=tuple(step.action for step in message.action_log),
        digests=tuple(step.observation_digest for step in message.action_log),
        reset_digest=message.reset_digest,
        last_observation=convert.observation_from_wire(message.last_observation),
        done=message.done,
        native_state=message.native_state,
    )
