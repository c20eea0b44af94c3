"""Server settings: one frozen dataclass, filled from the command line or by tests."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from envhub.server.loops import EVENT_LOOPS


@dataclass(frozen=True)
class ServerConfig:
    """Everything `create_server` needs. Defaults serve ScienceWorld on localhost:50051."""

    environments: tuple[str, ...] = ("scienceworld",)
    """Environment kinds to host (names from `envhub.core.registry.kinds()`)."""
    environment_config: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Environment name -> its server-side configuration (`EnvironmentKind.from_config`)."""
    host: str = "localhost"
    """Address to bind; "0.0.0.0" or "[::]" to serve other machines."""
    port: int = 50051
    """Port to bind; 0 picks a free one (tests)."""
    workers: int = 1
    """Worker processes per environment kind."""
    max_sessions: int = 256
    """Live sessions across all kinds; more answers RESOURCE_EXHAUSTED."""
    idle_timeout_s: float = 600.0
    """Sessions without a call for this long are closed by the reaper."""
    lost_ttl_s: float = 600.0
    """How long the id of a session lost with its worker answers UNAVAILABLE (SESSION_LOST) instead of
    NOT_FOUND (at most 4 x max_sessions such ids are kept, oldest dropped first)."""
    max_message_bytes: int = 16 * 1024 * 1024
    """gRPC receive and send message size cap."""
    max_action_bytes: int = 4096
    """Longer actions (UTF-8 bytes) answer INVALID_ARGUMENT (ACTION_TOO_LONG)."""
    max_fork: int = 64
    """Most copies one ForkSession may ask for."""
    drain_grace_s: float = 30.0
    """On SIGTERM: how long in-flight calls may take before the server exits anyway."""
    drain_migrate_s: float = 0.0
    """On SIGTERM, once in-flight calls finished: how long the server waits for clients to move its open
    sessions away (CreateSnapshot and CloseSession are still admitted) before it exits; it exits as soon
    as none is open. 0: exit once in-flight calls finished."""
    metrics_port: int | None = None
    """Port of the Prometheus /metrics endpoint (0 picks a free one; None: no endpoint)."""
    metrics_host: str = "localhost"
    """Address the metrics endpoint binds."""
    token: str | None = None
    """Shared token: when set, calls need metadata `authorization: Bearer <token>` (health is exempt)."""
    tenants_file: str | None = None
    """YAML file of tenants (tokens, client-certificate names, session quotas; `envhub.server.tenants`),
    read again on SIGHUP; instead of `token`."""
    tls_cert_file: str | None = None
    """PEM certificate chain; with `tls_key_file`, the server speaks TLS."""
    tls_key_file: str | None = None
    """PEM private key for `tls_cert_file`."""
    tls_client_ca_file: str | None = None
    """PEM CA certificate(s): with it, mutual TLS: clients must present a certificate signed by it (its
    names can identify a tenant of `tenants_file`)."""
    snapshot_key_file: str | None = None
    """File holding the snapshot HMAC signing key shared by replicas (else ENVHUB_SNAPSHOT_KEY, else random)."""
    snapshot_accept_key_files: tuple[str, ...] = ()
    """Files of further keys whose snapshots are accepted (the previous keys during a key rotation)."""
    cross_version_restore: bool = True
    """Restore a snapshot taken on another version of an environment kind by replaying its action log from the
    episode's start, verified against its digests (a replay that diverges is refused, VERSION_DIVERGED); False
    refuses every such snapshot (SNAPSHOT_MISMATCH). On by default: a verified replay reproduces every observation
    the agent saw, so a rolling update moves live sessions instead of losing them (docs/protocol.md)."""
    inline_starts: bool = False
    """Apply creates, resets, restores and forks on the worker's stepping thread even for a kind that allows
    a start thread (`EnvironmentKind.concurrent_starts`): how workers served before design note 031, kept to
    compare (`envhub bench --profile slo`) and as a way back."""
    replica_id: str = ""
    """Prefix of this server's session ids; empty picks a random one."""
    event_loop: str = "auto"
    """The front's event loop (`envhub.server.loops`): `auto` (default) uvloop where installed, else asyncio's;
    `uvloop`; `asyncio`. uvloop's loop is C, asyncio's Python: design note 025 measures both per call."""

    def __post_init__(self) -> None:
        if not self.environments:
            raise ValueError("serve at least one environment (--env)")
        if len(set(self.environments)) != len(self.environments):
            raise ValueError(f"an environment is listed twice: {list(self.environments)}")
        if self.workers < 1 or self.max_sessions < 1 or self.max_fork < 1:
            raise ValueError("workers, max_sessions and max_fork must be at least 1")
        if self.drain_grace_s < 0 or self.drain_migrate_s < 0 or self.lost_ttl_s < 0:
            raise ValueError("drain_grace_s, drain_migrate_s and lost_ttl_s must be at least 0 seconds")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("TLS needs both a certificate file and a key file")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ValueError("client certificates (mutual TLS) need the server's own TLS certificate and key")
        if self.token and self.tenants_file:
            raise ValueError("give a shared token or a tenants file, not both (a tenants file can hold that token)")
        stray = sorted(set(self.environment_config) - set(self.environments))
        if stray:
            raise ValueError(f"configuration given for environment(s) not served: {stray}")
        if "." in self.replica_id:
            raise ValueError(f"a replica id may not contain '.': {self.replica_id!r}")
        if self.event_loop not in EVENT_LOOPS:
            raise ValueError(f"unknown event loop {self.event_loop!r}: one of {', '.join(EVENT_LOOPS)}")
