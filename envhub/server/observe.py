"""`RpcObserver`: every RPC counted and timed by method and status code, and traced when tracing is on.

It is the server's outermost interceptor, so each call is seen with the code it ended with:
refused by the token check (UNAUTHENTICATED), aborted by the service with its rich status,
cancelled by the client, or OK. A unary call is timed to its answer, a SessionStream from open
to close; the calls inside a stream are observed one by one by the service, as method
`SessionStream.<call>` (`Metrics.rpc`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeAlias

import grpc
import grpc.aio

from envhub.server.metrics import Metrics
from envhub.server.tracing import Tracing

Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]
MAX_OBSERVED = 1024
"""Observed handlers kept for reuse (the server's methods number a few dozen; this bounds the table)."""


class RpcObserver(grpc.aio.ServerInterceptor):
    """Per-RPC request counts, latency histograms and (opt-in) spans."""

    def __init__(self, metrics: Metrics, tracing: Tracing) -> None:
        self._metrics = metrics
        self._tracing = tracing
        self._observed: dict[tuple[str, grpc.RpcMethodHandler], grpc.RpcMethodHandler] = {}
        """(method, its handler) -> the observed handler: made once, not at every call (a handler from the
        service's table is the same object every time)."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:  # an unknown method: gRPC answers UNIMPLEMENTED itself
            return handler
        key = (handler_call_details.method, handler)
        observed = self._observed.get(key)
        if observed is None:
            observed = self._observe(handler_call_details.method, handler)
            if len(self._observed) < MAX_OBSERVED:
                self._observed[key] = observed
        return observed

    def _observe(self, full_method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        service, _, method = full_method.lstrip("/").rpartition("/")
        make = {
            (False, False): grpc.unary_unary_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler,
        }[(handler.request_streaming, handler.response_streaming)]
        behaviour = handler.stream_stream or handler.unary_stream or handler.stream_unary or handler.unary_unary
        observed = self._wrap(behaviour, service, method)
        if observed is None:  # a synchronous behaviour (none of ours): leave it as it is
            return handler
        return make(
            observed,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _wrap(self, behaviour: Any, service: str, method: str) -> Any | None:
        if inspect.isasyncgenfunction(behaviour):

            async def streamed(request: Any, context: Context) -> AsyncIterator[Any]:
                with self._observing(service, method, context):
                    async for response in behaviour(request, context):
                        yield response

            return streamed
        if inspect.iscoroutinefunction(behaviour):

            async def answered(request: Any, context: Context) -> Any:
                with self._observing(service, method, context):
                    return await behaviour(request, context)

            return answered
        return None

    @contextlib.contextmanager
    def _observing(self, service: str, method: str, context: Context) -> Iterator[None]:
        started = time.perf_counter()
        code = grpc.StatusCode.OK
        spans = self._tracing.rpc(service, method, context.invocation_metadata()) if self._tracing.enabled else _NO_SPAN
        with spans as span:
            try:
                yield
                code = _code(context) or grpc.StatusCode.OK
            except asyncio.CancelledError:
                code = grpc.StatusCode.CANCELLED
                raise
            except grpc.aio.AbortError:
                code = _code(context) or grpc.StatusCode.UNKNOWN
                raise
            except Exception:
                code = grpc.StatusCode.UNKNOWN
                raise
            finally:
                self._tracing.finish(span, code)
                self._metrics.rpc(service, method, code, time.perf_counter() - started)


_NO_SPAN = contextlib.nullcontext()
"""Tracing off: no span, and the call's metadata is not read."""
_CODES = {code.value[0]: code for code in grpc.StatusCode}


def _code(context: Context) -> grpc.StatusCode | None:
    """The status code the handler set or aborted with (aio contexts report it as a StatusCode or an int)."""
    code = context.code()
    if code is None or isinstance(code, grpc.StatusCode):
        return code
    return _CODES.get(int(code), grpc.StatusCode.UNKNOWN)
