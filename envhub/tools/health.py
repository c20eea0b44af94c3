"""Container health check over the standard gRPC health protocol (grpc.health.v1.Health/Check).

    python -m envhub.tools.health [HOST:PORT] [--service NAME] [--timeout S]

Exits 0 when the server answers SERVING, 1 otherwise (NOT_SERVING while draining, unreachable,
timed out), printing the status: what a Dockerfile HEALTHCHECK or an exec probe needs, without
a grpcurl binary in the image. Kubernetes uses its native gRPC probe instead.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def check(target: str, service: str = "", timeout: float = 3.0) -> str:
    """The health status name of `service` at `target` ("SERVING", "NOT_SERVING", ...) or the gRPC error code."""
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as error:
            return str(error.code().name)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: exit status 0 only for SERVING."""
    parser = argparse.ArgumentParser(prog="python -m envhub.tools.health", description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", default="localhost:50051")
    parser.add_argument("--service", default="", help='service name ("" is the whole server)')
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the answer")
    args = parser.parse_args(argv)
    status = check(args.target, args.service, args.timeout)
    print(status)
    return 0 if status == "SERVING" else 1


if __name__ == "__main__":
    sys.exit(main())
