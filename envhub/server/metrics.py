"""Prometheus metrics of one server (own registry, so several servers can share a process)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from wsgiref.simple_server import WSGIServer

import grpc
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_RPC_BUCKETS = (*_LATENCY_BUCKETS, 10.0, 30.0, 60.0)
"""Also the slow calls: a ScienceWorld reset can take 9 s, an ALFWorld create with a new game more."""


class _Sessions(Collector):
    """`envhub_sessions{environment, tenant}`, read from the session table at every scrape: every
    environment with every tenant named (0 included) and every tenant holding sessions."""

    def __init__(self) -> None:
        self.environments: tuple[str, ...] = ()
        self.tenants: Callable[[], Iterable[str]] = tuple
        self.counts: Callable[[], Mapping[tuple[str, str], int]] = dict

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("envhub_sessions", "Live sessions", labels=["environment", "tenant"])
        counts = dict(self.counts())
        pairs = {(environment, tenant) for environment in self.environments for tenant in self.tenants()}
        for environment, tenant in sorted(pairs | set(counts)):
            family.add_metric([environment, tenant], counts.get((environment, tenant), 0))
        yield family


class Metrics:
    """Sessions gauge, steps counter (rate() gives steps/s), step latency, errors by code, and every RPC
    counted and timed by service, method and status code (`envhub.server.observe.RpcObserver`); sessions,
    steps and errors are labelled with the tenant that owns or made them ("" for unknown callers)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.sessions = _Sessions()
        self.registry.register(self.sessions)
        self.steps = Counter("envhub_steps", "Steps served", ["environment", "tenant"], registry=self.registry)
        self.step_latency = Histogram(
            "envhub_step_latency_seconds",
            "Step latency inside the server (worker round trip)",
            ["environment"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.errors = Counter("envhub_errors", "Failed calls", ["method", "code", "tenant"], registry=self.registry)
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
        self._rpc_children: dict[tuple[str, str, grpc.StatusCode], tuple[Counter, Histogram]] = {}
        self._step_children: dict[tuple[str, str], tuple[Counter, Histogram]] = {}
        """Label values -> the bound children: `labels()` (a lock, a tuple, a lookup) once per label set, not
        at every call."""

    def track_sessions(
        self,
        environments: Iterable[str],
        tenants: Callable[[], Iterable[str]],
        counts: Callable[[], Mapping[tuple[str, str], int]],
    ) -> None:
        """Report `counts()` ((environment, tenant) -> live sessions) at every scrape."""
        self.sessions.environments, self.sessions.tenants, self.sessions.counts = tuple(environments), tenants, counts

    def error(self, method: str, code: grpc.StatusCode, tenant: str) -> None:
        self.errors.labels(method, code.name, tenant).inc()

    def rpc(self, service: str, method: str, code: grpc.StatusCode, seconds: float) -> None:
        """Count and time one RPC (or one call inside a SessionStream)."""
        key = (service, method, code)
        children = self._rpc_children.get(key)
        if children is None:
            children = self._rpc_children[key] = (
                self.rpc_requests.labels(service, method, code.name),
                self.rpc_latency.labels(service, method, code.name),
            )
        children[0].inc()
        children[1].observe(seconds)

    def step(self, environment: str, tenant: str, seconds: float) -> None:
        """Count one step served for `tenant` and time its worker round trip."""
        key = (environment, tenant)
        children = self._step_children.get(key)
        if children is None:
            children = self._step_children[key] = (
                self.steps.labels(environment, tenant),
                self.step_latency.labels(environment),
            )
        children[0].inc()
        children[1].observe(seconds)

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
