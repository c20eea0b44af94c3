"""How the `envhub` command reports: logs as text or JSON lines (with trace ids when tracing), and the
OpenTelemetry tracer provider of `envhub serve --tracing` (spans are made by `envhub.server.tracing`).

`configure_logs(level, "json")` writes records as `{"time", "level", "logger", "message"}` (plus
`exception` with the traceback, and `trace_id` / `span_id` of the span current when the record
was made, where there is one), which log collectors (Loki, Cloud Logging, Elasticsearch) parse
without a grok pattern. `trace_ids=True` adds the ids to text lines as well.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

FORMATS = ("text", "json")
TEXT = "%(asctime)s %(name)s %(levelname)s %(message)s"


class TraceIds(logging.Filter):
    """Stamps each record with the current OpenTelemetry span's `trace_id` and `span_id` (hex; "" outside spans)."""

    def filter(self, record: logging.LogRecord) -> bool:
        from opentelemetry import trace

        context = trace.get_current_span().get_span_context()
        record.trace_id = f"{context.trace_id:032x}" if context.is_valid else ""
        record.span_id = f"{context.span_id:016x}" if context.is_valid else ""
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in ("trace_id", "span_id"):
            if getattr(record, key, ""):
                entry[key] = getattr(record, key)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class TextWithTraceIds(logging.Formatter):
    """The text format, with ` trace_id=... span_id=...` on records made inside a span."""

    def __init__(self) -> None:
        super().__init__(TEXT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        trace_id = getattr(record, "trace_id", "")
        return f"{line} trace_id={trace_id} span_id={getattr(record, 'span_id', '')}" if trace_id else line


def configure_logs(level: str, fmt: str = "text", *, trace_ids: bool = False) -> None:
    """Send the root logger's records to stderr in format `fmt` ("text" or "json") at `level` (a no-op where
    the root logger already has handlers, as `logging.basicConfig`)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r}: choose one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler()
    if trace_ids:
        handler.addFilter(TraceIds())
    plain = TextWithTraceIds() if trace_ids else logging.Formatter(TEXT)
    handler.setFormatter(JsonFormatter() if fmt == "json" else plain)
    logging.basicConfig(level=level.upper(), handlers=[handler])


EXPORTERS = ("otlp", "console")
"""What `envhub serve --tracing` accepts (besides `off`)."""


def make_provider(exporter: str, service_name: str = "envhub-server") -> Any:
    """An OpenTelemetry SDK `TracerProvider` exporting in batches over OTLP/gRPC (endpoint and headers from
    the standard `OTEL_EXPORTER_OTLP_*` variables) or to stderr (`console`); `OTEL_SERVICE_NAME` wins."""
    if exporter not in EXPORTERS:
        raise ValueError(f"unknown tracing exporter {exporter!r}: choose one of {', '.join(EXPORTERS)}")
    try:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
    except ImportError as exc:
        raise ValueError("tracing needs the OpenTelemetry SDK: pip install 'envhub[tracing]'") from exc
    chosen: SpanExporter
    if exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        chosen = OTLPSpanExporter()
    else:
        chosen = ConsoleSpanExporter()
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service_name}))
    provider.add_span_processor(BatchSpanProcessor(chosen))
    return provider
