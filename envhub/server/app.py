"""Assembling a server: `create_server(config) -> (server, port)` and the `serve()` main loop."""

from __future__ import annotations

import asyncio
import logging
import secrets
import signal
import time
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import SERVICE_NAME as HEALTH_SERVICE
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection

from envhub.core.status import MIN_KEEPALIVE_S
from envhub.server import requests
from envhub.server.auth import AuthInterceptor
from envhub.server.config import ServerConfig
from envhub.server.metrics import Metrics
from envhub.server.observe import RpcObserver
from envhub.server.pool import WorkerPool
from envhub.server.service import SERVICE, SERVICE_NAME, EnvHubService
from envhub.server.sessions import SessionTable
from envhub.server.snapshots import SnapshotSigner
from envhub.server.tenants import Tenants
from envhub.server.tracing import Tracing
from envhub.server.worker_handle import discard_outcome
from envhub.server.worker_ops import Close

log = logging.getLogger(__name__)
STREAM_END_GRACE_S = 1.0
"""After a drain: how long open streams get to deliver their DRAINING status before gRPC stops."""

KEEPALIVE_OPTIONS = [
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", round(MIN_KEEPALIVE_S * 500)),
]
"""Clients' keepalive pings (every `MIN_KEEPALIVE_S` or more, also between calls) are welcome: they find a
vanished server fast (`envhub.client.channel.Liveness`)."""


def _credentials(config: ServerConfig) -> grpc.ServerCredentials | None:
    """TLS credentials of the server (None: plaintext); with `tls_client_ca_file`, mutual TLS: every
    client must present a certificate that CA signed."""
    if not (config.tls_cert_file and config.tls_key_file):
        return None
    chain = [(Path(config.tls_key_file).read_bytes(), Path(config.tls_cert_file).read_bytes())]
    if config.tls_client_ca_file is None:
        return grpc.ssl_server_credentials(chain)
    roots = Path(config.tls_client_ca_file).read_bytes()
    return grpc.ssl_server_credentials(chain, root_certificates=roots, require_client_auth=True)


