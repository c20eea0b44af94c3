"""Per-RPC metrics, OpenTelemetry spans and JSON logs of a real server (the toy kind, on loopback)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from envhub.client import EnvhubClient, EnvhubError, RetryPolicy
from envhub.server.background import BackgroundServer
from envhub.testing import REFERENCE
from envhub.v1 import envhub_pb2 as pb
from envhub.v1 import envhub_pb2_grpc

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from envhub.telemetry import JsonFormatter, TextWithTraceIds, TraceIds

SERVICE = "envhub.v1.EnvHub"
TOKEN = "observed"
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture(scope="module")
def server(exporter: InMemorySpanExporter) -> Iterator[BackgroundServer]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with BackgroundServer.local(REFERENCE, token=TOKEN, tracer_provider=provider) as running:
        yield running


@pytest.fixture
def client(server: BackgroundServer) -> Iterator[EnvhubClient]:
    with EnvhubClient(server.target, token=TOKEN, policy=RetryPolicy(attempts=1)) as c:
        yield c


def _count(server: BackgroundServer, method: str, code: str, service: str = SERVICE) -> float:
    labels = {"service": service, "method": method, "code": code}
    return server.server.metrics.registry.get_sample_value("envhub_rpc_requests_total", labels) or 0.0


def _latency_count(server: BackgroundServer, method: str, code: str) -> float:
    labels = {"service": SERVICE, "method": method, "code": code}
    return server.server.metrics.registry.get_sample_value("envhub_rpc_latency_seconds_count", labels) or 0.0


def test_every_rpc_is_counted_and_timed_by_method_and_code(server: BackgroundServer, client: EnvhubClient) -> None:
    before_ok, before_missing = _count(server, "Step", "OK"), _count(server, "Step", "NOT_FOUND")
    start = client.create_session("toy", "train-count/0")
    client.step(start.session_id, "count")
    client.step(start.session_id, "count")
    with pytest.raises(EnvhubError):
        client.step("nobody.here", "count")
    client.close_session(start.session_id)
    assert _count(server, "Step", "OK") - before_ok == 2
    assert _count(server, "Step", "NOT_FOUND") - before_missing == 1
    assert _latency_count(server, "Step", "OK") == _count(server, "Step", "OK")
    assert _count(server, "CreateSession", "OK") >= 1 and _count(server, "CloseSession", "OK") >= 1


def test_refused_calls_and_health_checks_are_counted_too(server: BackgroundServer) -> None:
    before = _count(server, "ListEnvironments", "UNAUTHENTICATED")
    with grpc.insecure_channel(server.target) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            envhub_pb2_grpc.EnvHubStub(channel).ListEnvironments(pb.ListEnvironmentsRequest())
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert _count(server, "ListEnvironments", "UNAUTHENTICATED") - before == 1
    assert _count(server, "Check", "OK", service="grpc.health.v1.Health") >= 1


def test_calls_inside_a_session_stream_are_observed_one_by_one(server: BackgroundServer) -> None:
    import asyncio

    from envhub.client import AsyncEnvhubClient

    before = _count(server, "SessionStream.step", "OK")

    async def play() -> None:
        async with AsyncEnvhubClient(server.target, token=TOKEN) as client, client.stream() as stream:
            start = await stream.create_session("toy", "train-count/1")
            for _ in range(3):
                await stream.step(start.session_id, "count")
            await stream.close_session(start.session_id)

    asyncio.run(play())
    assert _count(server, "SessionStream.step", "OK") - before == 3
    assert _count(server, "SessionStream", "OK") >= 1


def _spans(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


def test_an_rpc_span_continues_the_callers_trace_and_holds_its_worker_op(
    server: BackgroundServer, exporter: InMemorySpanExporter
) -> None:
    exporter.clear()
    metadata = (("authorization", f"Bearer {TOKEN}"), ("traceparent", f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"))
    request = pb.CreateSessionRequest(environment="toy", task=pb.TaskSelector(task_id="train-count/2"))
    with grpc.insecure_channel(server.target) as channel:
        stub = envhub_pb2_grpc.EnvHubStub(channel)
        created = stub.CreateSession(request, metadata=metadata)
        with pytest.raises(grpc.RpcError):
            stub.Step(pb.StepRequest(session_id="nobody.here", action="count"), metadata=metadata)
        stub.CloseSession(pb.CloseSessionRequest(session_id=created.session_id), metadata=metadata)
    (rpc,) = _spans(exporter, f"{SERVICE}/CreateSession")
    (op,) = _spans(exporter, "worker Create")
    assert rpc.kind == SpanKind.SERVER and rpc.attributes is not None
    assert f"{rpc.context.trace_id:032x}" == CALLER_TRACE and rpc.parent is not None
    assert f"{rpc.parent.span_id:016x}" == CALLER_SPAN
    assert rpc.attributes["rpc.method"] == "CreateSession" and rpc.attributes["rpc.grpc.status_code"] == 0
    assert op.parent is not None and op.parent.span_id == rpc.context.span_id
    assert op.attributes is not None and op.attributes["envhub.environment"] == "toy"
    (failed,) = _spans(exporter, f"{SERVICE}/Step")
    assert failed.status.status_code == StatusCode.ERROR and failed.status.description == "NOT_FOUND"
    assert failed.attributes is not None and failed.attributes["rpc.grpc.status_code"] == 5


def test_a_server_without_a_tracer_provider_makes_no_span(exporter: InMemorySpanExporter) -> None:
    exporter.clear()
    with BackgroundServer.local(REFERENCE) as plain, EnvhubClient(plain.target) as client:
        client.close_session(client.create_session("toy", "train-count/0").session_id)
        assert _count(plain, "CreateSession", "OK") == 1
    assert exporter.get_finished_spans() == ()


def _record(message: str) -> logging.LogRecord:
    record = logging.LogRecord("envhub.test", logging.INFO, __file__, 1, message, None, None)
    TraceIds().filter(record)
    return record


def test_log_records_made_in_a_span_carry_its_trace_id() -> None:
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("outer") as span:
        inside = _record("inside")
    outside = _record("outside")
    trace_id = f"{span.get_span_context().trace_id:032x}"
    entry = json.loads(JsonFormatter().format(inside))
    assert entry["trace_id"] == trace_id and entry["message"] == "inside" and entry["level"] == "INFO"
    assert len(entry["span_id"]) == 16 and "trace_id" not in json.loads(JsonFormatter().format(outside))
    assert TextWithTraceIds().format(inside).endswith(f"trace_id={trace_id} span_id={entry['span_id']}")


def test_envhub_serve_logs_json_lines(tmp_path: Path) -> None:
    port_file = tmp_path / "port"
    command = [sys.executable, "-m", "envhub.cli", "--log-format", "json", "serve", "--env", REFERENCE]
    command += ["--port", "0", "--port-file", str(port_file), "--tracing", "console"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    entries = []
    for line in process.stderr:  # every line is one JSON object, up to the one saying the server serves
        entries.append(json.loads(line))
        if "serving" in entries[-1]["message"]:
            break
    process.terminate()
    process.wait(timeout=60)
    assert entries and "serving" in entries[-1]["message"], entries
    assert all(entry["logger"].startswith("envhub") and entry["level"] in ("INFO", "WARNING") for entry in entries)
