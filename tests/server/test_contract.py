"""The wire contract on a real server hosting the toy kind: exactly-once steps, the error model, drain."""

from __future__ import annotations

import concurrent.futures
import queue
import time
from collections.abc import Iterator

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from envhub.server.background import BackgroundServer
from envhub.testing import REFERENCE, Gate
from envhub.v1 import envhub_pb2 as pb
from envhub.v1 import envhub_pb2_grpc as pb_grpc


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Gate:
    return Gate.create(tmp_path_factory.mktemp("gate"))


@pytest.fixture(scope="module")
def server(gate: Gate) -> Iterator[BackgroundServer]:
    config = {REFERENCE: {"tasks": 3, "gate": str(gate.folder)}}
    with BackgroundServer.local(REFERENCE, environment_config=config) as s:
        yield s


@pytest.fixture(scope="module")
def stub(server: BackgroundServer) -> Iterator[pb_grpc.EnvHubStub]:
    with grpc.insecure_channel(server.target) as channel:
        yield pb_grpc.EnvHubStub(channel)


def _reason(error: grpc.RpcError) -> tuple[grpc.StatusCode, str, dict[str, str]]:
    status = rpc_status.from_call(error)
    assert status is not None, "every error carries a google.rpc.Status"
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    return error.code(), info.reason, dict(info.metadata)


def _fails(call: object, *args: object, **kwargs: object) -> tuple[grpc.StatusCode, str, dict[str, str]]:
    with pytest.raises(grpc.RpcError) as caught:
        call(*args, **kwargs)  # type: ignore[operator]
    return _reason(caught.value)


def _create(stub: pb_grpc.EnvHubStub, **fields: object) -> str:
    request = pb.CreateSessionRequest(environment="toy", task=pb.TaskSelector(task_id="train-count/0"), **fields)
    session_id: str = stub.CreateSession(request, timeout=30).session_id
    return session_id


def test_environment_lists_its_configuration(stub: pb_grpc.EnvHubStub, gate: Gate) -> None:
    [info] = stub.ListEnvironments(pb.ListEnvironmentsRequest(), timeout=30).environments
    assert info.name == "toy" and dict(info.config) == {"tasks": "3", "gate": str(gate.folder)}
    assert list(info.split_sizes) == [3, 3]


def test_a_repeated_request_id_is_answered_from_memory(stub: pb_grpc.EnvHubStub) -> None:
    session = _create(stub)
    first = stub.Step(pb.StepRequest(session_id=session, action="inc", request_id="a"), timeout=30)
    again = stub.Step(pb.StepRequest(session_id=session, action="inc", request_id="a"), timeout=30)
    assert first == again and first.result.observation.step_index == 1
    code, reason, _ = _fails(stub.Step, pb.StepRequest(session_id=session, action="win", request_id="a"), timeout=30)
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_ID_REUSED")
    second = stub.Step(pb.StepRequest(session_id=session, action="inc", request_id="b"), timeout=30)
    assert second.result.observation.step_index == 2
    reset = pb.ResetSessionRequest(session_id=session, request_id="c")
    assert stub.ResetSession(reset, timeout=30) == stub.ResetSession(reset, timeout=30)
    third = stub.Step(pb.StepRequest(session_id=session, action="inc", request_id="a"), timeout=30)
    assert third.result.observation.step_index == 1  # "a" is no longer the last call: applied
    too_long = pb.StepRequest(session_id=session, action="inc", request_id="x" * 129)
    assert _fails(stub.Step, too_long, timeout=30)[:2] == (grpc.StatusCode.INVALID_ARGUMENT, "BAD_REQUEST_ID")
    stub.CloseSession(pb.CloseSessionRequest(session_id=session), timeout=30)


def test_expected_step_index_refuses_a_stale_step(stub: pb_grpc.EnvHubStub) -> None:
    session = _create(stub)
    stub.Step(pb.StepRequest(session_id=session, action="inc", expected_step_index=0), timeout=30)
    code, reason, metadata = _fails(
        stub.Step, pb.StepRequest(session_id=session, action="inc", expected_step_index=0), timeout=30
    )
    assert (code, reason, metadata) == (grpc.StatusCode.FAILED_PRECONDITION, "STEP_INDEX_MISMATCH", {"step_index": "1"})
    ok = stub.Step(pb.StepRequest(session_id=session, action="inc", expected_step_index=1), timeout=30)
    assert ok.result.observation.step_index == 2
    stub.CloseSession(pb.CloseSessionRequest(session_id=session), timeout=30)


@pytest.mark.parametrize(
    "payload",
    [b"\xff\xfe garbage", b"\x12\x02\xff\xfe", b"\x12\x03\xed\xa0\x80", b"\x0a\x05ab"],
    ids=["garbage", "bad-utf8", "lone-surrogate", "truncated"],
)
def test_malformed_bytes_are_invalid_argument(server: BackgroundServer, payload: bytes) -> None:
    with grpc.insecure_channel(server.target) as channel:
        raw = channel.unary_unary("/envhub.v1.EnvHub/Step")
        code, reason, _ = _fails(raw, payload, timeout=30)
        assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "MALFORMED_REQUEST")
        stream = channel.stream_stream("/envhub.v1.EnvHub/SessionStream")
        code, reason, _ = _fails(lambda: list(stream(iter([payload]), timeout=30)))
        assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "MALFORMED_REQUEST")


@pytest.mark.parametrize("token", [" 3", "٣", "03", "-1", "3.0", "99999999999", "x", "6"])
def test_page_token_accepts_only_what_the_server_issued(stub: pb_grpc.EnvHubStub, token: str) -> None:
    request = pb.ListTasksRequest(environment="toy", page_size=2, page_token=token)
    assert _fails(stub.ListTasks, request, timeout=30)[:2] == (grpc.StatusCode.INVALID_ARGUMENT, "BAD_PAGE_TOKEN")


