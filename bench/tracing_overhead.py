"""Tracing overhead on SearchMemories: telemetry off vs on, side by side in one run.

Starts two `engram serve` processes on the same data shape — one with nothing configured (no SDK,
no interceptor), one exporting traces and metrics over OTLP/gRPC (batch span processor) to a
collector run by this script — seeds both identically, then drives SearchMemories at a fixed
concurrency in alternating rounds (off, on, off, on, ...) so both see the same machine state.
Prints per-round and median throughput and latency, and the on/off ratio.

    .venv/bin/python bench/tracing_overhead.py --memories 300 --rounds 6 --seconds 5 --concurrency 4
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc

ROOT = Path(__file__).resolve().parents[1]
TOPICS = [
    "coffee",
    "tea",
    "jazz",
    "hiking",
    "python",
    "rust",
    "allergies",
    "meetings",
    "travel",
    "books",
    "sleep",
    "running",
]


class Collector(trace_service_pb2_grpc.TraceServiceServicer, metrics_service_pb2_grpc.MetricsServiceServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.spans = 0
        self.metric_exports = 0

    async def Export(self, request: Any, context: Any) -> Any:
        if isinstance(request, trace_service_pb2.ExportTraceServiceRequest):
            self.spans += sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
            return trace_service_pb2.ExportTraceServiceResponse()
        self.metric_exports += 1
        return metrics_service_pb2.ExportMetricsServiceResponse()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(data: Path, port: int, **env: str) -> subprocess.Popen[bytes]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ENGRAM_"))}
    clean.update(ENGRAM_PORT=str(port), ENGRAM_DATA_DIR=str(data), ENGRAM_LOG_LEVEL="WARNING", **env)
    return subprocess.Popen([sys.executable, "-m", "engram_server", "serve"], cwd=ROOT, env=clean)


async def wait_ready(address: str, within: float = 120) -> None:
    deadline = time.monotonic() + within
    async with grpc.aio.insecure_channel(address) as ch:
        health = health_pb2_grpc.HealthStub(ch)
        while True:
            try:
                reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{address} did not become ready")
            await asyncio.sleep(0.2)


async def seed(address: str, n: int) -> None:
    async with grpc.aio.insecure_channel(address) as ch:
        stub = memory_service_pb2_grpc.MemoryServiceStub(ch)
        for i in range(n):
            topic = TOPICS[i % len(TOPICS)]
            await stub.AddMemory(
                s.AddMemoryRequest(
                    content=f"Note {i}: the user said something about {topic}, item {i * 7919 % 1000}."
                )
            )


async def drive(address: str, seconds: float, concurrency: int) -> tuple[float, float, float]:
    """Closed loop: ``concurrency`` callers for ``seconds``; (requests/s, p50 ms, p99 ms)."""
    latencies: list[float] = []
    async with grpc.aio.insecure_channel(address) as ch:
        stub = memory_service_pb2_grpc.MemoryServiceStub(ch)
        stop = time.perf_counter() + seconds

        async def caller(k: int) -> None:
            i = k
            while time.perf_counter() < stop:
                query = f"what does the user think about {TOPICS[i % len(TOPICS)]}?"
                t0 = time.perf_counter()
                await stub.SearchMemories(s.SearchMemoriesRequest(query=query, limit=5))
                latencies.append(time.perf_counter() - t0)
                i += 1

        started = time.perf_counter()
        await asyncio.gather(*(caller(k) for k in range(concurrency)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000
    p99 = latencies[int(len(latencies) * 0.99)] * 1000
    return len(latencies) / elapsed, p50, p99


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=6, help="rounds per configuration, alternating")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of one round")
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()

    collector = Collector()
    otlp = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, otlp)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(collector, otlp)
    otlp_port = otlp.add_insecure_port("127.0.0.1:0")
    await otlp.start()

    tmp = Path(tempfile.mkdtemp(prefix="engram-bench-otel-"))
    configs = {
        "off": {},
        "on": {"ENGRAM_OTEL_ENDPOINT": f"http://127.0.0.1:{otlp_port}"},
    }
    procs: dict[str, subprocess.Popen[bytes]] = {}
    addresses: dict[str, str] = {}
    try:
        for name, env in configs.items():
            port = free_port()
            procs[name] = start_server(tmp / name, port, **env)
            addresses[name] = f"127.0.0.1:{port}"
        await asyncio.gather(*(wait_ready(a) for a in addresses.values()))
        for address in addresses.values():  # one after the other: seeding embeds, CPU-bound
            await seed(address, args.memories)
        for address in addresses.values():  # warm-up (query cache, code paths, background writes)
            await drive(address, 3.0, args.concurrency)

        results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in configs}
        for r in range(args.rounds):
            order = list(configs) if r % 2 == 0 else list(reversed(configs))
            for name in order:
                rps, p50, p99 = await drive(addresses[name], args.seconds, args.concurrency)
                results[name].append((rps, p50, p99))
                print(
                    f"round {r + 1} {name:>3}: {rps:8.1f} req/s  p50 {p50:6.2f} ms  p99 {p99:6.2f} ms",
                    flush=True,
                )

        print()
        med = {
            name: tuple(statistics.median(x[i] for x in rows) for i in range(3))
            for name, rows in results.items()
        }
        for name, (rps, p50, p99) in med.items():
            print(f"median {name:>3}: {rps:8.1f} req/s  p50 {p50:6.2f} ms  p99 {p99:6.2f} ms")
        ratio = med["on"][0] / med["off"][0]
        print(
            f"\nthroughput on/off = {ratio:.3f} ({(1 - ratio) * 100:+.1f}% lost); "
            f"p50 on/off = {med['on'][1] / med['off'][1]:.3f}; "
            f"spans received by the collector: {collector.spans}, metric exports: {collector.metric_exports}"
        )
        print(
            f"(SearchMemories, {args.memories} memories, concurrency {args.concurrency}, "
            f"{args.rounds} × {args.seconds:.0f} s rounds per configuration, python {sys.version.split()[0]})"
        )
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():  # off the loop: the collector must keep serving the final flush
            await asyncio.to_thread(proc.wait, 30)
        await otlp.stop(0)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
