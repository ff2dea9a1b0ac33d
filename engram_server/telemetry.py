"""OpenTelemetry for Engram: provider set-up from OTEL_* / ENGRAM_OTEL_* settings, the
instruments the server records, reflection helpers, a memory-count gauge and JSON logs.

Off by default. Tracing (and metrics) are *enabled* only when an exporter is configured —
``ENGRAM_OTEL_TRACES_EXPORTER`` / ``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``), or an OTLP
endpoint (``ENGRAM_OTEL_ENDPOINT``, ``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) — or when the host process already installed an SDK
tracer provider (``opentelemetry-instrument``, an embedding application, tests). With nothing
configured no SDK provider exists, the gRPC interceptor is not installed, and the few spans the
domain opens are the API's no-op spans.

Only the OpenTelemetry *API* is imported at module level (the domain and the reflection code
may use the helpers here); the SDK and exporters are imported inside :func:`setup_telemetry`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics, trace

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, Observation

    from engram_server.config import Settings
    from engram_server.ports import Store

log = logging.getLogger(__name__)

INSTRUMENTATION = "engram_server"

#: Services whose calls are never traced unless ``ENGRAM_OTEL_EXCLUDED_SERVICES`` says otherwise.
DEFAULT_EXCLUDED_SERVICES = (
    "grpc.health.v1.Health",
    "grpc.reflection.v1alpha.ServerReflection",
    "grpc.reflection.v1.ServerReflection",
)

#: Histogram buckets (seconds) for RPC and embedding latencies: 0.5 ms … 10 s.
LATENCY_BUCKETS_S = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.0075,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)

_TRUE = {"1", "true", "yes", "on"}
_EXPORTERS = {"otlp", "console", "none"}


def _split(raw: str | None) -> list[str]:
    return [p.strip().lower() for p in (raw or "").split(",") if p.strip()]


# ---------------------------------------------------------------- configuration


@dataclass(frozen=True, slots=True)
class TelemetryConfig:
    """What to export, resolved from settings and the standard OTEL_* environment."""

    traces: tuple[str, ...] = ()  # exporter names: "otlp", "console"
    metrics: tuple[str, ...] = ()
    protocol: str = "grpc"  # "grpc" | "http/protobuf"
    endpoint: str | None = None  # None: the exporter's own OTEL_EXPORTER_OTLP_* handling
    service_name: str = "engram"
    record_content: bool = False
    excluded_services: frozenset[str] = frozenset(DEFAULT_EXCLUDED_SERVICES)
    stats_interval_seconds: float = 60.0

    @classmethod
    def resolve(cls, settings: Settings, environ: Mapping[str, str] | None = None) -> TelemetryConfig:
        env = os.environ if environ is None else environ
        excluded = frozenset(
            s.strip()
            for s in (settings.otel_excluded_services or ",".join(DEFAULT_EXCLUDED_SERVICES)).split(",")
            if s.strip()
        )
        base = cls(
            record_content=settings.otel_record_content,
            excluded_services=excluded,
            stats_interval_seconds=settings.otel_stats_interval_seconds,
        )
        if env.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE:
            return base
        endpoint = settings.otel_endpoint or None
        any_endpoint = bool(
            endpoint
            or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        )
        traces = _split(settings.otel_traces_exporter) or _split(env.get("OTEL_TRACES_EXPORTER"))
        if not traces and any_endpoint:
            traces = ["otlp"]
        metrics_names = _split(settings.otel_metrics_exporter) or _split(env.get("OTEL_METRICS_EXPORTER"))
        if not metrics_names and (
            endpoint
            or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            or env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
        ):
            metrics_names = ["otlp"]
        protocol = (
            settings.otel_protocol
            or env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            or "grpc"
        ).strip()
        for name in dict.fromkeys((*traces, *metrics_names)):
            if name not in _EXPORTERS:
                log.warning("ignoring unsupported OpenTelemetry exporter %r (otlp, console or none)", name)
        if protocol not in {"grpc", "http/protobuf"}:
            log.warning("unsupported OTLP protocol %r; using grpc", protocol)
            protocol = "grpc"
        return cls(
            traces=tuple(n for n in traces if n in _EXPORTERS and n != "none"),
            metrics=tuple(n for n in metrics_names if n in _EXPORTERS and n != "none"),
            protocol=protocol,
            endpoint=endpoint,
            service_name=settings.otel_service_name,
            record_content=base.record_content,
            excluded_services=excluded,
            stats_interval_seconds=base.stats_interval_seconds,
        )


def _sdk_tracer_provider_installed() -> bool:
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def _sdk_meter_provider_installed() -> bool:
    from opentelemetry.metrics import NoOpMeterProvider  # noqa: PLC0415
    from opentelemetry.metrics._internal import _ProxyMeterProvider  # noqa: PLC0415

    provider = metrics.get_meter_provider()
    return not isinstance(provider, _ProxyMeterProvider | NoOpMeterProvider)


@dataclass
class Telemetry:
    """The process's telemetry as one server sees it."""

    config: TelemetryConfig = field(default_factory=TelemetryConfig)
    tracing: bool = False
    metering: bool = False
    _owned: list[Any] = field(default_factory=list)  # providers this object created
    _stats_task: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        return self.tracing or self.metering

    def start_memory_gauge(self, store: Store, clock: Callable[[], float]) -> None:
        """Refresh the ``engram.memories`` gauge (live memories by collection and type) every
        ``stats_interval_seconds`` while metrics are on."""
        if not self.metering or self.config.stats_interval_seconds <= 0:
            return
        self._stats_task = asyncio.create_task(
            _MEMORY_GAUGE.refresh_forever(store, clock, self.config.stats_interval_seconds),
            name="engram-memory-gauge",
        )

    async def stop(self) -> None:
        """Stop background work and flush what is buffered (the providers shut down at exit)."""
        if self._stats_task is not None:
            self._stats_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._stats_task
            self._stats_task = None
        for provider in self._owned:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(provider.force_flush)


