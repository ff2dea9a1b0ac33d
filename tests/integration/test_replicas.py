"""Two Engram replicas on one real Qdrant server: the write gate holds across them.

Each replica has its own process lock; the write lease kept in Qdrant (ENGRAM_QDRANT_WRITE_LEASE,
on by default for a server) is what makes "the same fact sent to both at once" stored once.
Skips without a Qdrant server binary (see tests/support/qdrant.py).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import grpc

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.testing import running_server
from tests.support.qdrant import QdrantNode

FACTS = [
    "Alice's dentist appointment is on March 3rd at 10am.",
    "Bob prefers green tea over coffee in the morning.",
    "The staging database password rotates every 30 days.",
    "Carol is allergic to peanuts and shellfish.",
    "The team offsite is in Lisbon in the second week of June.",
    "Dan's flight to Tokyo departs from gate 42.",
]
PER_REPLICA = 3  # concurrent copies of each fact sent to each replica


async def test_the_same_fact_sent_to_two_replicas_at_once_is_stored_once(
    qdrant_server: QdrantNode, tmp_path: Path
) -> None:
    shared = dict(
        qdrant_url=qdrant_server.url,
        qdrant_grpc_port=qdrant_server.grpc_port,
        qdrant_prefix=f"t{uuid.uuid4().hex[:12]}_",
    )
    async with (
        running_server(tmp_path / "a", **shared) as a,
        running_server(tmp_path / "b", **shared) as b,
        grpc.aio.insecure_channel(a.address) as ca,
        grpc.aio.insecure_channel(b.address) as cb,
    ):
        stubs = [memory_service_pb2_grpc.MemoryServiceStub(c) for c in (ca, cb)]
        # create the collection first, so every attempt below races on the gate alone
        await stubs[0].AddMemory(s.AddMemoryRequest(content="Warm-up memory about the weather in Oslo."))
        outcomes: list[list[int]] = []
        for fact in FACTS:
            calls = [
                stub.AddMemory(s.AddMemoryRequest(content=fact)) for stub in stubs for _ in range(PER_REPLICA)
            ]
            responses = await asyncio.gather(*calls)
            outcomes.append(sorted(r.outcome for r in responses))
            ids = {r.memory.id for r in responses}
            assert len(ids) == 1, (fact, ids)  # every duplicate names the one stored memory
        page = await stubs[1].ListMemories(s.ListMemoriesRequest(page_size=100))
    created, duplicate = s.ADD_OUTCOME_CREATED, s.ADD_OUTCOME_DUPLICATE
    assert outcomes == [[created] + [duplicate] * (2 * PER_REPLICA - 1)] * len(FACTS)
    assert sorted(m.content for m in page.memories) == sorted(
        [*FACTS, "Warm-up memory about the weather in Oslo."]
    )
