"""Signed snapshots: `SessionState` <-> `SnapshotState` bytes wrapped in an HMAC-signed envelope.

Bytes from the wire are only ever parsed as protobuf, and only after the HMAC-SHA256
signature verifies under the server key (shared by replicas through
`--snapshot-key-file` or ENVHUB_SNAPSHOT_KEY).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
from pathlib import Path

from google.protobuf.message import DecodeError

from envhub.core import errors
from envhub.core.session import SessionState
from envhub.server import convert
from envhub.v1 import envhub_pb2 as pb

FORMAT = 1
"""The `SnapshotState.format` this module writes and reads."""
KEY_ENV_VAR = "ENVHUB_SNAPSHOT_KEY"
log = logging.getLogger(__name__)


class SnapshotSigner:
    """Signs and verifies snapshots with one HMAC-SHA256 key."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("the snapshot key must have at least 16 bytes")
        self._key = key
        self.key_id = hashlib.sha256(b"envhub-key-id:" + key).hexdigest()[:12]

    @classmethod
    def from_sources(cls, key_file: str | None) -> SnapshotSigner:
        """The key from `key_file`, else ENVHUB_SNAPSHOT_KEY, else a random one (logged)."""
        if key_file:
            return cls(Path(key_file).read_bytes().strip())
        env_key = os.environ.get(KEY_ENV_VAR, "")
        if env_key:
            return cls(env_key.encode("utf-8"))
        log.warning(
            "no snapshot key given (--snapshot-key-file or %s): using a random key, so snapshots "
            "only restore on this server process",
            KEY_ENV_VAR,
        )
        return cls(secrets.token_bytes(32))

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).digest()

    def sign(self, state: SessionState) -> bytes:
        """A serialized `SignedSnapshot` of `state`."""
        payload = to_wire(state).SerializeToString(deterministic=True)
        return pb.SignedSnapshot(state=payload, signature=self._mac(payload), key_id=self.key_id).SerializeToString()

    def verify(self, data: bytes) -> SessionState:
        """The `SessionState` inside signed snapshot bytes; INVALID_ARGUMENT if anything is wrong."""
        if not data:
            raise errors.invalid_argument("the snapshot is empty", "SNAPSHOT_MALFORMED")
        envelope = pb.SignedSnapshot()
        try:
            envelope.ParseFromString(data)
        except DecodeError as exc:
            raise errors.invalid_argument("the snapshot bytes are not a SignedSnapshot", "SNAPSHOT_MALFORMED") from exc
        if not hmac.compare_digest(self._mac(envelope.state), envelope.signature):
            raise errors.invalid_argument(
                "the snapshot signature does not verify: it was altered, truncated, or signed with another key "
                "(replicas must share --snapshot-key-file / ENVHUB_SNAPSHOT_KEY)",
                "SNAPSHOT_SIGNATURE",
                key_id=envelope.key_id,
            )
        message = pb.SnapshotState()
        try:
            message.ParseFromString(envelope.state)
        except DecodeError as exc:  # signed by us, so only a bug gets here
            raise errors.invalid_argument("the signed snapshot state does not parse", "SNAPSHOT_MALFORMED") from exc
        if message.format != FORMAT:
            raise errors.invalid_argument(
                f"snapshot format {message.format} is not supported (this server reads {FORMAT})", "SNAPSHOT_FORMAT"
            )
        return from_wire(message)


def to_wire(state: SessionState) -> pb.SnapshotState:
    """`SessionState` -> `SnapshotState`."""
    return pb.SnapshotState(
        format=FORMAT,
        environment=state.environment,
        environment_version=state.environment_version,
        task_id=state.task_id,
        seed=state.seed,
        options=dict(state.options),
        max_steps=state.max_steps,
        step_index=state.step_index,
        action_log=[
            pb.ReplayStep(action=action, observation_digest=digest)
            for action, digest in zip(state.actions, state.digests, strict=True)
        ],
        reset_digest=state.reset_digest,
        native_state=state.native_state,
        last_observation=convert.observation(state.last_observation, state.step_index),
        done=state.done,
    )


def from_wire(message: pb.SnapshotState) -> SessionState:
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
