"""Snapshot signing without a server: round trip, and every kind of bad bytes is INVALID_ARGUMENT."""

from __future__ import annotations

import grpc
import pytest

from envhub.core.environment import Observation
from envhub.core.errors import EnvhubError
from envhub.core.session import SessionState, observation_digest
from envhub.server.snapshots import SnapshotSigner, to_wire
from envhub.v1 import snapshot_pb2 as spb

STATE = SessionState(
    environment="scienceworld",
    environment_version="1.2.3+envhub.1",
    task_id="boil/0",
    seed=7,
    options={"simplifications": "easy"},
    max_steps=100,
    step_index=2,
    actions=("open door to kitchen", "go to kitchen"),
    digests=(observation_digest("The door is now open."), observation_digest("You move to the kitchen.")),
    reset_digest=observation_digest("This room is called the hallway."),
    last_observation=Observation("You move to the kitchen.", "Boil water.", 0.0, {"moves": 2.0, "task": "boil"}),
    done=False,
)
SIGNER = SnapshotSigner(b"k" * 32)


def test_round_trip_keeps_every_field() -> None:
    assert SIGNER.verify(SIGNER.sign(STATE)) == STATE


def _reason(data: bytes, signer: SnapshotSigner = SIGNER) -> str:
    with pytest.raises(EnvhubError) as caught:
        signer.verify(data)
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    return caught.value.reason


def test_bad_bytes_are_invalid_argument() -> None:
    good = SIGNER.sign(STATE)
    envelope = spb.SignedSnapshot.FromString(good)
    tampered = spb.SignedSnapshot(
        state=envelope.state.replace(b"boil/0", b"boil/1"), signature=envelope.signature, key_id=envelope.key_id
    )
    assert _reason(b"") == "SNAPSHOT_MALFORMED"
    assert _reason(b"\xff\xff\xff garbage") in ("SNAPSHOT_MALFORMED", "SNAPSHOT_KEY_UNKNOWN")
    assert _reason(good[:-5]) in ("SNAPSHOT_MALFORMED", "SNAPSHOT_KEY_UNKNOWN", "SNAPSHOT_SIGNATURE")
    assert _reason(tampered.SerializeToString()) == "SNAPSHOT_SIGNATURE"
    assert _reason(good, SnapshotSigner(b"another-key-of-32-bytes-long!!!!")) == "SNAPSHOT_KEY_UNKNOWN"


def test_the_key_id_is_signed_and_rotation_accepts_old_keys() -> None:
    old, new = b"o" * 32, b"n" * 32
    from_old = SnapshotSigner(old).sign(STATE)
    rotated = SnapshotSigner(new, accepted=[old])
    assert rotated.verify(from_old) == STATE  # old snapshots still restore during the rotation
    assert _reason(rotated.sign(STATE), SnapshotSigner(old)) == "SNAPSHOT_KEY_UNKNOWN"  # new key not accepted there
    relabelled = spb.SignedSnapshot.FromString(from_old)
    relabelled.key_id = rotated.key_id  # claims the new key: the signature covers the key id
    assert _reason(relabelled.SerializeToString(), SnapshotSigner(new, accepted=[old])) == "SNAPSHOT_SIGNATURE"
    assert rotated.accepted_key_ids == [rotated.key_id, SnapshotSigner(old).key_id]


def test_unknown_format_is_refused_even_when_signed() -> None:
    message = to_wire(STATE)
    message.format = 99
    payload = message.SerializeToString()
    signature = SIGNER._mac(b"k" * 32, SIGNER.key_id, payload)
    signed = spb.SignedSnapshot(state=payload, signature=signature, key_id=SIGNER.key_id).SerializeToString()
    assert _reason(signed) == "SNAPSHOT_FORMAT"


def test_key_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVHUB_SNAPSHOT_KEY", "a-shared-key-for-two-replicas")
    first, second = SnapshotSigner.from_sources(None), SnapshotSigner.from_sources(None)
    assert second.verify(first.sign(STATE)) == STATE
    monkeypatch.delenv("ENVHUB_SNAPSHOT_KEY")
    with pytest.raises(EnvhubError):  # random keys: each process signs alone
        SnapshotSigner.from_sources(None).verify(first.sign(STATE))
