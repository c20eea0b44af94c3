"""Tenants on real servers (the toy kind): a tenants file maps tokens and client-certificate names to
tenants; a session answers only its own tenant (to any other exactly like an id that never existed);
per-tenant session quotas; per-tenant metrics; SIGHUP reloads the file and keeps every session;
mutual TLS with certificates this test suite makes (tests/server/conftest.py)."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from envhub.bench.procs import ServerProcess
from envhub.client import AsyncEnvhubClient, EnvhubClient, EnvhubError, MutualTls
from envhub.client.retry import NO_RETRY
from envhub.server.background import BackgroundServer
from envhub.server.tenants import Tenants, load, parse
from envhub.testing import REFERENCE

TASK = "train-count/0"
TENANTS = {
    "tenants": {
        "team-a": {"tokens": ["token-a"], "certificates": ["trainer-a"], "max_sessions": 3},
        "team-b": {"tokens": ["token-b"]},
    }
}


def _write(path: Path, document: Any) -> Path:
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackgroundServer]:
    tenants = _write(tmp_path_factory.mktemp("tenants") / "tenants.yaml", TENANTS)
    with BackgroundServer.local(REFERENCE, tenants_file=str(tenants), metrics_port=0) as s:
        yield s


def _refusal(call: Callable[[], Any], session_id: str) -> tuple[grpc.StatusCode, str, str, dict[str, str]]:
    """The error `call` raises, with `session_id` written as ID (to compare refusals of two ids)."""
    with pytest.raises(EnvhubError) as caught:
        call()
    error = caught.value
    metadata = {key: value.replace(session_id, "ID") for key, value in error.metadata.items()}
    return error.code, error.reason, error.message.replace(session_id, "ID"), metadata


def test_another_tenants_session_is_refused_exactly_like_one_that_never_existed(server: BackgroundServer) -> None:
    with (
        EnvhubClient(server.target, token="token-a", policy=NO_RETRY) as a,
        EnvhubClient(server.target, token="token-b", policy=NO_RETRY) as b,
    ):
        theirs = a.create_session("toy", task=TASK).session_id
        closed = b.create_session("toy", task=TASK).session_id
        b.close_session(closed)
        calls: list[Callable[[str], Any]] = [
            lambda s: b.step(s, "inc"),
            lambda s: b.reset_session(s),
            lambda s: b.expert_actions(s),
            lambda s: b.snapshot(s),
            lambda s: b.fork(s, 1),
            lambda s: b.step_many([(s, "inc")]),
            lambda s: b.close_session(s),
        ]
        for call in calls:
            refused = _refusal(lambda call=call: call(theirs), theirs)
            assert refused[:2] == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")
            assert refused == _refusal(lambda call=call: call(closed), closed)

        async def on_a_stream(session_id: str) -> tuple[grpc.StatusCode, str]:
            async with AsyncEnvhubClient(server.target, token="token-b", policy=NO_RETRY) as aio, aio.stream() as s:
                try:
                    await s.step(session_id, "inc")
                except EnvhubError as error:
                    return error.code, error.reason
            raise AssertionError("another tenant stepped the session")

        assert asyncio.run(on_a_stream(theirs)) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")
        assert a.step(theirs, "inc").step_index == 1  # nothing of team-b's was applied
        a.close_session(theirs)


def test_unknown_or_missing_tokens_are_refused(server: BackgroundServer) -> None:
    for token in (None, "token-c", "Bearer token-a"):
        stranger = EnvhubClient(server.target, token=token, policy=NO_RETRY)
        with stranger, pytest.raises(EnvhubError) as caught:
            stranger.list_environments()
        assert (caught.value.code, caught.value.reason) == (grpc.StatusCode.UNAUTHENTICATED, "MISSING_OR_BAD_TOKEN")


def _page(server: BackgroundServer) -> str:
    url = f"http://localhost:{server.server.metrics_port}/metrics"
    return str(urllib.request.urlopen(url, timeout=10).read().decode())


def _sample(page: str, series: str) -> float:
    """The value of `series` (name and labels as Prometheus writes them) on a /metrics page; 0 if absent."""
    values = [float(line.rsplit(" ", 1)[1]) for line in page.splitlines() if line.startswith(series + " ")]
    return values[0] if values else 0.0


def test_a_tenant_is_held_to_its_quota_and_metrics_are_per_tenant(server: BackgroundServer) -> None:
    with (
        EnvhubClient(server.target, token="token-a", policy=NO_RETRY) as a,
        EnvhubClient(server.target, token="token-b", policy=NO_RETRY) as b,
    ):
        steps = 'envhub_steps_total{environment="toy",tenant="team-a"}'
        quota_errors = 'envhub_errors_total{code="RESOURCE_EXHAUSTED",method="CreateSession",tenant="team-a"}'
        before = _page(server)
        mine = [a.create_session("toy", task=TASK).session_id for _ in range(3)]
        a.step(mine[0], "inc")
        snapshot = a.snapshot(mine[0])
        beyond: list[Callable[[], Any]] = [
            lambda: a.create_session("toy", task=TASK),
            lambda: a.fork(mine[0], 1),
            lambda: a.restore(snapshot),
        ]
        for over in beyond:
            with pytest.raises(EnvhubError) as caught:
                over()
            error = caught.value
            assert (error.code, error.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "TENANT_QUOTA")
            assert error.metadata == {"tenant": "team-a", "quota": "max_sessions", "max_sessions": "3"}
            assert "max_sessions" in error.message
        theirs = [b.create_session("toy", task=TASK).session_id for _ in range(4)]  # team-b has no quota
        page = _page(server)
        assert 'envhub_sessions{environment="toy",tenant="team-a"} 3.0' in page
        assert 'envhub_sessions{environment="toy",tenant="team-b"} 4.0' in page
        assert _sample(page, steps) == _sample(before, steps) + 1
        assert _sample(page, quota_errors) == _sample(before, quota_errors) + 1
        a.close_session(mine.pop())
        mine.append(a.restore(snapshot).session_id)  # room again
        for session_id in mine:
            a.close_session(session_id)
        for session_id in theirs:
            b.close_session(session_id)
    assert 'envhub_sessions{environment="toy",tenant="team-a"} 0.0' in _page(server)


def test_sighup_reloads_the_tenants_file_and_keeps_every_session(tmp_path: Path) -> None:
    tenants = _write(tmp_path / "tenants.yaml", TENANTS)
    with ServerProcess(REFERENCE, extra=["--tenants-file", str(tenants)]) as process:
        with EnvhubClient(process.target, token="token-a", policy=NO_RETRY) as a:
            session_id = a.create_session("toy", task=TASK).session_id
            a.step(session_id, "inc")
        rotated = {"tenants": {**TENANTS["tenants"], "team-a": {"tokens": ["token-a2"], "max_sessions": 1}}}
        _write(tenants, rotated)
        process.process.send_signal(signal.SIGHUP)
        with EnvhubClient(process.target, token="token-a2", policy=NO_RETRY) as a2:
            deadline = time.monotonic() + 60
            while True:  # until the server handled its SIGHUP
                try:
                    step = a2.step(session_id, "inc")
                    break
                except EnvhubError as error:
                    assert error.code == grpc.StatusCode.UNAUTHENTICATED and time.monotonic() < deadline
                    time.sleep(0.05)
            assert step.step_index == 2  # the session lived on, now with the rotated token
            with pytest.raises(EnvhubError) as caught:  # the new quota counts the session held already
                a2.create_session("toy", task=TASK)
            assert caught.value.reason == "TENANT_QUOTA"
        old = EnvhubClient(process.target, token="token-a", policy=NO_RETRY)
        with old, pytest.raises(EnvhubError) as caught:
            old.step(session_id, "inc")
        assert caught.value.code == grpc.StatusCode.UNAUTHENTICATED


def test_a_broken_tenants_file_is_refused_at_start_and_on_reload(tmp_path: Path) -> None:
    good = _write(tmp_path / "tenants.yaml", TENANTS)
    held = Tenants(load(good), str(good))
    for document, message in [
        ({"tenants": {"a": {"tokens": ["t"]}, "b": {"tokens": ["t"]}}}, "tokens must be unique"),
        ({"tenants": {"a": {"tokens": ["t"], "max_sessions": 0}}}, "max_sessions must be a whole number"),
        ({"tenants": {"a": {"tokens": ["t"], "quota": 1}}}, "unknown key(s) ['quota']"),
        ({"tenants": {"a b": {"tokens": ["t"]}}}, "tenant name 'a b'"),
        ({"tenants": {"a": {}}}, "neither tokens nor certificates"),
        ({"tenants": {}}, "names no tenant"),
        (["a"], "a mapping with one key"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            parse(document)
        _write(good, document)
        assert not held.reload()  # the tenants in force stay
        assert held.directory.identify(b"token-a", []) is not None
    good.write_text("tenants: [", encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(str(good))):
        load(good)
    serve = [sys.executable, "-m", "envhub.cli", "serve", "--env", REFERENCE, "--port", "0"]
    serve += ["--tenants-file", str(good)]
    refused = subprocess.run(serve, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and f"cannot serve: tenants file {good}" in refused.stderr


def _mutual(authority: Any, tenants_file: Path | None) -> BackgroundServer:
    served = authority.issue("localhost", dns=("localhost",))
    return BackgroundServer.local(
        REFERENCE,
        tls_cert_file=str(served.certificate),
        tls_key_file=str(served.key),
        tls_client_ca_file=str(authority.certificate),
        tenants_file=None if tenants_file is None else str(tenants_file),
    )


def test_mutual_tls_identifies_tenants_by_certificate(authority: Any, foreign_authority: Any, tmp_path: Path) -> None:
    tenants = _write(tmp_path / "tenants.yaml", TENANTS)
    roots = authority.certificate.read_bytes()

    def mutual(issued: Any) -> MutualTls:
        return MutualTls(certificate=issued.certificate, key=issued.key, roots=roots)

    with _mutual(authority, tenants) as server:
        trainer_a, stranger = authority.issue("trainer-a"), authority.issue("stranger")
        with (
            EnvhubClient(server.target, tls=mutual(trainer_a), policy=NO_RETRY) as by_certificate,
            EnvhubClient(server.target, tls=mutual(stranger), token="token-a", policy=NO_RETRY) as by_token,
        ):
            session_id = by_certificate.create_session("toy", task=TASK).session_id
            assert by_token.step(session_id, "inc").step_index == 1  # both are team-a
            by_certificate.close_session(session_id)
        refusals = []
        for tls, token in [
            (mutual(stranger), None),  # a certificate the tenants file does not name
            (mutual(trainer_a), "token-c"),  # a bad token is refused whatever the certificate
            (roots, None),  # no client certificate: the handshake fails
            (mutual(foreign_authority.issue("trainer-a")), None),  # signed by a CA the server does not trust
        ]:
            with EnvhubClient(server.target, tls=tls, token=token, policy=NO_RETRY) as client:
                with pytest.raises(EnvhubError) as caught:
                    client.list_environments(timeout=10)
                refusals.append(caught.value.code)
        unauthenticated, unavailable = grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNAVAILABLE
        assert refusals == [unauthenticated, unauthenticated, unavailable, unavailable]
    anyone = mutual(authority.issue("anyone"))
    with _mutual(authority, None) as server, EnvhubClient(server.target, tls=anyone, policy=NO_RETRY) as client:
        assert client.replica_id() == server.replica_id  # no tenants file: every certified client is `default`
