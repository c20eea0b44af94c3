"""Keepalive and the connect deadline on client channels (`channel.Liveness`), against real `envhub serve`
replicas on loopback. A server stopped with SIGSTOP keeps its sockets open (its kernel still acknowledges
TCP) and answers nothing: calls on it must fail UNAVAILABLE once a ping goes unanswered for
`ping_timeout_s` (1 s here; the default is long, for busy servers) and a new connection must fail at the
connect deadline, not at the calls' deadlines; a failover client must move its sessions off it. (A node
that stops acknowledging TCP is found by TCP_USER_TIMEOUT: that needs a blackholed address, not loopback.)"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

import grpc
import pytest

from envhub.bench.procs import ServerProcess
from envhub.client import EnvhubClient, EnvhubError
from envhub.client.channel import Liveness
from envhub.client.failover import FailoverTransport
from envhub.client.retry import NO_RETRY
from envhub.client.transport import ChannelTransport, Settings
from envhub.testing import REFERENCE
from envhub.v1 import envhub_pb2 as pb
from envhub.v1 import envhub_pb2_grpc as pb_grpc

KEY = "liveness-test-key-shared-by-every-replica"
DEADLINE_S = 30.0
"""Far longer than keepalive and the connect deadline take to find the server gone (about 2 s)."""
FAST = Liveness(connect_timeout_s=1.0, ping_timeout_s=1.0)
"""A frozen process found in about 1 s (default: `ping_timeout_s` 20 s)."""


@contextlib.contextmanager
def frozen(server: ServerProcess) -> Iterator[None]:
    """The server stopped (SIGSTOP) for the block: its sockets stay open, nothing answers."""
    server.process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        server.process.send_signal(signal.SIGCONT)


def test_liveness_refuses_keepalive_more_often_than_servers_accept() -> None:
    with pytest.raises(ValueError, match="keepalive_s"):
        Liveness(keepalive_s=0.5)
    options = dict(Liveness(connect_timeout_s=0.5, keepalive_s=2.0, ping_timeout_s=3.0).options())
    assert options["grpc.keepalive_time_ms"] == 2000 and options["grpc.min_reconnect_backoff_ms"] == 500
    assert options["grpc.http2.ping_timeout_ms"] == 3000


def test_calls_on_a_frozen_server_fail_unavailable_not_at_their_deadline() -> None:
    with ServerProcess(REFERENCE, workers=1) as server:
        transport = ChannelTransport(server.target, Settings(policy=NO_RETRY, liveness=FAST))
        plain = grpc.insecure_channel(server.target)  # gRPC's defaults: no keepalive, a 20 s connect timeout
        with EnvhubClient(transport) as client, plain:
            session = client.create_session("toy", "train-count/0").session_id
            stub = pb_grpc.EnvHubStub(plain)
            stub.ListEnvironments(pb.ListEnvironmentsRequest(), timeout=DEADLINE_S)  # connected
            with frozen(server):
                with pytest.raises(EnvhubError) as on_the_connection:  # the open connection: keepalive
                    client.step(session, "inc", timeout=DEADLINE_S)
                assert on_the_connection.value.code == grpc.StatusCode.UNAVAILABLE
                with pytest.raises(EnvhubError) as connecting:  # a new connection: the connect deadline
                    client.list_environments(timeout=DEADLINE_S)
                assert connecting.value.code == grpc.StatusCode.UNAVAILABLE
                with pytest.raises(grpc.RpcError) as control:  # without them the call waits out its deadline
                    stub.ListEnvironments(pb.ListEnvironmentsRequest(), timeout=2.0)
                assert control.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


def test_a_failover_client_moves_the_sessions_of_a_frozen_replica(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVHUB_SNAPSHOT_KEY", KEY)
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(ServerProcess(REFERENCE, workers=1)) for _ in range(2)]
        transport = FailoverTransport.over(
            [server.target for server in servers], snapshot_every=1, settings=Settings(liveness=FAST)
        )
        client = stack.enter_context(EnvhubClient(transport))
        sessions = [client.create_session("toy", f"train-count/{index % 4}").session_id for index in range(6)]
        client.step_many([(session, "inc") for session in sessions])
        transport.settle()
        owner = {t.target: name for name, t in transport.pool.replicas.items()}[servers[0].target]
        with frozen(servers[0]):
            results = client.step_many([(session, "inc") for session in sessions], timeout=DEADLINE_S)
            assert [result.step_index for result in results] == [2] * 6
            assert [result.text for result in results] == [f"train-count/{index % 4} seed 0: 2" for index in range(6)]
            assert transport.pool.retired == {owner} and transport.recoveries == 3
            live = [transport.tracked(session) for session in sessions]
            assert all(held is not None and not held.live_id.startswith(owner + ".") for held in live)
