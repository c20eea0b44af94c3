"""The floor of a Python gRPC server, for the per-call bench: envhub's `Step` RPC with a trivial handler.

It answers `/envhub.v1.EnvHub/Step` (the same messages as envhub's, so the same client loop drives it)
with the observation the toy environment's step carries (action text and a per-session step counter),
and nothing else: no workers, no sessions table, no auth, no exactly-once bookkeeping, no metrics, no
interceptors; it accepts the client's keepalive pings as envhub's server does (`KEEPALIVE_OPTIONS`).
Two servers, the two ways Python serves gRPC:

* `aio`: `grpc.aio.server()`, the handler a coroutine on one asyncio loop (what envhub's front uses);
* `sync`: `grpc.server(ThreadPoolExecutor(threads))`, the handler a plain function on a thread pool.

What either costs per call is what the best Python gRPC front could cost, whatever envhub does around it.
Run as `python -m envhub.bench.grpc_echo {aio|sync} PORT_FILE [THREADS]` (it binds port 0 and writes the
port there).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from envhub.server.app import KEEPALIVE_OPTIONS
from envhub.v1 import envhub_pb2 as pb

METHOD = "Step"
SYNC_THREADS = 8
"""Threads of the synchronous server's pool (more only adds GIL hand-offs on a small machine)."""


class _Echo:
    """The trivial step: the action and a per-session step counter."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def step(self, request: pb.StepRequest) -> pb.StepResponse:
        count = self._counts.get(request.session_id, 0) + 1
        self._counts[request.session_id] = count
        observation = pb.Observation(text=f"{request.action} {count}", step_index=count)
        return pb.StepResponse(result=pb.StepResult(observation=observation))


def _handler(behaviour: Any) -> grpc.GenericRpcHandler:
    method = grpc.unary_unary_rpc_method_handler(
        behaviour, request_deserializer=pb.StepRequest.FromString, response_serializer=pb.StepResponse.SerializeToString
    )
    return grpc.method_handlers_generic_handler("envhub.v1.EnvHub", {METHOD: method})


async def _serve_aio(port_file: str) -> None:
    echo = _Echo()

    async def step(request: pb.StepRequest, context: Any) -> pb.StepResponse:
        return echo.step(request)

    server = grpc.aio.server(options=KEEPALIVE_OPTIONS)
    server.add_generic_rpc_handlers((_handler(step),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    stopping: set[asyncio.Task[None]] = set()  # SIGTERM returns from here (`envhub.bench.profiled` then writes)
    asyncio.get_running_loop().add_signal_handler(
        signal.SIGTERM, lambda: stopping.add(asyncio.create_task(server.stop(None)))
    )
    Path(port_file).write_text(f"{port}\n", encoding="utf-8")
    await server.wait_for_termination()


def _serve_sync(port_file: str, threads: int) -> None:
    echo = _Echo()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=threads), options=KEEPALIVE_OPTIONS)
    server.add_generic_rpc_handlers((_handler(lambda request, context: echo.step(request)),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    Path(port_file).write_text(f"{port}\n", encoding="utf-8")
    server.wait_for_termination()


def main(argv: list[str]) -> None:
    """`{aio|sync} PORT_FILE [THREADS]`."""
    kind, port_file, *rest = argv
    if kind == "aio":
        asyncio.run(_serve_aio(port_file))
    elif kind == "sync":
        _serve_sync(port_file, int(rest[0]) if rest else SYNC_THREADS)
    else:
        raise SystemExit(f"unknown server kind {kind!r}: aio or sync")


if __name__ == "__main__":
    main(sys.argv[1:])
