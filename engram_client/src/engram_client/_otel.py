"""Optional OpenTelemetry: trace context sent with every call, and one CLIENT span per call.

Nothing here is required: without ``opentelemetry-api`` (``pip install engram-client[otel]``) the
client sends no trace context and makes no spans. With the API but no SDK the span is the API's
non-recording no-op, which still passes an incoming trace context through to the server.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import grpc

from engram_client.errors import EngramError

propagate: ModuleType | None
trace: ModuleType | None
try:
    from opentelemetry import propagate, trace
except ImportError:  # the [otel] extra is not installed
    propagate = None
    trace = None

SERVICE = "engram.v1.MemoryService"
# A proxy until an SDK tracer provider is installed, then that provider's tracer.
_tracer = None if trace is None else trace.get_tracer("engram_client", "0.1.0a1")


def trace_metadata(metadata: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """``metadata`` plus the current trace context (``traceparent``, ``tracestate``, ``baggage``)."""
    if propagate is None:
        return metadata
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return (*metadata, *carrier.items()) if carrier else metadata


class CallSpan:
    """The CLIENT span of one call (all its attempts), or nothing when OpenTelemetry is absent."""

    __slots__ = ("span",)

    def __init__(self, span: Any) -> None:
        self.span = span

    def retry(self, attempt: int, error: EngramError, delay: float) -> None:
        if self.span is not None and self.span.is_recording():
            attributes: dict[str, Any] = {
                "engram.attempt": attempt,
                "rpc.grpc.status_code": error.code.value[0],
                "engram.retry.delay_s": delay,
            }
            if error.reason:
                attributes["engram.error.reason"] = error.reason
            self.span.add_event("engram.retry", attributes)

    def finish(self, attempts: int, error: EngramError | None = None) -> None:
        """Record the outcome: ``error`` is what the call raises (None: it returned)."""
        span = self.span
        if span is None or not span.is_recording():
            return
        code = grpc.StatusCode.OK if error is None else error.code
        span.set_attribute("rpc.grpc.status_code", code.value[0])
        if attempts > 1:
            span.set_attribute("engram.attempts", attempts)
        if error is not None:
            assert trace is not None
            span.set_attribute("error.type", code.name)
            if error.reason:
                span.set_attribute("engram.error.reason", error.reason)
            span.set_status(trace.StatusCode.ERROR, error.message)


def peer_attributes(target: str) -> dict[str, Any]:
    """``server.address`` / ``server.port`` of a ``host:port`` target."""
    host, colon, port = target.rpartition(":")
    if colon and port.isdigit():
        return {"server.address": host.strip("[]"), "server.port": int(port)}
    return {"server.address": target}


@contextlib.contextmanager
def call_span(method: str, peer: dict[str, Any]) -> Iterator[CallSpan]:
    """A CLIENT span ``engram.v1.MemoryService/<method>``, current while the call runs so that
    :func:`trace_metadata` sends its context (and the server's span becomes its child)."""
    if trace is None or _tracer is None:
        yield CallSpan(None)
        return
    with _tracer.start_as_current_span(
        f"{SERVICE}/{method}",
        kind=trace.SpanKind.CLIENT,
        attributes={"rpc.system": "grpc", "rpc.service": SERVICE, "rpc.method": method, **peer},
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield CallSpan(span)
