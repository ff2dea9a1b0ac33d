"""Bytes per memory: write N realistic memories through the gRPC API on the embedded defaults and
measure what they take on disk and in payload (the input to docs/operations/capacity.md).

    .venv/bin/python bench/capacity.py --memories 1000

Starts an in-process server (qdrant-edge in a temp dir, the local 384-dim model), adds N memories
of mixed types, importance, tags and length with AddMemory (the write gate runs, so near-copies
are refused and counted), then reports:
  - content characters and UTF-8 bytes per stored memory,
  - payload bytes per stored memory: the JSON that Engram stores beside each vector (the same
    payload goes to a Qdrant server, so this figure carries over to a cluster),
  - the data directory, apparent and allocated bytes, with and without the write-ahead log
    (qdrant-edge pre-allocates WAL segments and sparse memory-mapped files, so at small N the
    apparent size is mostly empty space).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
from pathlib import Path
from typing import Any

import grpc

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.adapters.storage.payload import record_to_payload
from engram_server.domain.model import StoreFilter
from engram_server.testing import running_server

PEOPLE = ["Alice", "Bruno", "Chen Wei", "Dara", "Emeka", "Fatima", "Gustav", "Hana", "Ivan", "Lena"]
PLACES = ["Berlin", "Lisbon", "Osaka", "Nairobi", "Lima", "Oslo", "Hanoi", "Austin", "Porto", "Seoul"]
TOPICS = [
    "the quarterly report",
    "the database migration",
    "the hiking trip",
    "the new laptop",
    "the tax return",
    "the team offsite",
    "the garden project",
    "the car repair",
    "the mobile release",
    "the kitchen renovation",
]
TEMPLATES = {
    m.MEMORY_TYPE_IDENTITY: [
        "{p} lives in {c} and works as a {job}; prefers to be addressed as {p}.",
        "{p} is allergic to {food} and avoids it in every meal plan.",
    ],
    m.MEMORY_TYPE_DIRECTIVE: [
        "When writing to {p}, keep messages short, use bullet points, and never schedule anything "
        "before {h}:00 in {c} time.",
        "For {t}, always ask {p} before spending more than {n} euros, and send a summary every Friday.",
    ],
    m.MEMORY_TYPE_INSIGHT: [
        "{p} tends to postpone {t} when deadlines overlap with travel to {c}; reminders two days "
        "ahead worked better than same-day ones.",
        "Estimates for {t} were off by about {n} percent the last three times; {p} now adds a buffer.",
    ],
    m.MEMORY_TYPE_EVENT: [
        "{p} {v} {t} in {c} on day {d} at {h}:{mm}.",
        "Call with {p} about {t}: agreed to {v2} it, budget {n} euros, follow-up on day {d}. {p} "
        "mentioned that the team in {c} is short of people and asked for the draft by {h}:{mm}.",
    ],
}
JOBS = ["nurse", "architect", "data engineer", "teacher", "chef", "lawyer", "pilot", "designer"]
FOODS = ["peanuts", "shellfish", "gluten", "lactose", "sesame", "kiwi"]
VERBS = ["discussed", "planned", "postponed", "finished", "booked", "cancelled", "reviewed", "paid for"]
TAGS = ["work", "family", "health", "travel", "finance", "home", "project", "urgent", "weekly"]
# Rough mix of an agent's memories: mostly events, some insights and directives, few identities.
TYPE_WEIGHTS = {
    m.MEMORY_TYPE_EVENT: 6,
    m.MEMORY_TYPE_INSIGHT: 2,
    m.MEMORY_TYPE_DIRECTIVE: 1,
    m.MEMORY_TYPE_IDENTITY: 1,
}


def synth(rng: random.Random, i: int) -> s.AddMemoryRequest:
    kind = rng.choices(list(TYPE_WEIGHTS), weights=list(TYPE_WEIGHTS.values()))[0]
    content = rng.choice(TEMPLATES[kind]).format(
        p=rng.choice(PEOPLE),
        c=rng.choice(PLACES),
        t=rng.choice(TOPICS),
        job=rng.choice(JOBS),
        food=rng.choice(FOODS),
        v=rng.choice(VERBS),
        v2=rng.choice(["split", "rescope", "outsource", "freeze"]),
        d=i % 365,
        h=rng.randint(6, 22),
        mm=rng.choice(["00", "15", "30", "45"]),
        n=rng.randint(5, 900),
    )
    return s.AddMemoryRequest(
        content=f"{content} (note {i})",
        type=kind,
        importance=rng.randint(1, 10),
        tags=rng.sample(TAGS, rng.randint(0, 3)),
        metadata={"session": f"s{i // 20}", "agent": "assistant"},
    )


def dir_bytes(root: Path) -> dict[str, int]:
    """Apparent and allocated bytes of the files under root, in total and outside any `wal`
    directory (qdrant-edge pre-allocates WAL segments and sparse mmap files, so the apparent size
    overstates what a small collection uses; allocated = blocks on disk)."""
    out = {"apparent": 0, "allocated": 0, "apparent_without_wal": 0, "allocated_without_wal": 0}
    for path in root.rglob("*"):
        if path.is_file():
            st = path.stat()
            wal = "wal" in path.relative_to(root).parts
            out["apparent"] += st.st_size
            out["allocated"] += st.st_blocks * 512
            if not wal:
                out["apparent_without_wal"] += st.st_size
                out["allocated_without_wal"] += st.st_blocks * 512
    return out


async def run(n: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        async with running_server(data) as server:
            async with grpc.aio.insecure_channel(server.address) as channel:
                stub = memory_service_pb2_grpc.MemoryServiceStub(channel)
                outcomes: dict[str, int] = {}
                sem = asyncio.Semaphore(8)

                async def add(i: int) -> None:
                    async with sem:
                        reply = await stub.AddMemory(synth(rng, i))
                    name = s.AddOutcome.Name(reply.outcome)
                    outcomes[name] = outcomes.get(name, 0) + 1

                await asyncio.gather(*(add(i) for i in range(n)))
            records = []
            offset: str | None = None
            while True:
                page, offset = await server.store.scroll("default", StoreFilter(), 500, offset)
                records.extend(page)
                if offset is None:
                    break
        # the server is closed: everything it wrote is on disk
        disk = dir_bytes(data)
    stored = len(records)
    payload = [len(json.dumps(record_to_payload(r), separators=(",", ":")).encode()) for r in records]
    content = [len(r.content.encode()) for r in records]
    return {
        "requested": n,
        "stored": stored,
        "outcomes": outcomes,
        "content_bytes_mean": statistics.fmean(content),
        "content_chars_mean": statistics.fmean(len(r.content) for r in records),
        "payload_bytes_mean": statistics.fmean(payload),
        "payload_bytes_p95": sorted(payload)[int(0.95 * (stored - 1))],
        "data_dir": disk,
        "data_dir_allocated_bytes_per_memory_without_wal": disk["allocated_without_wal"] / stored,
        "vector_bytes_per_memory": 384 * 4,
        "cpu_count": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.memories, args.seed)), indent=2))


if __name__ == "__main__":
    main()