_process_owned: list[Any] = []


def setup_telemetry(settings: Settings, environ: Mapping[str, str] | None = None) -> Telemetry:
    """Install SDK providers for the configured exporters (once per process) and report what is on."""
    config = TelemetryConfig.resolve(settings, environ)
    tel = Telemetry(config=config)
    if config.traces and not _sdk_tracer_provider_installed():
        provider = _build_tracer_provider(config)
        trace.set_tracer_provider(provider)
        _process_owned.append(provider)
    if config.metrics and not _sdk_meter_provider_installed():
        meter_provider = _build_meter_provider(config)
        metrics.set_meter_provider(meter_provider)
        _process_owned.append(meter_provider)
    tel.tracing = _sdk_tracer_provider_installed()
    tel.metering = _sdk_meter_provider_installed()
    tel._owned = list(_process_owned)
    if tel.enabled:
        log.info(
            "telemetry on: traces %s, metrics %s",
            ",".join(config.traces) or ("host provider" if tel.tracing else "off"),
            ",".join(config.metrics) or ("host provider" if tel.metering else "off"),
        )
    return tel


def _resource(config: TelemetryConfig) -> Any:
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415

    from engram_server import __version__  # noqa: PLC0415

    attributes: dict[str, str] = {"service.version": __version__}
    if not os.environ.get("OTEL_SERVICE_NAME"):
        attributes["service.name"] = config.service_name
    return Resource.create(attributes)


def _otlp_endpoint(config: TelemetryConfig, signal: str) -> dict[str, Any]:
    if config.endpoint is None:
        return {}
    if config.protocol == "grpc":
        return {"endpoint": config.endpoint}
    return {"endpoint": config.endpoint.rstrip("/") + f"/v1/{signal}"}


def _build_tracer_provider(config: TelemetryConfig) -> Any:
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SpanExporter,
    )

    provider = TracerProvider(resource=_resource(config))
    for name in config.traces:
        exporter: SpanExporter
        if name == "console":
            exporter = ConsoleSpanExporter()
        elif config.protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # noqa: PLC0415
                OTLPSpanExporter,
            )

            exporter = OTLPSpanExporter(**_otlp_endpoint(config, "traces"))
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
                OTLPSpanExporter as HttpSpanExporter,
            )

            exporter = HttpSpanExporter(**_otlp_endpoint(config, "traces"))
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _build_meter_provider(config: TelemetryConfig) -> Any:
    from opentelemetry.sdk.metrics import MeterProvider  # noqa: PLC0415
    from opentelemetry.sdk.metrics.export import (  # noqa: PLC0415
        ConsoleMetricExporter,
        MetricExporter,
        PeriodicExportingMetricReader,
    )

    readers = []
    for name in config.metrics:
        exporter: MetricExporter
        if name == "console":
            exporter = ConsoleMetricExporter()
        elif config.protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (  # noqa: PLC0415
                OTLPMetricExporter,
            )

            exporter = OTLPMetricExporter(**_otlp_endpoint(config, "metrics"))
        else:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (  # noqa: PLC0415
                OTLPMetricExporter as HttpMetricExporter,
            )

            exporter = HttpMetricExporter(**_otlp_endpoint(config, "metrics"))
        readers.append(PeriodicExportingMetricReader(exporter))
    return MeterProvider(resource=_resource(config), metric_readers=readers)


