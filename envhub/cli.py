"""The `envhub` command: `serve` (default), `prepare`, `play`, `bench` and `retriever` (Search-QA)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from envhub import prepare as preparing
from envhub import telemetry
from envhub.core.errors import EnvhubError
from envhub.envs.searchqa import cli as searchqa_cli
from envhub.telemetry import EXPORTERS, FORMATS, make_provider

if TYPE_CHECKING:
    from envhub.server.config import ServerConfig

DEFAULT_ENV = "scienceworld"


def _serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help="run a server (the default command)")
    p.add_argument(
        "--env",
        action="append",
        help=f"environment to host: a name from `envhub.core.registry.kinds()` (built-ins, entry points) or "
        f"module:Class (repeatable; default {DEFAULT_ENV})",
    )
    p.add_argument(
        "--env-config",
        action="append",
        default=[],
        help="YAML file mapping environment name -> its settings, e.g. `alfworld: {rooms: small}` (repeatable)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="ENV.KEY=VALUE",
        help="one environment setting, e.g. alfworld.rooms=small or alfworld.data=/data/alfworld (repeatable; "
        "overrides --env-config); ListEnvironments shows the settings in effect",
    )
    p.add_argument("--host", default="localhost", help="address to bind (0.0.0.0 for other machines)")
    p.add_argument("--port", type=int, default=50051)
    p.add_argument("--workers", type=int, default=1, help="worker processes per environment")
    p.add_argument(
        "--inline-starts",
        action="store_true",
        help="apply creates, resets, restores and forks on each worker's stepping thread even where the kind "
        "allows them their own thread (how workers served before design note 031; to compare)",
    )
    p.add_argument("--max-sessions", type=int, default=256)
    p.add_argument("--idle-timeout", type=float, default=600.0, help="seconds before an idle session is closed")
    p.add_argument(
        "--lost-ttl",
        type=float,
        default=600.0,
        help="seconds the id of a session lost with its worker answers UNAVAILABLE SESSION_LOST (then NOT_FOUND)",
    )
    p.add_argument("--max-action-bytes", type=int, default=4096)
    p.add_argument("--max-message-bytes", type=int, default=16 * 1024 * 1024)
    p.add_argument("--drain-grace", type=float, default=30.0, help="seconds in-flight calls get on SIGTERM")
    p.add_argument(
        "--drain-migrate",
        type=float,
        default=0.0,
        help="after SIGTERM's in-flight calls: seconds clients get to move open sessions away (snapshot, close)",
    )
    p.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus /metrics on this port")
    p.add_argument("--metrics-host", default="localhost", help="address /metrics binds (0.0.0.0 for a scraper)")
    p.add_argument("--token-file", default=None, help="file with a shared token (or set ENVHUB_TOKEN)")
    p.add_argument("--tls-cert", default=None, help="PEM certificate chain (with --tls-key)")
    p.add_argument("--tls-key", default=None, help="PEM private key")
    p.add_argument(
        "--tls-client-ca",
        default=None,
        help="PEM CA: mutual TLS, every client must present a certificate it signed (with --tls-cert/--tls-key)",
    )
    p.add_argument(
        "--tenants-file",
        default=None,
        help="YAML of tenants: tokens and client-certificate names per tenant, session quotas (reloaded on SIGHUP; "
        "instead of --token-file)",
    )
    p.add_argument("--snapshot-key-file", default=None, help="HMAC key shared by replicas (or ENVHUB_SNAPSHOT_KEY)")
    p.add_argument(
        "--snapshot-accept-key-file",
        action="append",
        default=[],
        help="a previous snapshot key still accepted (key rotation; repeatable)",
    )
    p.add_argument(
        "--cross-version-restore",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="restore snapshots of another version of an environment by replay verified against their digests "
        "(default; --no-cross-version-restore refuses them with SNAPSHOT_MISMATCH)",
    )
    p.add_argument(
        "--event-loop",
        default="auto",
        help="the front's event loop: auto (default) uvloop where installed, else asyncio's; uvloop; asyncio "
        "(design note 025)",
    )
    p.add_argument("--port-file", default=None, help="write the bound port here once serving (with --port 0)")
    p.add_argument("--replica-id", default="", help="prefix of session ids (default: random)")
    p.add_argument(
        "--tracing",
        choices=("off", *EXPORTERS),
        default="off",
        help="OpenTelemetry spans per RPC and worker op: otlp (OTEL_EXPORTER_OTLP_ENDPOINT, default localhost:4317) "
        "or console; trace ids then appear in the logs (needs envhub[tracing])",
    )


def _client_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", default=DEFAULT_ENV)
    p.add_argument("--target", default=None, help="host:port of a running server (default: start one here)")
    p.add_argument("--token-file", default=None, help="file with the server's shared token (or set ENVHUB_TOKEN)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="envhub", description="gRPC servers for text environments")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--log-format", choices=FORMATS, default="text", help="json: one JSON object per line")
    sub = parser.add_subparsers(dest="command")
    _serve_parser(sub)
    preparing.prepare_parser(sub)
    play = sub.add_parser("play", help="play a task by hand")
    _client_arguments(play)
    play.add_argument("--task", default=None, help="task id, e.g. boil/0 (default: the first train task)")
    play.add_argument("--seed", type=int, default=0)
    bench = sub.add_parser("bench", help="measure latency, throughput, restore cost and memory")
    bench.add_argument("--env", default=None, help=f"environment (default {DEFAULT_ENV}; kube: searchqa)")
    bench.add_argument("--task", default=None, help="task id to step (default: the environment's bench task)")
    bench.add_argument("--out", default="docs/results", help="folder for envhub-bench-<env>.json and .md")
    bench.add_argument(
        "--profile",
        choices=("serving", "rollout", "latency", "soak", "failover", "kube", "slo", "percall", "ready"),
        default="serving",
        help="serving: latency, throughput, restore, memory; rollout: N sessions stepping once per turn "
        "through step_many, against the in-process ideal (docs/results/envhub-bench-rollout-<env>.md); "
        "latency: step p50/p99/max of concurrent clients while others create sessions "
        "(docs/results/envhub-bench-latency-<env>.md); soak: an hour of session churn per environment "
        "(--env all, or a comma-separated list, at once), RSS, fds, threads and worker restarts sampled "
        "(docs/results/envhub-soak.md); failover: the cost of failover's snapshots, and how fast the sessions of a "
        "killed replica step again (docs/results/envhub-failover-recovery.md); kube: deploy/k8s/overlays/<env> "
        "played with podman kube play, a pod killed and a rolling restart under a rollout, no episode lost "
        "(docs/results/envhub-kube-play-<env>.md); slo: p50/p99/max of step, StepBatch, create, fork, snapshot, "
        "restore and memory per session at 1,024 and 4,096 sessions beside the in-process cost "
        "(docs/results/envhub-bench-slo-<env>.md); percall: CPU per step of the server's front, worker and client "
        "and steps/s at 1, 64 and 256 sessions on the toy environment, unary, SessionStream and StepBatch, beside a "
        "minimal WebSocket server, with a profile of the front; --env also measures that environment's "
        "served/in-process step ratio (docs/results/envhub-bench-percall.md); ready (ALFWorld): cold generation "
        "by `envhub prepare` on 1 and 2 processes, steps of playing sessions meanwhile, and a fresh server's time "
        "to 1,024 sessions of 128 tasks on a prepared cache (docs/results/envhub-bench-ready-alfworld.md)",
    )
    bench.add_argument(
        "--sessions",
        type=int,
        default=None,
        help="serving: concurrent sessions for the memory figure (50); rollout, soak and failover: sessions "
        "(1,024; ScienceWorld 256; failover: over 2 replicas); kube: episodes at a time (16); slo: one count "
        "instead of 1,024 and 4,096",
    )
    bench.add_argument("--turns", type=int, default=5, help="rollout: turns")
    bench.add_argument("--group-size", type=int, default=8, help="rollout: sessions per task (G)")
    bench.add_argument("--workers", type=int, default=2, help="rollout, latency, soak: server worker processes")
    bench.add_argument("--clients", type=int, default=32, help="latency: clients stepping concurrently")
    bench.add_argument("--churners", type=int, default=4, help="latency: clients creating sessions meanwhile")
    bench.add_argument(
        "--phase-s",
        type=float,
        default=None,
        help="latency: seconds per quiet or churn phase (10); kube: seconds of quiet rollout before the kill, "
        "between the kill and the restart, and after (15)",
    )
    bench.add_argument("--steps", type=int, default=200, help="steps per latency measurement")
    bench.add_argument("--duration-s", type=float, default=3600.0, help="soak: seconds of churn (every env at once)")
    bench.add_argument("--sample-s", type=float, default=30.0, help="soak: seconds between samples")
    bench.add_argument(
        "--compare-tree",
        default=None,
        help="percall: also serve from this envhub source tree (e.g. `git archive` of an earlier commit), its "
        "calls interleaved with this tree's; failover: also kill replicas served from it (batched, cold and "
        "warm; the client moving their sessions after the failed batch), their kills interleaved with this "
        "tree's; slo: compare steps while creating on servers from it (instead of inline starts against the "
        "start thread), alternating with this tree's",
    )
    bench.add_argument(
        "--compare-loops",
        action="store_true",
        help="percall: also serve this tree on asyncio's own event loop (modes asyncio_*) beside its default loop",
    )
    bench.add_argument(
        "--client-loop",
        default="asyncio",
        help="percall: the event loop of the bench's client, every mode's and the baseline's: asyncio (default) "
        "or uvloop",
    )
    bench.add_argument("--kills", type=int, default=5, help="failover: replica kills timed per recovery mode")
    bench.add_argument(
        "--games", type=int, default=12, help="ready: cold games per generation run (1 and 2 processes, interleaved)"
    )
    bench.add_argument(
        "--recovery-only",
        action="store_true",
        help="failover: only the kills of the default recovery (batched, cold and warm) and the restores alone",
    )
    searchqa_cli.add_parser(sub)
    return parser


def _token(path: str | None) -> str | None:
    if path:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    return os.environ.get("ENVHUB_TOKEN") or None


def _serve(args: argparse.Namespace) -> int:
    from envhub.server import serve
    from envhub.server.env_config import environment_config
    from envhub.server.loops import loop_factory, run
    from envhub.server.tenants import load

    environments = tuple(args.env or [DEFAULT_ENV])
    try:
        config = _server_config(args, environments, environment_config(environments, args.env_config, args.set))
        if config.tenants_file:
            load(config.tenants_file)
        loop_factory(config.event_loop)  # uvloop asked for but not installed: say so before starting anything
    except ValueError as error:  # a bad --env, --env-config, --set, flag or tenants file: say which, no traceback
        logging.getLogger("envhub").error("cannot serve: %s", error)
        return 2
    try:
        provider = make_provider(args.tracing) if args.tracing != "off" else None
    except ValueError as error:
        logging.getLogger("envhub").error("cannot serve: %s", error)
        return 2
    try:
        run(lambda: serve(config, port_file=args.port_file, tracer_provider=provider), config.event_loop)
    except EnvhubError as error:  # an environment failed to start: say why, without a traceback
        logging.getLogger("envhub").error("cannot serve: %s", error.message)
        return 1
    return 0


def _server_config(
    args: argparse.Namespace, environments: tuple[str, ...], settings: Mapping[str, Mapping[str, Any]]
) -> ServerConfig:
    """The server settings the `serve` flags give; ValueError names a contradiction."""
    from envhub.server import ServerConfig

    return ServerConfig(
        environments=environments,
        environment_config=settings,
        host=args.host,
        port=args.port,
        workers=args.workers,
        inline_starts=args.inline_starts,
        max_sessions=args.max_sessions,
        idle_timeout_s=args.idle_timeout,
        lost_ttl_s=args.lost_ttl,
        max_action_bytes=args.max_action_bytes,
        max_message_bytes=args.max_message_bytes,
        drain_grace_s=args.drain_grace,
        drain_migrate_s=args.drain_migrate,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        token=_token(args.token_file) if args.token_file or not args.tenants_file else None,
        tls_cert_file=args.tls_cert,
        tls_key_file=args.tls_key,
        tls_client_ca_file=args.tls_client_ca,
        tenants_file=args.tenants_file,
        snapshot_key_file=args.snapshot_key_file,
        snapshot_accept_key_files=tuple(args.snapshot_accept_key_file),
        replica_id=args.replica_id,
        cross_version_restore=args.cross_version_restore,
        event_loop=args.event_loop,
    )


@contextlib.contextmanager
def _target(args: argparse.Namespace) -> Iterator[str]:
    """The given --target, or a local server started for the duration."""
    if args.target:
        yield args.target
        return
    from envhub.server.background import BackgroundServer

    print(f"starting a local {args.env} server...", file=sys.stderr)
    with BackgroundServer.local(args.env) as server:
        yield server.target


def _play(args: argparse.Namespace) -> int:
    from envhub.client import EnvhubClient
    from envhub.client.play import play

    with _target(args) as target, EnvhubClient(target, token=_token(args.token_file)) as client:
        task_id = args.task or client.list_tasks(args.env, "train")[0].task_id
        play(client, client.create_session(args.env, task=task_id, seed=args.seed, admissible=True))
    return 0


def _bench(args: argparse.Namespace) -> int:
    if args.profile == "kube":
        from envhub.bench.kube.play import KubeBenchSettings, run_kube_bench

        settings = KubeBenchSettings(
            args.env or "searchqa", args.out, args.sessions or 16, quiet_s=args.phase_s or 15.0
        )
        return 0 if run_kube_bench(settings)["passed"] else 1
    if args.profile == "percall":
        from envhub.bench.percall import PercallSettings, run_percall_bench

        run_percall_bench(
            PercallSettings(
                args.out,
                environment=args.env,
                before_tree=args.compare_tree,
                asyncio_loop=args.compare_loops,
                client_loop=args.client_loop,
            )
        )
        return 0
    if args.profile == "ready":
        from envhub.bench.ready import ReadyBenchSettings, run_ready_bench

        run_ready_bench(ReadyBenchSettings(args.out, args.sessions or 1024, workers=args.workers, games=args.games))
        return 0
    args.env = args.env or DEFAULT_ENV
    if args.profile == "slo":
        from envhub.bench.slo import SloBenchSettings, run_slo_bench

        counts = (args.sessions,) if args.sessions else SloBenchSettings.sessions
        run_slo_bench(
            SloBenchSettings(args.env, args.out, counts, args.workers, args.turns, compare_tree=args.compare_tree)
        )
        return 0
    if args.profile == "rollout":
        from envhub.bench.rollout import RolloutBenchSettings, run_rollout_bench

        run_rollout_bench(
            RolloutBenchSettings(args.env, args.out, args.sessions, args.group_size, args.turns, args.workers)
        )
        return 0
    if args.profile == "latency":
        from envhub.bench.latency import LatencyBenchSettings, run_latency_bench

        run_latency_bench(
            LatencyBenchSettings(
                args.env, args.out, args.clients, args.churners, args.phase_s or 10.0, workers=args.workers
            )
        )
        return 0
    if args.profile == "failover":
        from envhub.bench.failover import FailoverBenchSettings, run_failover_bench

        run_failover_bench(
            FailoverBenchSettings(
                args.env,
                args.out,
                args.sessions or 1024,
                args.group_size,
                workers=args.workers,
                kills=args.kills,
                recovery_only=args.recovery_only,
                compare_tree=args.compare_tree,
            )
        )
        return 0
    if args.profile == "soak":
        from envhub.bench.run import PROFILES
        from envhub.bench.soak import SoakSettings, run_soak

        names = tuple(PROFILES) if args.env == "all" else tuple(args.env.split(","))
        run_soak(SoakSettings(names, args.out, args.duration_s, args.sample_s, args.sessions, args.workers))
        return 0
    from envhub.bench.run import BenchSettings, run_bench

    run_bench(BenchSettings(args.env, args.task, args.out, args.sessions or 50, args.steps))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `envhub` script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args = parser.parse_args(argv or ["serve"])
    if args.command is None:
        args = parser.parse_args([*argv, "serve"])
    telemetry.configure_logs(args.log_level, args.log_format, trace_ids=getattr(args, "tracing", "off") != "off")
    commands = {
        "serve": _serve,
        "prepare": preparing.run,
        "play": _play,
        "bench": _bench,
        "retriever": searchqa_cli.run,
    }
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
