"""Reinforcement through the live server: a memory that searches returned often keeps more of its
recency than one never recalled, and the search's score shows it."""

from __future__ import annotations

import pytest

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.app import EngramServer
from engram_server.domain.clock import ManualClock
from engram_server.domain.model import MemoryType
from engram_server.domain.ranking import recency, reinforced_recency
from tests.support.rpc import add

Stub = memory_service_pb2_grpc.MemoryServiceStub
HOUR = 3600.0


async def test_a_recalled_memory_decays_more_slowly(
    stub: Stub, server: EngramServer, clock: ManualClock
) -> None:
    recalled = await add(stub, "The user visited the Louvre museum in Paris.")
    other = await add(stub, "The user booked a table at a sushi bar in Osaka.")
    for _ in range(6):
        await stub.SearchMemories(s.SearchMemoriesRequest(query="Which museum did the user visit?", limit=1))
    await server.service.drain()  # access counters written
    clock.advance(72 * HOUR)
    resp = await stub.SearchMemories(
        s.SearchMemoriesRequest(query="What did the user do on the trip?", limit=5)
    )
    by_id = {r.memory.id: r for r in resp.results}
    hit, plain = by_id[recalled.memory.id], by_id[other.memory.id]
    count = hit.memory.access_count
    assert count >= 6 and plain.memory.access_count == 0
    assert plain.score.recency == pytest.approx(recency(MemoryType.EVENT, 0.0, 72 * HOUR), rel=1e-3)
    assert hit.score.recency == pytest.approx(reinforced_recency(0.99, 72.0, count), rel=1e-3)
    assert hit.score.recency > plain.score.recency