# ---------------------------------------------------------------- spans on hot paths

#: What :func:`span` gives while no SDK tracer provider is installed: a shared context whose span
#: is the API's invalid (non-recording) span, as a no-op tracer's would be.
_NO_SPAN: contextlib.nullcontext[trace.Span] = contextlib.nullcontext(trace.INVALID_SPAN)


def tracing_installed() -> bool:
    """Whether spans are recorded: an SDK tracer provider is installed in this process (by
    :func:`setup_telemetry` or the host). Cheap: no lock, no allocation."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def span(
    tracer: trace.Tracer,
    name: str,
    *,
    kind: trace.SpanKind = trace.SpanKind.INTERNAL,
    attributes: Mapping[str, Any] | None = None,
) -> contextlib.AbstractContextManager[trace.Span]:
    """``tracer.start_as_current_span(name, kind=kind, attributes=attributes)`` while spans are
    recorded; otherwise a shared no-op context (the API's own no-op span costs ≈ 5 µs a span:
    a context attached and detached, an object made)."""
    if tracing_installed():
        return tracer.start_as_current_span(name, kind=kind, attributes=attributes)
    return _NO_SPAN


# ---------------------------------------------------------------- instruments

tracer = trace.get_tracer(INSTRUMENTATION)
meter = metrics.get_meter(INSTRUMENTATION)

#: RPC server duration (OpenTelemetry RPC semantic conventions), by method and status.
rpc_duration = meter.create_histogram(
    "rpc.server.call.duration",
    unit="s",
    description="Duration of gRPC server calls, by rpc.service, rpc.method and rpc.grpc.status_code.",
    explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_S,
)
reflection_runs = meter.create_counter(
    "engram.reflection.runs",
    unit="{run}",
    description="Reflection runs, by outcome (e.g. completed, skipped_gate, no_input, failed, dry_run).",
)
reflection_insights = meter.create_counter(
    "engram.reflection.insights",
    unit="{insight}",
    description="Insights produced by reflection, by disposition (stored, draft, duplicate).",
)
llm_duration = meter.create_histogram(
    "engram.llm.duration",
    unit="s",
    description="Duration of LLM calls made by reflection, by model and outcome.",
    explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_S,
)


# ---------------------------------------------------------------- reflection helpers


def record_reflection_run(outcome: str, *, collection: str = "", dry_run: bool = False) -> None:
    """Count one RunReflection, e.g. ``record_reflection_run("completed")``. Outcome names are
    short snake_case words: completed, skipped_gate, no_input, failed."""
    attributes: dict[str, str | bool] = {"engram.reflection.outcome": outcome, "engram.dry_run": dry_run}
    if collection:
        attributes["engram.collection"] = collection
    reflection_runs.add(1, attributes)


def record_reflection_insights(disposition: str, count: int = 1) -> None:
    """Count insights by what became of them: stored, draft, duplicate."""
    if count:
        reflection_insights.add(count, {"engram.reflection.insight": disposition})


class LlmCall:
    """Handle given by :func:`llm_span`; set the token counts when the provider reports them."""

    __slots__ = ("span",)

    def __init__(self, span: trace.Span) -> None:
        self.span = span

    def set_tokens(self, input_tokens: int | None = None, output_tokens: int | None = None) -> None:
        if input_tokens is not None:
            self.span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
        if output_tokens is not None:
            self.span.set_attribute("gen_ai.usage.output_tokens", output_tokens)


@contextlib.contextmanager
def llm_span(model: str, *, provider: str = "openai", operation: str = "chat") -> Iterator[LlmCall]:
    """A client span around one LLM call (GenAI semantic conventions), with its duration
    recorded in ``engram.llm.duration``::

        with llm_span(settings.llm_model) as call:
            reply = await client.chat(...)
            call.set_tokens(reply.usage.prompt_tokens, reply.usage.completion_tokens)

    No prompt or completion text is recorded.
    """
    start = time.perf_counter()
    outcome = "ok"
    with tracer.start_as_current_span(
        f"{operation} {model}",
        kind=trace.SpanKind.CLIENT,
        attributes={
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
        },
    ) as span:
        try:
            yield LlmCall(span)
        except BaseException as exc:
            outcome = "error"
            span.set_attribute("error.type", type(exc).__qualname__)
            raise
        finally:
            llm_duration.record(
                time.perf_counter() - start, {"gen_ai.request.model": model, "engram.outcome": outcome}
            )


@contextlib.contextmanager
def reflection_span(collection: str = "", *, dry_run: bool = False) -> Iterator[trace.Span]:
    """The internal span of one reflection run (child of the RunReflection server span)."""
    with tracer.start_as_current_span(
        "engram.reflection", attributes={"engram.collection": collection, "engram.dry_run": dry_run}
    ) as span:
        yield span


# ---------------------------------------------------------------- memories gauge


class _MemoryGauge:
    """Live memories by collection and type, counted in the background (a gauge callback
    cannot await the store) and reported from the cache."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, str], int] = {}
        meter.create_observable_gauge(
            "engram.memories",
            callbacks=[self._observe],
            unit="{memory}",
            description="Live (unexpired, current) memories by collection and type.",
        )

    def _observe(self, options: CallbackOptions) -> Iterable[Observation]:
        from opentelemetry.metrics import Observation  # noqa: PLC0415

        del options
        return [
            Observation(n, {"engram.collection": c, "engram.memory.type": t})
            for (c, t), n in self.values.items()
        ]

    async def refresh(self, store: Store, now: float) -> None:
        from engram_server.domain.model import MemoryType, StoreFilter  # noqa: PLC0415

        values: dict[tuple[str, str], int] = {}
        for spec in await store.list_collections():
            for kind in MemoryType:
                values[(spec.name, kind.value)] = await store.count(
                    spec.name, StoreFilter(live_at=now, types=(kind,))
                )
        self.values = values

    async def refresh_forever(self, store: Store, clock: Callable[[], float], interval: float) -> None:
        while True:
            try:
                await self.refresh(store, clock())
            except Exception as exc:
                log.warning("memory gauge refresh failed: %s", exc)
            await asyncio.sleep(interval)


