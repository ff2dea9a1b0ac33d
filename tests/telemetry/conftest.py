"""In-memory OpenTelemetry for the telemetry tests.

The API's global providers can be set once per process, so one SDK tracer provider (with an
in-memory span exporter) and one meter provider (with an in-memory metric reader) are installed
for the session; each test starts from an empty exporter. A server started while they are
installed sees a host SDK provider and turns its telemetry on. The "disabled" case runs in a
subprocess, where nothing is installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@dataclass
class Otel:
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name == name]

    def points(self, metric: str) -> list[tuple[dict[str, Any], Any]]:
        """(attributes, data point) of every point of ``metric`` collected now."""
        data = self.reader.get_metrics_data()
        out: list[tuple[dict[str, Any], Any]] = []
        if data is None:
            return out
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == metric:
                        out.extend((dict(p.attributes or {}), p) for p in m.data.data_points)
        return out


_INSTALLED: list[Otel] = []


def _install() -> Otel:
    if not _INSTALLED:
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        assert trace.get_tracer_provider() is provider, "another test installed a tracer provider first"
        _INSTALLED.append(Otel(exporter, reader))
    return _INSTALLED[0]


@pytest.fixture
def otel() -> Iterator[Otel]:
    o = _install()
    o.exporter.clear()
    o.reader.get_metrics_data()  # cumulative; tests compare before/after where it matters
    yield o
    o.exporter.clear()
