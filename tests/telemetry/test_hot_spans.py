"""The spans a search opens cost nothing when nothing records them, and are recorded as before
when a tracer provider is installed (``telemetry.span``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from opentelemetry import trace

from engram_server import telemetry
from tests.telemetry.conftest import Otel


def test_without_a_provider_the_span_is_a_shared_no_op() -> None:
    """In a process with no SDK provider (a subprocess: this one has the tests' provider), the
    helper hands out one shared context whose span records nothing and attaches no context."""
    code = textwrap.dedent(
        """
        from opentelemetry import context, trace
        from engram_server import telemetry
        tracer = trace.get_tracer("t")
        assert not telemetry.tracing_installed()
        before = context.get_current()
        a = telemetry.span(tracer, "engram.rank", attributes={"engram.candidates": 3})
        b = telemetry.span(tracer, "engram.storage.query", kind=trace.SpanKind.CLIENT)
        assert a is b
        with a as span:
            assert not span.is_recording() and not span.get_span_context().is_valid
            span.set_attribute("engram.returned", 1)
            assert context.get_current() is before
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_with_a_provider_the_span_is_recorded(otel: Otel) -> None:
    assert telemetry.tracing_installed()
    tracer = trace.get_tracer("engram_server.domain")
    with telemetry.span(
        tracer, "engram.storage.query", kind=trace.SpanKind.CLIENT, attributes={"engram.candidates": 7}
    ) as span:
        assert span.is_recording()
        assert trace.get_current_span() is span
        span.set_attribute("db.response.returned_rows", 5)
    (done,) = otel.named("engram.storage.query")
    assert done.kind is trace.SpanKind.CLIENT
    assert dict(done.attributes or {}) == {"engram.candidates": 7, "db.response.returned_rows": 5}