def test_pages_follow_the_issued_tokens(stub: pb_grpc.EnvHubStub) -> None:
    first = stub.ListTasks(pb.ListTasksRequest(environment="toy", page_size=4), timeout=30)
    rest = stub.ListTasks(pb.ListTasksRequest(environment="toy", page_token=first.next_page_token), timeout=30)
    assert [t.task_id for t in [*first.tasks, *rest.tasks]] == [
        f"{s}-count/{i}" for s in ("train", "test") for i in range(3)
    ]
    assert rest.next_page_token == "" and first.total_size == 6


@pytest.mark.parametrize("value", ["1e309", "inf", "nan", "-1e7", "ten"])
def test_options_take_only_finite_in_range_values(stub: pb_grpc.EnvHubStub, value: str) -> None:
    request = pb.CreateSessionRequest(
        environment="toy", task=pb.TaskSelector(task_id="train-count/0"), options={"success_reward": value}
    )
    assert _fails(stub.CreateSession, request, timeout=30)[:2] == (grpc.StatusCode.INVALID_ARGUMENT, "BAD_OPTION")


def test_snapshot_response_names_environment_and_step(stub: pb_grpc.EnvHubStub) -> None:
    session = _create(stub)
    stub.Step(pb.StepRequest(session_id=session, action="inc"), timeout=30)
    snapshot = stub.CreateSnapshot(pb.CreateSnapshotRequest(session_id=session), timeout=30)
    assert (snapshot.environment, snapshot.environment_version, snapshot.step_index) == ("toy", "1", 1)
    restored = stub.RestoreSnapshot(pb.RestoreSnapshotRequest(snapshot=snapshot.snapshot), timeout=30)
    assert restored.observation.text == "train-count/0 seed 0: 1"
    for sid in (session, restored.session_id):
        stub.CloseSession(pb.CloseSessionRequest(session_id=sid), timeout=30)


def test_drain_refuses_every_call_with_draining_and_finishes_in_flight_ones(gate: Gate) -> None:
    config = {REFERENCE: {"gate": str(gate.folder)}}
    server = BackgroundServer.local(REFERENCE, environment_config=config)
    try:
        with grpc.insecure_channel(server.target) as channel:
            stub = pb_grpc.EnvHubStub(channel)
            health = health_pb2_grpc.HealthStub(channel)
            session = _create(stub)
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                in_flight = pool.submit(stub.Step, pb.StepRequest(session_id=session, action="wait"), timeout=60)
                gate.wait_entered()  # the step is inside the environment
                requests: queue.Queue[pb.SessionStreamRequest | None] = queue.Queue()
                stream = stub.SessionStream(iter(requests.get, None))  # an open stream, ended by the drain
                requests.put(pb.SessionStreamRequest(call_id=1, close=pb.CloseSessionRequest(session_id="no.such")))
                assert next(stream).error.code == grpc.StatusCode.NOT_FOUND.value[0]  # the stream is open
                drained = pool.submit(server.run, server.server.drain(grace=60))
                answer = health.Check(health_pb2.HealthCheckRequest(service="envhub.v1.EnvHub"), timeout=30)
                while answer.status == health_pb2.HealthCheckResponse.SERVING:  # the drain task has not run yet
                    answer = health.Check(health_pb2.HealthCheckRequest(service="envhub.v1.EnvHub"), timeout=30)
                assert answer.status == health_pb2.HealthCheckResponse.NOT_SERVING
                for call, request in [
                    (stub.ListEnvironments, pb.ListEnvironmentsRequest()),
                    (stub.Step, pb.StepRequest(session_id=session, action="inc")),
                    (stub.CreateSession, pb.CreateSessionRequest(environment="toy")),
                ]:
                    assert _fails(call, request, timeout=30)[:2] == (grpc.StatusCode.UNAVAILABLE, "DRAINING")
                gate.release()
                assert in_flight.result().result.observation.text == "train-count/0 seed 0: 0"  # `wait` counts nothing
                drained.result()
                assert _fails(lambda: list(stream))[:2] == (grpc.StatusCode.UNAVAILABLE, "DRAINING")
                requests.put(None)
    finally:
        server.stop()


def test_the_reaper_closes_idle_sessions_but_not_busy_ones(server: BackgroundServer, gate: Gate) -> None:
    with grpc.insecure_channel(server.target) as channel:
        stub = pb_grpc.EnvHubStub(channel)
        idle, busy = _create(stub), _create(stub)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(stub.Step, pb.StepRequest(session_id=busy, action="wait"), timeout=60)
            gate.wait_entered()  # `busy` has a call in flight
            later = time.monotonic() + server.server.config.idle_timeout_s + 1
            assert server.run(_reap(server, later)) == [idle]
            gate.release()
            assert waiting.result().result.observation.step_index == 1
        assert _fails(stub.Step, pb.StepRequest(session_id=idle, action="inc"), timeout=30)[1] == "SESSION_NOT_FOUND"
        stub.CloseSession(pb.CloseSessionRequest(session_id=busy), timeout=30)


async def _reap(server: BackgroundServer, now: float) -> list[str]:
    return server.server.reap(now)


def test_errors_echoing_huge_input_keep_their_reason(stub: pb_grpc.EnvHubStub) -> None:
    """A 1 MB session id is echoed clipped: the status stays within gRPC's metadata limit."""
    code, reason, metadata = _fails(stub.Step, pb.StepRequest(session_id="x" * (1 << 20), action="inc"), timeout=30)
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")
    assert len(metadata["session_id"]) < 300
