"""The telemetry server interceptor: one SERVER span and one duration measurement per RPC.

The span follows the OpenTelemetry RPC conventions — named ``engram.v1.MemoryService/AddMemory``,
with ``rpc.system``, ``rpc.service``, ``rpc.method`` and ``rpc.grpc.status_code`` — and continues
the caller's trace from the ``traceparent`` metadata (the global propagator, W3C trace context by
default). Unlike the contrib instrumentation it records the real status of calls ended with
``context.abort_with_status`` (every Engram error is one): after the ``AbortError`` the context
holds the code, and the ``google.rpc.Status`` in the trailers gives the ``ErrorInfo.reason``,
set as ``engram.error.reason``.

Cheap by construction: installed only when telemetry is on; the wrapped handler is built once
per method and cached; health and reflection are passed through untouched.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import SpanKind, Status, StatusCode

from engram_server import telemetry
from engram_server.api.wrapping import WrappingInterceptor

GRPC_DETAILS_KEY = "grpc-status-details-bin"

#: Server-side codes that mark the span as an error (RPC semantic conventions: the server's
#: fault, not the caller's).
SERVER_ERROR_CODES = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)

Behavior = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]


class _MetadataGetter(Getter[Any]):
    """Reads gRPC invocation metadata (a sequence of (key, value) pairs) for the propagator."""

    def get(self, carrier: Any, key: str) -> list[str] | None:
        values = [v for k, v in carrier if k == key and isinstance(v, str)]
        return values or None

    def keys(self, carrier: Any) -> list[str]:
        return [k for k, _ in carrier]


_GETTER = _MetadataGetter()


def error_reason(trailing_metadata: Iterable[tuple[str, str | bytes]] | None) -> str:
    """The ``ErrorInfo.reason`` of the rich status in the trailers, or ``""``."""
    for key, value in trailing_metadata or ():
        if key != GRPC_DETAILS_KEY or not isinstance(value, bytes):
            continue
        try:
            status = status_pb2.Status.FromString(value)
        except Exception:
            return ""
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                return str(info.reason)
    return ""


class TelemetryInterceptor(WrappingInterceptor):
    """A ``grpc.aio`` server interceptor tracing and timing unary-unary calls."""

    def __init__(
        self,
        *,
        excluded_services: Iterable[str] = telemetry.DEFAULT_EXCLUDED_SERVICES,
        record_content: bool = False,
        tracer: trace.Tracer | None = None,
    ) -> None:
        super().__init__()
        self._excluded = frozenset(excluded_services)
        self._record_content = record_content
        self._tracer = tracer or telemetry.tracer

    def _wrap(self, full_method: str, handler: grpc.RpcMethodHandler | None) -> grpc.RpcMethodHandler:
        if handler is None or handler.unary_unary is None:
            return handler  # unknown method or streaming: untouched
        service, _, method = full_method.lstrip("/").partition("/")
        if service in self._excluded:
            return handler
        return grpc.unary_unary_rpc_method_handler(
            self._behavior(full_method.lstrip("/"), service, method, handler.unary_unary),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _behavior(self, name: str, service: str, method: str, inner: Behavior) -> Behavior:
        tracer = self._tracer
        record_content = self._record_content
        static = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method}
        histogram = telemetry.rpc_duration
        ok_attributes = {**static, "rpc.grpc.status_code": grpc.StatusCode.OK.value[0]}
        perf_counter = time.perf_counter

        async def behavior(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            start = perf_counter()
            metadata = context.invocation_metadata()
            parent = propagate.extract(metadata, getter=_GETTER) if metadata else None
            span = tracer.start_span(name, context=parent, kind=SpanKind.SERVER, attributes=static)
            token = otel_context.attach(trace.set_span_in_context(span, parent))
            code = grpc.StatusCode.OK
            try:
                if record_content and span.is_recording():
                    _record_request(span, request)
                response = await inner(request, context)
                set_code = context.code()
                if set_code is not None and set_code is not grpc.StatusCode.OK:
                    code = set_code
                return response
            except grpc.aio.AbortError:
                code = context.code() or grpc.StatusCode.UNKNOWN
                reason = error_reason(context.trailing_metadata())
                if reason:
                    span.set_attribute("engram.error.reason", reason)
                raise
            except asyncio.CancelledError:
                code = grpc.StatusCode.CANCELLED
                raise
            except BaseException as exc:
                code = grpc.StatusCode.UNKNOWN
                span.record_exception(exc)
                raise
            finally:
                otel_context.detach(token)
                if code is grpc.StatusCode.OK:
                    span.set_attribute("rpc.grpc.status_code", 0)
                    span.end()
                    histogram.record(perf_counter() - start, ok_attributes)
                else:
                    number = code.value[0]
                    span.set_attribute("rpc.grpc.status_code", number)
                    span.set_attribute("error.type", code.name)
                    if code in SERVER_ERROR_CODES:
                        span.set_status(Status(StatusCode.ERROR, code.name))
                    span.end()
                    histogram.record(perf_counter() - start, {**static, "rpc.grpc.status_code": number})

        return behavior


def _record_request(span: trace.Span, request: Any) -> None:
    """Only with ENGRAM_OTEL_RECORD_CONTENT: the request's text fields (content, query, locate)."""
    for fieldname in ("content", "query"):
        value = getattr(request, fieldname, None)
        if isinstance(value, str) and value:
            span.set_attribute(f"engram.request.{fieldname}", value)
    query = getattr(request, "query", None)
    if query is not None and not isinstance(query, str):
        text = getattr(query, "query", "")
        if text:
            span.set_attribute("engram.request.query", text)
    locate = getattr(request, "locate", None)
    text = getattr(locate, "content", None)
    if isinstance(text, str) and text:
        span.set_attribute("engram.request.locate", text)
