"""Which exporters the settings and OTEL_* variables select, and the JSON log lines."""

from __future__ import annotations

import io
import json
import logging

import pytest
from opentelemetry import trace

from engram_server.config import ConfigError, Settings, load_settings
from engram_server.telemetry import (
    DEFAULT_EXCLUDED_SERVICES,
    JsonFormatter,
    TelemetryConfig,
    configure_logging,
    parse_levels,
)
from tests.telemetry.conftest import Otel


def resolve(env: dict[str, str] | None = None, **settings: object) -> TelemetryConfig:
    return TelemetryConfig.resolve(Settings().with_overrides(**settings), env or {})


def test_nothing_configured_is_off() -> None:
    c = resolve()
    assert (c.traces, c.metrics, c.record_content) == ((), (), False)
    assert c.excluded_services == frozenset(DEFAULT_EXCLUDED_SERVICES)


@pytest.mark.parametrize(
    ("env", "settings", "traces", "metrics", "protocol", "endpoint"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, {}, ("otlp",), ("otlp",), "grpc", None),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4317"}, {}, ("otlp",), (), "grpc", None),
        ({"OTEL_TRACES_EXPORTER": "console"}, {}, ("console",), (), "grpc", None),
        (
            {"OTEL_TRACES_EXPORTER": "otlp,console", "OTEL_METRICS_EXPORTER": "none"},
            {},
            ("otlp", "console"),
            (),
            "grpc",
            None,
        ),
        (
            {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_TRACES_EXPORTER": "otlp"},
            {},
            ("otlp",),
            (),
            "http/protobuf",
            None,
        ),
        ({}, {"otel_endpoint": "http://jaeger:4317"}, ("otlp",), ("otlp",), "grpc", "http://jaeger:4317"),
        (
            {},
            {
                "otel_endpoint": "http://j:4318",
                "otel_protocol": "http/protobuf",
                "otel_metrics_exporter": "none",
            },
            ("otlp",),
            (),
            "http/protobuf",
            "http://j:4318",
        ),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, {"otel_traces_exporter": "none"}, (), (), "grpc", None),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, {}, (), (), "grpc", None),  # unsupported: ignored, warned
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}, {}, (), (), "grpc", None),
    ],
)
def test_exporter_selection(  # noqa: PLR0917
    env: dict[str, str],
    settings: dict[str, object],
    traces: tuple[str, ...],
    metrics: tuple[str, ...],
    protocol: str,
    endpoint: str | None,
) -> None:
    c = resolve(env, **settings)
    assert (c.traces, c.metrics, c.protocol, c.endpoint) == (traces, metrics, protocol, endpoint)


def test_settings_from_environment() -> None:
    s = load_settings(
        {
            "ENGRAM_OTEL_ENDPOINT": "http://localhost:4317",
            "ENGRAM_OTEL_RECORD_CONTENT": "true",
            "ENGRAM_OTEL_EXCLUDED_SERVICES": "grpc.health.v1.Health",
            "ENGRAM_LOG_FORMAT": "json",
        }
    )
    c = TelemetryConfig.resolve(s, {})
    assert c.endpoint == "http://localhost:4317" and c.record_content
    assert c.excluded_services == {"grpc.health.v1.Health"}
    assert s.log_format == "json"


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("ENGRAM_LOG_FORMAT", "xml"),
        ("ENGRAM_OTEL_TRACES_EXPORTER", "jaeger"),
        ("ENGRAM_OTEL_PROTOCOL", "http/json"),
    ],
)
def test_bad_values(var: str, value: str) -> None:
    with pytest.raises(ConfigError):
        load_settings({var: value})


def _record(message: str, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("engram_server.x", logging.WARNING, __file__, 1, message, (), None)
    record.__dict__.update(extra)
    return record


def test_json_log_line_without_a_span() -> None:
    line = json.loads(JsonFormatter().format(_record("hello %s", collection="c")))
    assert line["level"] == "WARNING" and line["logger"] == "engram_server.x"
    assert line["message"] == "hello %s" and line["collection"] == "c"
    assert "trace_id" not in line and line["time"].endswith("Z")


def test_json_log_line_carries_trace_and_span_ids(otel: Otel) -> None:
    with trace.get_tracer("t").start_as_current_span("work") as span:
        line = json.loads(JsonFormatter().format(_record("inside")))
    ctx = span.get_span_context()
    assert line["trace_id"] == format(ctx.trace_id, "032x")
    assert line["span_id"] == format(ctx.span_id, "016x")


def test_json_logs_carry_exceptions() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys_exc_info())
    line = json.loads(JsonFormatter().format(record))
    assert "ValueError: boom" in line["exception"]


def sys_exc_info() -> tuple[type[BaseException], BaseException, object] | None:
    import sys  # noqa: PLC0415

    info = sys.exc_info()
    return info if info[0] is not None else None  # type: ignore[return-value]


def test_configure_logging_levels(monkeypatch: pytest.MonkeyPatch) -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging("warning", "json", "engram_server.api=DEBUG")
        assert root.level == logging.WARNING
        assert logging.getLogger("engram_server.api").level == logging.DEBUG
        handler = root.handlers[-1]
        assert isinstance(handler, logging.StreamHandler) and isinstance(handler.formatter, JsonFormatter)
        stream = io.StringIO()
        handler.setStream(stream)
        logging.getLogger("engram_server.api").debug("visible")
        assert json.loads(stream.getvalue())["message"] == "visible"
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.getLogger("engram_server.api").setLevel(logging.NOTSET)
    with pytest.raises(ValueError):
        parse_levels("engram_server=LOUD")
