"""Shared-token authentication: a server interceptor checking `authorization: Bearer <token>`."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio

from envhub.core import errors
from envhub.core.status import to_status

EXEMPT_PREFIXES = ("/grpc.health.v1.Health/",)
"""Methods callable without a token (load balancer and kubelet probes cannot send one)."""


class TokenAuthInterceptor(grpc.aio.ServerInterceptor):
    """Refuses calls without the shared token with UNAUTHENTICATED."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    def _authorized(self, details: grpc.HandlerCallDetails) -> bool:
        for key, value in details.invocation_metadata or ():
            if key == "authorization":
                given = value.encode() if isinstance(value, str) else value
                return hmac.compare_digest(given, self._expected)
        return False

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(EXEMPT_PREFIXES):
            return handler
        if self._authorized(handler_call_details):
            return handler
        return _denying(handler)


def _denying(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of the same shape as `handler` that aborts with UNAUTHENTICATED."""
    status = to_status(
        errors.EnvhubError(
            grpc.StatusCode.UNAUTHENTICATED,
            "this server needs metadata 'authorization: Bearer <token>' (envhub client: token=...)",
            "MISSING_OR_BAD_TOKEN",
        )
    )

    async def deny(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await context.abort_with_status(status)

    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(deny, **kwargs)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(deny, **kwargs)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(deny, **kwargs)
    return grpc.unary_unary_rpc_method_handler(deny, **kwargs)
