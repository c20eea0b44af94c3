"""Request bytes -> messages without letting a malformed request become an UNKNOWN with a traceback.

gRPC's generated registration parses request bytes before the handler runs and turns a parse
failure into an UNKNOWN status with a traceback in the log. `handlers` registers the service
with a lenient parser instead: bytes that do not parse (garbage, invalid UTF-8 in a string
field) become a `Malformed` value, which the service answers with INVALID_ARGUMENT
(MALFORMED_REQUEST) and at most one log line per `LOG_INTERVAL_S`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import descriptor, message_factory
from google.protobuf.message import Message

from envhub.core import errors

log = logging.getLogger(__name__)
LOG_INTERVAL_S = 10.0


@dataclass(frozen=True)
class Malformed:
    """Request bytes that did not parse as the method's request message."""

    message_type: str
    detail: str

    def error(self) -> errors.EnvhubError:
        return errors.invalid_argument(
            f"the request is not a valid {self.message_type}: {self.detail}", "MALFORMED_REQUEST"
        )


class RateLimitedLog:
    """Logs malformed requests at most once per `interval` seconds, with a count of the ones not logged."""

    def __init__(self, interval: float = LOG_INTERVAL_S) -> None:
        self._interval = interval
        self._next = 0.0
        self._skipped = 0

    def note(self, malformed: Malformed) -> None:
        now = time.monotonic()
        if now < self._next:
            self._skipped += 1
            return
        more = f" (and {self._skipped} more since the last report)" if self._skipped else ""
        log.warning("refused a malformed %s: %s%s", malformed.message_type, malformed.detail, more)
        self._next, self._skipped = now + self._interval, 0


def lenient_parser(message_class: type[Message]) -> Callable[[bytes], Message | Malformed]:
    """A request deserializer that returns `Malformed` instead of raising."""
    name = message_class.DESCRIPTOR.full_name

    def parse(data: bytes) -> Message | Malformed:
        try:
            return message_class.FromString(data)
        except Exception as exc:  # DecodeError, or invalid UTF-8 reported as another error by some backends
            return Malformed(name, str(exc) or type(exc).__name__)

    return parse


def handlers(service: descriptor.ServiceDescriptor, servicer: Any) -> grpc.GenericRpcHandler:
    """The generic handler of `service` over `servicer`'s methods, parsing requests leniently."""
    methods = {}
    for method in service.methods:
        request = message_factory.GetMessageClass(method.input_type)
        response = message_factory.GetMessageClass(method.output_type)
        kwargs = {
            "request_deserializer": lenient_parser(request),
            "response_serializer": response.SerializeToString,
        }
        behaviour = getattr(servicer, method.name)
        if method.client_streaming and method.server_streaming:
            methods[method.name] = grpc.stream_stream_rpc_method_handler(behaviour, **kwargs)
        elif method.client_streaming or method.server_streaming:
            raise ValueError(f"{method.full_name}: only unary and bidirectional methods are supported")
        else:
            methods[method.name] = grpc.unary_unary_rpc_method_handler(behaviour, **kwargs)
    return grpc.method_handlers_generic_handler(service.full_name, methods)
