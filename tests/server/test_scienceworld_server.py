"""A real ScienceWorld server on loopback: episodes, snapshots, forks, streams, compliance."""

from __future__ import annotations

import queue
from collections.abc import Iterator

import grpc
import pytest
from google.rpc import error_details_pb2

from envhub.client import EnvhubClient, EnvhubError
from envhub.compliance import ComplianceSpec, run_all
from envhub.core.registry import kind_class
from envhub.core.session import Session
from envhub.server.background import BackgroundServer
from envhub.server.snapshots import SnapshotSigner, to_wire
from envhub.v1 import envhub_pb2 as pb
from envhub.v1 import envhub_pb2_grpc as pb_grpc
from envhub.v1 import snapshot_pb2 as spb

MAX_SESSIONS = 8
KEY = b"test-snapshot-key-0123456789abcdef"
ACTIONS = {
    "boil/0": ["open door to kitchen", "go to kitchen", "look around", "pick up thermometer"],
    "chemistry-mix/0": ["open door to kitchen", "go to kitchen", "open cupboard", "pick up ceramic cup"],
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackgroundServer]:
    key_file = tmp_path_factory.mktemp("keys") / "snapshot.key"
    key_file.write_bytes(KEY)
    with BackgroundServer.local("scienceworld", max_sessions=MAX_SESSIONS, snapshot_key_file=str(key_file)) as s:
        yield s


@pytest.fixture(scope="module")
def client(server: BackgroundServer) -> Iterator[EnvhubClient]:
    with EnvhubClient(server.target) as c:
        yield c


def test_discovery(client: EnvhubClient, server: BackgroundServer) -> None:
    [info] = client.list_environments()
    assert info.name == "scienceworld" and client.replica_id() == server.replica_id
    assert info.capabilities.expert and info.capabilities.admissible_actions
    train = client.list_tasks("scienceworld", "train")
    assert len(train) == info.splits["train"] and train[0].index == 0
    assert len(client.list_tasks("scienceworld")) == sum(info.splits.values())  # several pages


def test_episode_over_grpc_equals_in_process(client: EnvhubClient) -> None:
    kind = kind_class("scienceworld")()
    try:
        local = Session.start(kind, kind.task("boil/0"), seed=3)
        remote = client.create_session("scienceworld", task="boil/0", seed=3, admissible=True)
        assert remote.view.text == local.observation.text
        assert remote.view.task_description == local.observation.task_description
        assert set(remote.view.admissible or ()) == set(local.admissible_actions())
        for action in [*ACTIONS["boil/0"], "not a real action", "focus on thermometer"]:
            want = local.step(action)
            got = client.step(remote.session_id, action)
            assert got.text == want.result.observation.text
            assert (got.reward, got.terminated, got.won) == (want.result.reward, want.done, want.result.won)
            assert got.score == want.result.observation.score
            assert got.step_index == want.step_index
        assert got.terminated  # focusing on the wrong thing ends a ScienceWorld episode
        client.close_session(remote.session_id)
        local.close()
    finally:
        kind.close()


def test_compliance(client: EnvhubClient) -> None:
    run_all(client, ComplianceSpec("scienceworld", ACTIONS, max_sessions=MAX_SESSIONS))


def test_replay_divergence_is_reported_over_the_wire(client: EnvhubClient) -> None:
    start = client.create_session("scienceworld", task="boil/0")
    client.step(start.session_id, "open door to kitchen")
    signer = SnapshotSigner(KEY)
    state = signer.verify(client.snapshot(start.session_id).data)
    wrong = to_wire(state)
    wrong.action_log[0].observation_digest = b"\x00" * 16  # a recorded observation the replay cannot produce
    forged = spb.SignedSnapshot(state=wrong.SerializeToString(), key_id=signer.key_id)
    forged.signature = signer._mac(KEY, signer.key_id, forged.state)
    with pytest.raises(EnvhubError) as caught:
        client.restore(forged.SerializeToString())
    assert caught.value.code == grpc.StatusCode.FAILED_PRECONDITION and caught.value.reason == "REPLAY_DIVERGED"
    assert caught.value.metadata["step"] == "1"
    assert client.step(start.session_id, "go to kitchen").text  # nothing else changed
    client.close_session(start.session_id)


def test_session_stream_multiplexes_and_survives_errors(server: BackgroundServer, client: EnvhubClient) -> None:
    requests: queue.Queue[pb.SessionStreamRequest | None] = queue.Queue()
    create = pb.CreateSessionRequest(environment="scienceworld", task=pb.TaskSelector(task_id="boil/0"))
    for call_id in (1, 2):
        requests.put(pb.SessionStreamRequest(call_id=call_id, create=create))

    def feed() -> Iterator[pb.SessionStreamRequest]:
        while (item := requests.get()) is not None:
            yield item

    with grpc.insecure_channel(server.target) as channel:
        responses = pb_grpc.EnvHubStub(channel).SessionStream(feed())
        created = {response.call_id: response.create.session_id for response in (next(responses) for _ in range(2))}
        assert set(created) == {1, 2}
        sessions = [created[1], created[2]]
        requests.put(pb.SessionStreamRequest(call_id=3, step=pb.StepRequest(session_id="nosuch.x", action="look")))
        for offset, action in enumerate(ACTIONS["boil/0"][:2]):
            for number, session_id in enumerate(sessions):
                step = pb.StepRequest(session_id=session_id, action=action)
                requests.put(pb.SessionStreamRequest(call_id=10 + 2 * offset + number, step=step))
        answers = {response.call_id: response for response in (next(responses) for _ in range(5))}
        assert answers[3].error.code == grpc.StatusCode.NOT_FOUND.value[0]
        [detail] = answers[3].error.details  # a full google.rpc.Status, as unary calls carry
        info = error_details_pb2.ErrorInfo()
        assert detail.Unpack(info) and info.reason == "SESSION_NOT_FOUND" and info.domain == "envhub.dev"
        texts = {rid: answers[rid].step.result.observation.text for rid in (10, 11, 12, 13)}
        assert texts[10] == texts[11] and texts[12] == texts[13]  # same task and seed, same story
        for number, session_id in enumerate(sessions):
            requests.put(
                pb.SessionStreamRequest(call_id=20 + number, close=pb.CloseSessionRequest(session_id=session_id))
            )
        closes = [next(responses) for _ in range(2)]
        assert all(response.HasField("close") for response in closes)
        requests.put(None)
        assert list(responses) == []
