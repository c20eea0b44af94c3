"""OpenTelemetry spans of one server, opt-in: one span per RPC and one per worker op.

`Tracing(None)` (the default) makes no span and imports nothing. `Tracing(provider)` takes any
OpenTelemetry `TracerProvider` (the `tracing` extra): `envhub serve --tracing otlp` builds one that
exports over OTLP (configured by the standard `OTEL_EXPORTER_OTLP_*` variables), tests pass one with
an in-memory exporter. An RPC span continues the caller's trace when the call carries a W3C
`traceparent` header; worker-op spans are its children, since the RPC's coroutine makes them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import grpc

TRACER_NAME = "envhub.server"


class Tracing:
    """Spans of one server; a no-op without a tracer provider."""

    def __init__(self, provider: Any | None = None) -> None:
        self._tracer = provider.get_tracer(TRACER_NAME) if provider is not None else None

    @property
    def enabled(self) -> bool:
        return self._tracer is not None

    @contextlib.contextmanager
    def rpc(self, service: str, method: str, metadata: Sequence[tuple[str, Any]] | None) -> Iterator[Any]:
        """A server span named `service/method` around one RPC (yields None when tracing is off)."""
        if self._tracer is None:
            yield None
            return
        from opentelemetry import propagate
        from opentelemetry.trace import SpanKind

        carrier = {key: value for key, value in metadata or () if isinstance(value, str)}
        attributes = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method}
        with self._tracer.start_as_current_span(
            f"{service}/{method}",
            context=propagate.extract(carrier),
            kind=SpanKind.SERVER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield span

    @staticmethod
    def finish(span: Any, code: grpc.StatusCode) -> None:
        """Record the RPC's status code on its span (an error status for every code but OK)."""
        if span is None:
            return
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("rpc.grpc.status_code", code.value[0])
        if code != grpc.StatusCode.OK:
            span.set_status(Status(StatusCode.ERROR, code.name))

    @contextlib.contextmanager
    def op(self, name: str, environment: str, worker: int) -> Iterator[None]:
        """A span around one worker op (`worker <Op>`) of worker number `worker` of `environment`,
        a child of the current RPC's span."""
        if self._tracer is None:
            yield
            return
        attributes = {"envhub.environment": environment, "envhub.worker": worker}
        with self._tracer.start_as_current_span(f"worker {name}", attributes=attributes):
            yield
