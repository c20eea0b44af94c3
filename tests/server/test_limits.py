"""Limits and operations on a real ScienceWorld server over TLS: token auth, health, reflection,
metrics, deadlines, and a worker that dies (the reaper is tested with the toy kind in test_contract)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from envhub.client import EnvhubClient, EnvhubError, RetryPolicy
from envhub.server.background import BackgroundServer

TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for localhost (cert, key)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    request = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost"]
    names = ["-addext", "subjectAltName=DNS:localhost", "-keyout", str(key), "-out", str(cert)]
    subprocess.run([*request, *names], check=True, capture_output=True)
    return cert, key


@pytest.fixture(scope="module")
def server(certificate: tuple[Path, Path]) -> Iterator[BackgroundServer]:
    cert, key = certificate
    settings = {"token": TOKEN, "metrics_port": 0}
    with BackgroundServer.local("scienceworld", tls_cert_file=str(cert), tls_key_file=str(key), **settings) as s:
        yield s


@pytest.fixture(scope="module")
def tls(certificate: tuple[Path, Path]) -> bytes:
    return certificate[0].read_bytes()


@pytest.fixture(scope="module")
def client(server: BackgroundServer, tls: bytes) -> Iterator[EnvhubClient]:
    with EnvhubClient(server.target, token=TOKEN, tls=tls) as c:
        yield c


@pytest.mark.parametrize("token", [None, "wrong"])
def test_token_auth_refuses_missing_or_wrong_token(server: BackgroundServer, tls: bytes, token: str | None) -> None:
    with EnvhubClient(server.target, token=token, tls=tls) as anonymous, pytest.raises(EnvhubError) as caught:
        anonymous.list_tasks("scienceworld")
    assert caught.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert caught.value.reason == "MISSING_OR_BAD_TOKEN"


def test_plaintext_is_refused_by_a_tls_server(server: BackgroundServer) -> None:
    with EnvhubClient(server.target, token=TOKEN) as plaintext, pytest.raises(EnvhubError) as caught:
        plaintext.list_environments(timeout=5)
    assert caught.value.code == grpc.StatusCode.UNAVAILABLE


def test_health_answers_without_token_and_reflection_lists_services(server: BackgroundServer, tls: bytes) -> None:
    with grpc.secure_channel(server.target, grpc.ssl_channel_credentials(tls)) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "envhub.v1.EnvHub"):
            answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        [answer] = reflection.ServerReflectionInfo(iter([request]), metadata=[("authorization", f"Bearer {TOKEN}")])
        names = {service.name for service in answer.list_services_response.service}
        assert {"envhub.v1.EnvHub", "grpc.health.v1.Health"} <= names


def test_metrics_count_steps_and_sessions(server: BackgroundServer, client: EnvhubClient) -> None:
    start = client.create_session("scienceworld", task="boil/0")
    client.step(start.session_id, "look around")
    with pytest.raises(EnvhubError):
        client.step(start.session_id, "")
    page = urllib.request.urlopen(f"http://localhost:{server.server.metrics_port}/metrics", timeout=10).read().decode()
    client.close_session(start.session_id)
    assert 'envhub_steps_total{environment="scienceworld",tenant="default"} 1.0' in page
    assert 'envhub_sessions{environment="scienceworld",tenant="default"} 1.0' in page
    assert 'envhub_errors_total{code="INVALID_ARGUMENT",method="Step",tenant="default"} 1.0' in page
    assert "envhub_step_latency_seconds_bucket" in page


def test_deadline_is_honoured_and_session_survives(server: BackgroundServer, tls: bytes) -> None:
    with EnvhubClient(server.target, token=TOKEN, tls=tls, policy=RetryPolicy(attempts=1)) as client:
        start = client.create_session("scienceworld", task="boil/0")
        with pytest.raises(EnvhubError) as caught:
            client.step(start.session_id, "look around", timeout=0.001)
        assert caught.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert client.step(start.session_id, "look around").step_index >= 1
        client.close_session(start.session_id)


def test_dead_worker_loses_its_sessions_and_is_restarted(server: BackgroundServer, client: EnvhubClient) -> None:
    start = client.create_session("scienceworld", task="boil/0")
    [worker] = server.server.pool.workers()
    assert worker.pid is not None
    os.kill(worker.pid, signal.SIGKILL)
    with pytest.raises(EnvhubError) as caught:
        client.step(start.session_id, "look around")
    assert (caught.value.code, caught.value.reason) == (grpc.StatusCode.UNAVAILABLE, "SESSION_LOST")  # after retries
    deadline = time.monotonic() + 90
    while True:  # the restarted worker serves new sessions
        try:
            fresh = client.create_session("scienceworld", task="boil/0")
            break
        except EnvhubError as error:
            assert error.code == grpc.StatusCode.UNAVAILABLE and time.monotonic() < deadline
            time.sleep(0.5)
    with pytest.raises(EnvhubError) as caught:  # still known as lost (its tombstone), not as a mistyped id
        client.step(start.session_id, "look around")
    assert (caught.value.code, caught.value.reason) == (grpc.StatusCode.UNAVAILABLE, "SESSION_LOST")
    assert client.step(fresh.session_id, "look around").step_index == 1
    client.close_session(fresh.session_id)
