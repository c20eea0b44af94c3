"""Authentication: every call but health checks is made by a known tenant (`envhub.server.tenants`).

`AuthInterceptor` wraps each handler so that, before it runs, the caller is identified from its
`authorization: Bearer <token>` metadata or its verified client certificate (both need the
call's context, which a gRPC interceptor alone does not see); an unknown caller is refused with
UNAUTHENTICATED (MISSING_OR_BAD_TOKEN) and the handler never runs. The service asks `caller()`
for the tenant of each call.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio

from envhub.core import errors
from envhub.core.status import to_status
from envhub.server.tenants import Tenant, Tenants

EXEMPT_PREFIXES = ("/grpc.health.v1.Health/",)
"""Methods callable without credentials (load balancer and kubelet probes cannot send them)."""
_BEARER = b"Bearer "
MAX_GUARDED = 1024
"""Guarded handlers kept for reuse (the server's methods number a few dozen; this bounds the table)."""


def _token(context: grpc.aio.ServicerContext[Any, Any]) -> bytes | None:
    """The bearer token of the call (b"" for an `authorization` value of another form), None without one."""
    for key, value in context.invocation_metadata() or ():
        if key == "authorization":
            given = value.encode() if isinstance(value, str) else value
            return given[len(_BEARER) :] if given.startswith(_BEARER) else b""
    return None


def caller(tenants: Tenants, context: grpc.aio.ServicerContext[Any, Any]) -> Tenant:
    """The tenant making the call; UNAUTHENTICATED (MISSING_OR_BAD_TOKEN) when its credentials name none."""
    directory = tenants.directory
    if directory.open:  # no credentials to read
        return directory.tenants[0]
    token = _token(context)
    names = [name.decode() for name in context.peer_identities() or ()] if token is None else []
    tenant = directory.identify(token, names)
    if tenant is None:
        raise errors.EnvhubError(
            grpc.StatusCode.UNAUTHENTICATED,
            "this server needs metadata 'authorization: Bearer <token>' with a token it knows, or a client "
            "certificate its tenants file names (envhub client: token=... or tls=MutualTls(...))",
            "MISSING_OR_BAD_TOKEN",
        )
    return tenant


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Refuses calls of unknown callers with UNAUTHENTICATED before their handler runs."""

    def __init__(self, tenants: Tenants) -> None:
        self._tenants = tenants
        self._guarded: dict[grpc.RpcMethodHandler, grpc.RpcMethodHandler] = {}
        """Handler -> its guarded form, made once (the service's handlers are the same objects at every call)."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(EXEMPT_PREFIXES):
            return handler
        guarded = self._guarded.get(handler)
        if guarded is None:
            guarded = _guarded(handler, self._tenants)
            if len(self._guarded) < MAX_GUARDED:
                self._guarded[handler] = guarded
        return guarded


async def _admit(tenants: Tenants, context: grpc.aio.ServicerContext[Any, Any]) -> None:
    try:
        caller(tenants, context)
    except errors.EnvhubError as error:
        await context.abort_with_status(to_status(error))


def _guarded(handler: grpc.RpcMethodHandler, tenants: Tenants) -> grpc.RpcMethodHandler:
    """`handler` with its behaviour run only for a known caller."""
    field = (
        ("stream" if handler.request_streaming else "unary")
        + "_"
        + ("stream" if handler.response_streaming else "unary")
    )
    behaviour = getattr(handler, field)
    if inspect.isasyncgenfunction(behaviour):

        async def answers(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            await _admit(tenants, context)
            async for response in behaviour(request, context):
                yield response

        return handler._replace(**{field: answers})

    async def answer(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await _admit(tenants, context)
        return await behaviour(request, context)

    return handler._replace(**{field: answer})
