"""Export and the off switch, in child processes (the API's global providers are per process):
nothing configured → no SDK, no interceptor, no recording span; ENGRAM_OTEL_ENDPOINT → spans reach
an OTLP/gRPC collector; OTEL_TRACES_EXPORTER=console → spans on stdout."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import asyncio, json, sys
from pathlib import Path
import grpc
from opentelemetry import trace
from engram_client.proto.engram.v1 import memory_service_pb2 as s, memory_service_pb2_grpc
from engram_server.app import build_embedder
from engram_server.config import Settings, load_settings
from engram_server.testing import running_server

class Spy:
    def __init__(self):
        self.inner = build_embedder(Settings())
        self.recording = []
    model_id = property(lambda self: self.inner.model_id)
    dimension = property(lambda self: self.inner.dimension)
    async def warm_up(self): await self.inner.warm_up()
    async def embed_documents(self, texts):
        self.recording.append(trace.get_current_span().is_recording())
        return await self.inner.embed_documents(texts)
    async def embed_queries(self, texts):
        self.recording.append(trace.get_current_span().is_recording())
        return await self.inner.embed_queries(texts)
    async def close(self): await self.inner.close()

async def main():
    spy = Spy()
    env = load_settings()  # the ENGRAM_OTEL_* variables; running_server starts from defaults
    otel = {k: getattr(env, k) for k in env.__dataclass_fields__ if k.startswith("otel_")}
    async with running_server(Path(sys.argv[1]), embedder=spy, **otel) as server:
        async with grpc.aio.insecure_channel(server.address) as ch:
            stub = memory_service_pb2_grpc.MemoryServiceStub(ch)
            await stub.AddMemory(s.AddMemoryRequest(content="Frank likes jazz."))
            await stub.SearchMemories(s.SearchMemoriesRequest(query="music"))
        enabled = server.telemetry.enabled
    print(json.dumps({
        "enabled": enabled,
        "recording": spy.recording,
        "provider": type(trace.get_tracer_provider()).__name__,
        "sdk_imported": "opentelemetry.sdk.trace" in sys.modules,
        "interceptor_imported": "engram_server.api.interceptors" in sys.modules,
    }))

asyncio.run(main())
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ENGRAM_"))}
    env.update(extra)
    return env


async def _run_child(tmp_path: Path, **env: str) -> tuple[dict[str, object], str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CHILD,
        str(tmp_path / "data"),
        cwd=ROOT,
        env=_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    lines = out.decode().strip().splitlines()
    return json.loads(lines[-1]), out.decode()


async def test_nothing_configured_means_nothing_recorded(tmp_path: Path) -> None:
    result, _ = await _run_child(tmp_path)
    assert result == {
        "enabled": False,
        "recording": [False, False],
        "provider": "ProxyTracerProvider",
        "sdk_imported": False,
        "interceptor_imported": False,
    }


async def test_otel_sdk_disabled_wins(tmp_path: Path) -> None:
    result, _ = await _run_child(tmp_path, OTEL_TRACES_EXPORTER="console", OTEL_SDK_DISABLED="true")
    assert result["enabled"] is False and result["recording"] == [False, False]


async def test_console_exporter(tmp_path: Path) -> None:
    result, stdout = await _run_child(
        tmp_path, OTEL_TRACES_EXPORTER="console", ENGRAM_OTEL_METRICS_EXPORTER="none"
    )
    assert result["enabled"] is True and result["recording"] == [True, True]
    assert '"name": "engram.v1.MemoryService/SearchMemories"' in stdout


class Collector(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []

    async def Export(
        self,
        request: trace_service_pb2.ExportTraceServiceRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        self.requests.append(request)
        return trace_service_pb2.ExportTraceServiceResponse()


async def test_spans_reach_an_otlp_grpc_collector(tmp_path: Path) -> None:
    collector = Collector()
    server = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        result, _ = await _run_child(
            tmp_path,
            ENGRAM_OTEL_ENDPOINT=f"http://127.0.0.1:{port}",
            ENGRAM_OTEL_METRICS_EXPORTER="none",
            ENGRAM_OTEL_SERVICE_NAME="engram-test",
        )
    finally:
        await server.stop(0)
    assert result["enabled"] is True and result["recording"] == [True, True]
    spans = {}
    services = set()
    for request in collector.requests:
        for rs in request.resource_spans:
            services |= {a.value.string_value for a in rs.resource.attributes if a.key == "service.name"}
            for ss in rs.scope_spans:
                for span in ss.spans:
                    spans.setdefault(span.name, []).append(span)
    assert services == {"engram-test"}
    assert {"engram.v1.MemoryService/AddMemory", "engram.v1.MemoryService/SearchMemories"} <= set(spans)
    assert {
        "engram.embed",
        "engram.gate",
        "engram.storage.query",
        "engram.storage.upsert",
        "engram.rank",
    } <= set(spans)
    (search,) = spans["engram.v1.MemoryService/SearchMemories"]
    (rank,) = spans["engram.rank"]
    assert rank.trace_id == search.trace_id and rank.parent_span_id == search.span_id
