"""Restores across environment versions, on real servers on loopback: the toy kind reporting version 1 on one
server and version 2 on others (the same dynamics, or an observation text that changes from count 2 on), all
sharing one snapshot key. A snapshot of version 1 restores on version 2 when its action log replays to the same
digests there (the session then goes on as an undisturbed one), else it is refused naming the diverged step;
a server configured so refuses every other version, and an unknown key is refused whatever the version."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import grpc
import pytest

from envhub.client import EnvhubClient, EnvhubError, types
from envhub.core.environment import Observation
from envhub.core.session import SessionState, observation_digest
from envhub.server.background import BackgroundServer
from envhub.server.snapshots import SnapshotSigner
from envhub.testing import REFERENCE

TASK = "train-count/1"
SEED = 3


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, EnvhubClient]]:
    """Clients of: "A" (version 1), "B" (version 2, same dynamics), "changed" (version 2, text changed from count
    2 on), "strict" (version 2, cross-version restore off)."""
    key = tmp_path_factory.mktemp("key") / "snapshot.key"
    key.write_bytes(b"cross-version-test-key-shared-by-all")
    settings = {
        "A": ({}, True),
        "B": ({"version": "2"}, True),
        "changed": ({"version": "2", "changed_at": 2}, True),
        "strict": ({"version": "2"}, False),
    }
    with contextlib.ExitStack() as stack:
        clients = {}
        for name, (config, cross) in settings.items():
            server = stack.enter_context(
                BackgroundServer.local(
                    REFERENCE,
                    environment_config={REFERENCE: config},
                    snapshot_key_file=str(key),
                    cross_version_restore=cross,
                )
            )
            clients[name] = stack.enter_context(EnvhubClient(server.target))
        yield clients


def _played(client: EnvhubClient, steps: int) -> tuple[str, types.Snapshot]:
    session = client.create_session("toy", TASK, seed=SEED).session_id
    for _ in range(steps):
        client.step(session, "count")
    return session, client.snapshot(session)


def _refused(client: EnvhubClient, snapshot: types.Snapshot) -> EnvhubError:
    with pytest.raises(EnvhubError) as refused:
        client.restore(snapshot)
    return refused.value


def test_a_snapshot_restores_on_another_version_when_its_replay_verifies(servers: dict[str, EnvhubClient]) -> None:
    twin, snapshot = _played(servers["A"], 3)
    assert snapshot.environment_version == "1"
    moved = servers["B"].restore(snapshot).view
    assert (moved.step_index, moved.text) == (3, f"{TASK} seed {SEED}: 3")
    for action in ("count", "count", "win"):
        assert servers["B"].step(moved.session_id, action) == servers["A"].step(twin, action), action
    again = servers["B"].snapshot(moved.session_id)
    assert (again.environment_version, again.step_index) == ("2", 6), "it is now a session of version 2"


def test_a_replay_that_diverges_on_the_other_version_is_refused_naming_the_step(
    servers: dict[str, EnvhubClient],
) -> None:
    _, snapshot = _played(servers["A"], 3)
    refused = _refused(servers["changed"], snapshot)
    assert (refused.code, refused.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "VERSION_DIVERGED")
    assert refused.metadata == {"step": "2", "task_id": TASK, "snapshot_version": "1", "version": "2"}
    assert "diverged at step 2" in refused.message
    # Before the step where the versions differ, the replay verifies: the session goes on under version 2's rules.
    _, early = _played(servers["A"], 1)
    moved = servers["changed"].restore(early).view
    assert servers["changed"].step(moved.session_id, "count").text == f"{TASK} seed {SEED}: 2 (changed)"


def test_a_server_configured_so_refuses_every_other_version(servers: dict[str, EnvhubClient]) -> None:
    _, snapshot = _played(servers["A"], 2)
    refused = _refused(servers["strict"], snapshot)
    assert (refused.code, refused.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "SNAPSHOT_MISMATCH")
    assert "restores no other version" in refused.message
    _, same = _played(servers["B"], 2)
    assert servers["strict"].restore(same).view.step_index == 2, "its own version still restores"


def test_a_snapshot_signed_with_an_unknown_key_is_refused_whatever_its_version(
    servers: dict[str, EnvhubClient],
) -> None:
    text = f"{TASK} seed {SEED}: 0"
    state = SessionState(
        environment="toy",
        environment_version="1",
        task_id=TASK,
        seed=SEED,
        options={},
        max_steps=20,
        step_index=0,
        actions=(),
        digests=(),
        reset_digest=observation_digest(text),
        last_observation=Observation(text),
        done=False,
    )
    forged = SnapshotSigner(b"a-key-no-server-here-accepts-at-all").sign(state)
    refused = _refused(servers["B"], types.Snapshot(forged, 0, "toy", "1"))
    assert (refused.code, refused.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "SNAPSHOT_KEY_UNKNOWN")
