"""The transport seam: what moves a `Call`'s messages, with nothing typed above it.

A transport's `send(call)` returns the raw response message (pages of a listing merged)
after the retries the `RetryPolicy` allows, or raises `EnvhubError`. The typed methods
(`envhub.client.calls`) sit on top, so every transport serves the whole API:

* `ChannelTransport`: blocking unary calls on one server.
* `AioChannelTransport`: asyncio unary calls on one server.
* `envhub.client.stream.StreamTransport`: asyncio, session calls multiplexed on one SessionStream.
* `envhub.client.pool.PoolTransport`: blocking, routing each call to the replica owning its session.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
import grpc.aio
from google.protobuf import message_factory
from google.protobuf.message import Message

from envhub.client import channel
from envhub.client.calls import Call
from envhub.client.errors import from_rpc_error
from envhub.client.retry import DEFAULT_POLICY, RetryPolicy
from envhub.v1 import envhub_pb2

DEFAULT_TIMEOUT_S = 60.0
SERVICE = envhub_pb2.DESCRIPTOR.services_by_name["EnvHub"]


class Transport(Protocol):
    """A blocking transport."""

    def send(self, call: Call[Any]) -> Message: ...

    def close(self) -> None: ...


class AsyncTransport(Protocol):
    """An asyncio transport."""

    async def send(self, call: Call[Any]) -> Message: ...

    async def open(self) -> None: ...

    async def aclose(self, cancel: bool = False) -> None: ...


def _unary_methods(make: Callable[..., Any]) -> dict[str, Any]:
    """One callable per EnvHub unary RPC, made by `channel.unary_unary`-like `make`."""
    methods = {}
    for method in SERVICE.methods:
        if not method.client_streaming:
            response = message_factory.GetMessageClass(method.output_type)
            methods[method.name] = make(
                f"/{SERVICE.full_name}/{method.name}",
                request_serializer=lambda message: message.SerializeToString(),
                response_deserializer=response.FromString,
            )
    return methods


def _merge_pages(call: Call[Any], send_page: Callable[[Message], Message]) -> Message:
    """Every page of `call` (one for most calls) merged into one response."""
    request: Message | None = call.request
    merged: Message | None = None
    while request is not None:
        response = send_page(request)
        if merged is None:
            merged = response
        else:
            merged.MergeFrom(response)
        request = call.next_page(request, response) if call.next_page else None
    assert merged is not None
    return merged


@dataclass(frozen=True)
class Settings:
    """How a client connects: shared token, TLS, default per-attempt timeout, retry policy, and how
    soon its channels find a server gone (`channel.Liveness`: keepalive, connect deadline)."""

    token: str | None = None
    tls: channel.Tls = None
    timeout: float = DEFAULT_TIMEOUT_S
    policy: RetryPolicy = DEFAULT_POLICY
    liveness: channel.Liveness = channel.DEFAULT_LIVENESS


class _Unary:
    """What both unary transports hold: the channel's methods, call metadata, default timeout, retry policy."""

    def __init__(self, target: str, methods: Any, settings: Settings) -> None:
        self._methods = _unary_methods(methods)
        self.metadata = channel.call_metadata(settings.token)
        self.target = target
        self.timeout = settings.timeout
        self.policy = settings.policy


class ChannelTransport(_Unary):
    """Blocking unary calls on one server, retried by `policy`.

    `interceptors` (grpc client interceptors) wrap the channel: tracing, or fault injection in tests.
    """

    def __init__(
        self,
        target: str,
        settings: Settings = Settings(),
        interceptors: Sequence[grpc.UnaryUnaryClientInterceptor] = (),
    ) -> None:
        self._channel: grpc.Channel = channel.open_channel(grpc, target, settings.tls, settings.liveness)
        self._wrapped = grpc.intercept_channel(self._channel, *interceptors) if interceptors else self._channel
        super().__init__(target, self._wrapped.unary_unary, settings)

    def send(self, call: Call[Any]) -> Message:
        return _merge_pages(call, lambda request: self._attempts(call, request))

    def _attempts(self, call: Call[Any], request: Message) -> Message:
        method = self._methods[call.method]
        for attempt in itertools.count():
            try:
                response: Message = method(request, timeout=call.timeout or self.timeout, metadata=self.metadata)
                return response
            except grpc.RpcError as exc:
                error = from_rpc_error(exc)
                if not self.policy.should_retry(call.retry, error, attempt):
                    raise error from None
            time.sleep(self.policy.delay_s(attempt))
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._channel.close()


class AioChannelTransport(_Unary):
    """asyncio unary calls on one server, retried by `policy` (create it inside a running loop)."""

    def __init__(self, target: str, settings: Settings = Settings()) -> None:
        self.channel: grpc.aio.Channel = channel.open_channel(grpc.aio, target, settings.tls, settings.liveness)
        super().__init__(target, self.channel.unary_unary, settings)

    async def send(self, call: Call[Any]) -> Message:
        request: Message | None = call.request
        merged: Message | None = None
        while request is not None:  # the pages of `_merge_pages`, awaited
            response = await self._attempts(call, request)
            merged = response if merged is None else _merged(merged, response)
            request = call.next_page(request, response) if call.next_page else None
        assert merged is not None
        return merged

    async def _attempts(self, call: Call[Any], request: Message) -> Message:
        method = self._methods[call.method]
        for attempt in itertools.count():
            try:
                response: Message = await method(request, timeout=call.timeout or self.timeout, metadata=self.metadata)
                return response
            except grpc.aio.AioRpcError as exc:
                error = from_rpc_error(exc)
                if not self.policy.should_retry(call.retry, error, attempt):
                    raise error from None
            await asyncio.sleep(self.policy.delay_s(attempt))
        raise AssertionError("unreachable")

    async def open(self) -> None:
        """Nothing to open: unary calls need no setup."""

    async def aclose(self, cancel: bool = False) -> None:
        await self.channel.close()


def _merged(first: Message, more: Message) -> Message:
    first.MergeFrom(more)
    return first