_MEMORY_GAUGE = _MemoryGauge()


async def refresh_memory_gauge(store: Store, now: float) -> None:
    """Recount ``engram.memories`` now (tests; the server refreshes it periodically)."""
    await _MEMORY_GAUGE.refresh(store, now)


# ---------------------------------------------------------------- logs


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the current trace and span ids
    (when a span is recording), exception text, and any ``extra=`` fields."""

    _STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            out["trace_id"] = format(ctx.trace_id, "032x")
            out["span_id"] = format(ctx.span_id, "016x")
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        for key, value in record.__dict__.items():
            if key not in self._STANDARD and not key.startswith("_"):
                out[key] = value if isinstance(value, str | int | float | bool | None) else repr(value)
        return json.dumps(out, ensure_ascii=False)


JsonFormatter.converter = time.gmtime


def configure_logging(level: str, fmt: str = "text", levels: str = "") -> None:
    """Root logging for the CLI: ``fmt`` ``text`` or ``json``; ``levels`` overrides per logger,
    e.g. ``"engram_server.api=DEBUG,grpc=WARNING"``."""
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name, lvl in parse_levels(levels).items():
        logging.getLogger(name).setLevel(lvl)


def parse_levels(raw: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in raw.split(","):
        if not part.strip():
            continue
        name, sep, lvl = part.partition("=")
        if not sep or lvl.strip().upper() not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError(f"not a logger=LEVEL pair: {part!r}")
        out[name.strip()] = lvl.strip().upper()
    return out


__all__: Sequence[str] = [
    "DEFAULT_EXCLUDED_SERVICES",
    "JsonFormatter",
    "LlmCall",
    "Telemetry",
    "TelemetryConfig",
    "configure_logging",
    "llm_span",
    "meter",
    "record_reflection_insights",
    "record_reflection_run",
    "reflection_span",
    "refresh_memory_gauge",
    "rpc_duration",
    "setup_telemetry",
    "tracer",
]