class EnvhubServer:
    """A running server: gRPC, workers, reaper, metrics. Stop it with `drain()` or `stop()`."""

    def __init__(self, config: ServerConfig, *, tracer_provider: Any | None = None) -> None:
        self.config = config
        self.replica_id = config.replica_id or f"r{secrets.token_hex(4)}"
        self.metrics = Metrics()
        self.table = SessionTable(self.replica_id, config.max_sessions, config.lost_ttl_s)
        self.pool = WorkerPool(
            config.environments,
            config.workers,
            self.table,
            self.metrics,
            config.environment_config,
            inline_starts=config.inline_starts,
        )
        self.health = health_aio.HealthServicer()
        self.metrics_port: int | None = None
        self.tracing = Tracing(tracer_provider)
        self.tenants = Tenants.configured(config.tenants_file, config.token)
        interceptors: list[grpc.aio.ServerInterceptor] = [RpcObserver(self.metrics, self.tracing)]
        if not self.tenants.open:  # after the observer, which so counts the calls it refuses
            interceptors.append(AuthInterceptor(self.tenants))
        self.grpc = grpc.aio.server(
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", config.max_message_bytes),
                ("grpc.max_send_message_length", config.max_message_bytes),
                ("grpc.so_reuseport", 0),
                *KEEPALIVE_OPTIONS,
            ],
        )
        self._reaper: asyncio.Task[None] | None = None
        self.service: EnvHubService | None = None

    async def start(self) -> int:
        """Start workers, bind, serve; returns the bound port."""
        await self.pool.start()
        signer = SnapshotSigner.from_sources(self.config.snapshot_key_file, self.config.snapshot_accept_key_files)
        self.service = EnvHubService(
            self.config, self.pool, self.table, signer, self.metrics, self.tenants, self.tracing
        )
        self.grpc.add_generic_rpc_handlers((requests.handlers(SERVICE, self.service),))
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.grpc)
        reflection.enable_server_reflection((SERVICE_NAME, HEALTH_SERVICE, reflection.SERVICE_NAME), self.grpc)
        address = f"{self.config.host}:{self.config.port}"
        credentials = _credentials(self.config)
        port = self.grpc.add_secure_port(address, credentials) if credentials else self.grpc.add_insecure_port(address)
        self.metrics.track_sessions(
            self.pool.catalogs, lambda: [tenant.name for tenant in self.tenants.directory.tenants], self.table.counts
        )
        if self.config.metrics_port is not None:
            self.metrics_port = self.metrics.serve(self.config.metrics_host, self.config.metrics_port)
        await self.grpc.start()
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self._reaper = asyncio.create_task(self._reap())
        log.info(
            "envhub replica %s serving %s on %s:%d (%d worker(s) each)",
            self.replica_id,
            ", ".join(self.pool.catalogs),
            self.config.host,
            port,
            self.config.workers,
        )
        return port

    async def _reap(self) -> None:
        """Every so often, close the sessions idle for longer than `idle_timeout_s`."""
        interval = max(0.05, min(5.0, self.config.idle_timeout_s / 4))
        while True:
            await asyncio.sleep(interval)
            self.reap(time.monotonic())

    def reap(self, now: float) -> list[str]:
        """Close the sessions that, at monotonic time `now`, have no call in flight and none for
        `idle_timeout_s`; returns their ids (called by the reaper task, and by tests with a `now`)."""
        closed = []
        for record in self.table.idle(self.config.idle_timeout_s, now):
            log.info("closing idle session %s", record.session_id)
            self.table.drop(record.session_id)
            closed.append(record.session_id)
            if record.worker.alive:
                discard_outcome(record.worker.call(Close(record.session_id)))
        return closed

    async def drain(self, grace: float | None = None) -> None:
        """Refuse every new call but CreateSnapshot and CloseSession with UNAVAILABLE (DRAINING) and report
        NOT_SERVING at once; let in-flight calls finish (up to `grace` s), then give clients up to
        `drain_migrate_s` to move open sessions away, end open streams with DRAINING, then stop."""
        log.info("draining: refusing new calls; waiting for in-flight calls")
        assert self.service is not None, "drain() of a server that never started"
        self.service.start_drain()
        await self.health.enter_graceful_shutdown()
        if not await self.service.wait_idle(self.config.drain_grace_s if grace is None else grace):
            log.warning("drain grace over with calls still in flight: they are cancelled")
        elif self.config.drain_migrate_s > 0 and not await self.service.wait_emptied(self.config.drain_migrate_s):
            log.warning("drain: sessions still open after %s s: they are lost", self.config.drain_migrate_s)
        self.service.end_streams()
        await self.grpc.stop(STREAM_END_GRACE_S)
        await self._shutdown()

    async def stop(self) -> None:
        """Stop now: cancel in-flight calls, stop workers."""
        if self.service is not None:
            self.service.start_drain()
        await self.grpc.stop(None)
        await self._shutdown()

    async def _shutdown(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        await self.pool.stop()
        self.metrics.close()


async def create_server(config: ServerConfig, *, tracer_provider: Any | None = None) -> tuple[EnvhubServer, int]:
    """Build and start a server (workers included); returns it and its bound port (use port 0 in tests).
    With an OpenTelemetry `tracer_provider`, every RPC and worker op makes a span (`envhub.server.tracing`)."""
    server = EnvhubServer(config, tracer_provider=tracer_provider)
    port = await server.start()
    return server, port


async def serve(config: ServerConfig, port_file: str | None = None, *, tracer_provider: Any | None = None) -> None:
    """Run a server until SIGTERM or SIGINT, then drain gracefully; `port_file` receives the bound port."""
    server, port = await create_server(config, tracer_provider=tracer_provider)
    if port_file:
        Path(port_file).write_text(f"{port}\n", encoding="utf-8")
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    loop.add_signal_handler(signal.SIGHUP, server.tenants.reload)  # sessions stay as they are
    await stop.wait()
    await server.drain()
    log.info("envhub replica %s stopped", server.replica_id)
