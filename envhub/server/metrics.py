"""Prometheus metrics of one server (own registry, so several servers can share a process)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from wsgiref.simple_server import WSGIServer

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_RPC_BUCKETS = (*_LATENCY_BUCKETS, 10.0, 30.0, 60.0)
"""Also the slow calls: a ScienceWorld reset can take 9 s, an ALFWorld create with a new game more."""


class Metrics:
    """Sessions gauge, steps counter (rate() gives steps/s), step latency, errors by code, and every RPC
    counted and timed by service, method and status code (`envhub.server.observe.RpcObserver`)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.sessions = Gauge("envhub_sessions", "Live sessions", ["environment"], registry=self.registry)
        self.steps = Counter("envhub_steps", "Steps served", ["environment"], registry=self.registry)
        self.step_latency = Histogram(
            "envhub_step_latency_seconds",
            "Step latency inside the server (worker round trip)",
            ["environment"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.errors = Counter("envhub_errors", "Failed calls", ["method", "code"], registry=self.registry)
        self.rpc_requests = Counter(
            "envhub_rpc_requests",
            "RPCs handled, by service, method and status code (SessionStream.<call>: one call inside a stream)",
            ["service", "method", "code"],
            registry=self.registry,
        )
        self.rpc_latency = Histogram(
            "envhub_rpc_latency_seconds",
            "RPC handling time, by service, method and status code (a SessionStream: open to close)",
            ["service", "method", "code"],
            buckets=_RPC_BUCKETS,
            registry=self.registry,
        )
        self.worker_restarts = Counter(
            "envhub_worker_restarts", "Workers restarted after dying", ["environment"], registry=self.registry
        )
        self._http: tuple[WSGIServer, threading.Thread] | None = None

    def track_sessions(self, environment: str, count: Callable[[], int]) -> None:
        """Report `count()` as the live sessions of `environment` at every scrape."""
        self.sessions.labels(environment).set_function(count)

    def error(self, method: str, code: grpc.StatusCode) -> None:
        self.errors.labels(method, code.name).inc()

    def rpc(self, service: str, method: str, code: grpc.StatusCode, seconds: float) -> None:
        """Count and time one RPC (or one call inside a SessionStream)."""
        self.rpc_requests.labels(service, method, code.name).inc()
        self.rpc_latency.labels(service, method, code.name).observe(seconds)

    def serve(self, host: str, port: int) -> int:
        """Start the /metrics endpoint; returns the bound port."""
        self._http = start_http_server(port, addr=host, registry=self.registry)
        return int(self._http[0].server_port)

    def close(self) -> None:
        if self._http is not None:
            server, thread = self._http
            server.shutdown()
            server.server_close()
            thread.join()
            self._http = None
