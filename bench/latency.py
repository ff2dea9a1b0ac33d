"""Add and search latency at N memories, through the real gRPC API, on the embedded defaults.

    .venv/bin/python bench/latency.py --memories 10000 --samples 200

Starts an in-process server (qdrant-edge in a temp dir, the local model), ingests N synthetic
memories with concurrent AddMemory calls, then measures, one call at a time:
  - AddMemory latency for new memories,
  - SearchMemories latency (unique queries, so no cache hits); with ``--rerank both`` the server
    reranks by default and every other search asks SearchMemoriesRequest.rerank = OFF, so that
    the two are measured side by side under the same load, and
  - the embedding model alone for one text (the floor the RPCs sit on),
side by side in the same run, and prints a Markdown table (and JSON with --json).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import grpc

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.testing import running_server

PEOPLE = [
    "Alice",
    "Bruno",
    "Chen Wei",
    "Dara",
    "Emeka",
    "Fatima",
    "Gustav",
    "Hana",
    "Ivan",
    "Jun",
    "Kofi",
    "Lena",
]
PLACES = [
    "Berlin",
    "Lisbon",
    "Osaka",
    "Nairobi",
    "Lima",
    "Oslo",
    "Hanoi",
    "Austin",
    "Porto",
    "Seoul",
    "Quito",
]
THINGS = [
    "the quarterly report",
    "a birthday dinner",
    "the database migration",
    "a dentist appointment",
    "the hiking trip",
    "the new laptop",
    "a piano lesson",
    "the tax return",
    "the team offsite",
    "a job interview",
    "the garden project",
    "the car repair",
]
VERBS = ["discussed", "planned", "postponed", "finished", "booked", "cancelled", "reviewed", "paid for"]


def synth(rng: random.Random, i: int) -> str:
    return (
        f"{rng.choice(PEOPLE)} {rng.choice(VERBS)} {rng.choice(THINGS)} in {rng.choice(PLACES)} "
        f"on day {i % 365} at {rng.randint(6, 22)}:{rng.choice(['00', '15', '30', '45'])}, ref #{i}."
    )


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memories", type=int, default=10_000)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=16, help="concurrent adds while ingesting")
    ap.add_argument("--json", type=Path, help="also write the figures as JSON here")
    ap.add_argument(
        "--rerank",
        choices=("on", "off", "both"),
        default="on",
        help="cross-encoder reranking (ENGRAM_RERANK auto/off; both: auto, and every other search "
        "asks for RERANK_MODE_OFF)",
    )
    args = ap.parse_args()
    rng = random.Random(7)

    with tempfile.TemporaryDirectory() as tmp:
        rerank = "off" if args.rerank == "off" else "auto"
        async with (
            running_server(Path(tmp), rerank=rerank) as srv,
            grpc.aio.insecure_channel(srv.address) as ch,
        ):
            stub = memory_service_pb2_grpc.MemoryServiceStub(ch)
            t0 = time.perf_counter()
            queue = list(range(args.memories))
            created = 0

            async def worker() -> None:
                nonlocal created
                while queue:
                    i = queue.pop()
                    r = await stub.AddMemory(s.AddMemoryRequest(content=synth(rng, i), importance=1 + i % 10))
                    created += r.outcome == s.ADD_OUTCOME_CREATED

            await asyncio.gather(*(worker() for _ in range(args.concurrency)))
            ingest_s = time.perf_counter() - t0

            add_ms: list[float] = []
            for j in range(args.samples):
                text = synth(rng, args.memories + j)
                t = time.perf_counter()
                await stub.AddMemory(s.AddMemoryRequest(content=text))
                add_ms.append((time.perf_counter() - t) * 1000)

            search_ms: list[float] = []
            search_off_ms: list[float] = []
            modes = [s.RERANK_MODE_UNSPECIFIED, s.RERANK_MODE_OFF] if args.rerank == "both" else [0]
            for j in range(args.samples):
                for n, mode in enumerate(modes if j % 2 == 0 else modes[::-1]):
                    q = f"When did {rng.choice(PEOPLE)} {rng.choice(VERBS)} {rng.choice(THINGS)}? ({j}.{n})"
                    t = time.perf_counter()
                    await stub.SearchMemories(s.SearchMemoriesRequest(query=q, limit=10, rerank=mode))
                    ms = (time.perf_counter() - t) * 1000
                    (search_off_ms if mode == s.RERANK_MODE_OFF else search_ms).append(ms)

            embed_ms: list[float] = []
            for j in range(args.samples):
                t = time.perf_counter()
                await srv.embedder.embed_documents([synth(rng, 10_000_000 + j)])
                embed_ms.append((time.perf_counter() - t) * 1000)

    rows = {"AddMemory": add_ms, "SearchMemories": search_ms, "embed one text (floor)": embed_ms}
    if search_off_ms:
        rows = {
            "AddMemory": add_ms,
            "SearchMemories (server default: rerank on)": search_ms,
            "SearchMemories, rerank=RERANK_MODE_OFF": search_off_ms,
            "embed one text (floor)": embed_ms,
        }
    floor = statistics.median(embed_ms)
    print(
        f"\n{created} of {args.memories} synthetic memories created in {ingest_s:.1f} s "
        f"({args.memories / ingest_s:.0f}/s at concurrency {args.concurrency})\n"
    )
    print(f"| at {created:,} stored memories | p50 ms | p95 ms | p99 ms | p50 / embed p50 |")
    print("|---|---|---|---|---|")
    out = {}
    for name, vals in rows.items():
        p50, p95, p99 = statistics.median(vals), pct(vals, 0.95), pct(vals, 0.99)
        out[name] = {"p50_ms": p50, "p95_ms": p95, "p99_ms": p99}
        print(f"| {name} | {p50:.1f} | {p95:.1f} | {p99:.1f} | {p50 / floor:.2f} |")
    if args.json:
        args.json.write_text(json.dumps({"memories": args.memories, "created": created, **out}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
