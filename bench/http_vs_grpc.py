"""HTTP/JSON vs gRPC latency on the same server, side by side in one run.

    .venv/bin/python bench/http_vs_grpc.py --memories 2000 --samples 300

Starts an in-process server (qdrant-edge in a temp dir, the local model) with the HTTP gateway on,
imports N synthetic memories with AddMemories, then measures one call at a time, alternating the
transport call by call (so both see the same machine state):
  - SearchMemories with a unique query per call (no query-cache hits on either side), and
  - ListCollections (no model, no vector search: the transport and gateway overhead alone).
gRPC uses one grpc.aio channel; HTTP uses one keep-alive httpx client against the gateway, which
itself calls the gRPC server over a private Unix socket. Prints a Markdown table (JSON with --json).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import grpc
import httpx

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc

PEOPLE = ["Alice", "Bruno", "Chen Wei", "Dara", "Emeka", "Fatima", "Gustav", "Hana", "Ivan", "Jun"]
PLACES = ["Berlin", "Lisbon", "Osaka", "Nairobi", "Lima", "Oslo", "Hanoi", "Austin", "Porto", "Seoul"]
THINGS = ["the quarterly report", "a birthday dinner", "the database migration", "a hiking trip", "the rent"]


def memory(i: int) -> str:
    return (
        f"{PEOPLE[i % len(PEOPLE)]} talked about {THINGS[(i // 7) % len(THINGS)]} in "
        f"{PLACES[(i // 3) % len(PLACES)]} (note {i})"
    )


def query(i: int, transport: str) -> str:
    return f"what did {PEOPLE[i % len(PEOPLE)]} say about {THINGS[i % len(THINGS)]}? ({transport} {i})"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(memories: int, samples: int) -> dict[str, dict[str, float]]:
    from engram_server.testing import running_server  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        async with (
            running_server(Path(tmp) / "data", http_port=0) as server,
            grpc.aio.insecure_channel(server.address) as channel,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=120) as http,
        ):
            stub = memory_service_pb2_grpc.MemoryServiceStub(channel)
            for start in range(0, memories, 64):
                batch = [s.NewMemory(content=memory(i)) for i in range(start, min(memories, start + 64))]
                await stub.AddMemories(s.AddMemoriesRequest(memories=batch))
            for i in range(10):  # warm both paths
                await stub.SearchMemories(s.SearchMemoriesRequest(query=f"warm up {i}"))
                await http.post("/v1/memories:search", json={"query": f"warm up http {i}"})
            times: dict[str, list[float]] = {
                k: [] for k in ("search grpc", "search http", "list grpc", "list http")
            }

            async def grpc_search(i: int) -> None:
                await stub.SearchMemories(s.SearchMemoriesRequest(query=query(i, "grpc"), limit=10))

            async def http_search(i: int) -> None:
                r = await http.post("/v1/memories:search", json={"query": query(i, "http"), "limit": 10})
                r.raise_for_status()

            async def grpc_list(i: int) -> None:
                await stub.ListCollections(s.ListCollectionsRequest())

            async def http_list(i: int) -> None:
                (await http.get("/v1/collections")).raise_for_status()

            calls = {
                "search grpc": grpc_search,
                "search http": http_search,
                "list grpc": grpc_list,
                "list http": http_list,
            }
            for i in range(samples):
                order = list(calls) if i % 2 == 0 else list(reversed(calls))
                for name in order:
                    t0 = time.perf_counter()
                    await calls[name](i)
                    times[name].append((time.perf_counter() - t0) * 1000)
    return {
        name: {
            "p50_ms": statistics.median(v),
            "p95_ms": pct(v, 0.95),
            "p99_ms": pct(v, 0.99),
            "mean_ms": statistics.fmean(v),
            "samples": len(v),
        }
        for name, v in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = asyncio.run(run(args.memories, args.samples))
    print(f"{args.memories} memories, {args.samples} calls per row, transports alternating call by call\n")
    print("| call | p50 ms | p95 ms | p99 ms | mean ms |")
    print("|---|---:|---:|---:|---:|")
    for name, r in result.items():
        print(f"| {name} | {r['p50_ms']:.2f} | {r['p95_ms']:.2f} | {r['p99_ms']:.2f} | {r['mean_ms']:.2f} |")
    for op in ("search", "list"):
        extra = result[f"{op} http"]["p50_ms"] - result[f"{op} grpc"]["p50_ms"]
        print(f"\n{op}: HTTP/JSON p50 is {extra:+.2f} ms vs gRPC")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"memories": args.memories, "samples": args.samples, **result}, indent=2)
        )


if __name__ == "__main__":
    main()
