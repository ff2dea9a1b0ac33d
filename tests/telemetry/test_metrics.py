"""Metrics through the OpenTelemetry API, read back with an in-memory reader (cumulative, so
every assertion compares before and after)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server import telemetry
from engram_server.app import EngramServer
from engram_server.domain.clock import ManualClock
from engram_server.testing import running_server
from tests.telemetry.conftest import Otel

Stub = memory_service_pb2_grpc.MemoryServiceStub


def total(otel: Otel, metric: str, **match: Any) -> float:
    """Sum of counter values / histogram counts of the points whose attributes include ``match``."""
    out = 0.0
    for attrs, point in otel.points(metric):
        if all(attrs.get(k) == v for k, v in match.items()):
            out += point.count if hasattr(point, "bucket_counts") else point.value
    return out


@pytest.fixture
async def srv(otel: Otel, tmp_path: Path, clock: ManualClock) -> AsyncIterator[EngramServer]:
    async with running_server(tmp_path / "data", clock=clock) as server:
        yield server


@pytest.fixture
async def stub(srv: EngramServer) -> AsyncIterator[Stub]:
    async with grpc.aio.insecure_channel(srv.address) as ch:
        yield Stub(ch)


async def test_rpc_duration_by_method_and_status(otel: Otel, stub: Stub) -> None:
    key = {"rpc.service": "engram.v1.MemoryService", "rpc.method": "GetMemory"}
    ok_before = total(otel, "rpc.server.call.duration", **key, **{"rpc.grpc.status_code": 0})
    nf_before = total(otel, "rpc.server.call.duration", **key, **{"rpc.grpc.status_code": 5})
    added = await stub.AddMemory(s.AddMemoryRequest(content="Frank likes jazz."))
    await stub.GetMemory(s.GetMemoryRequest(id=added.memory.id))
    for _ in range(2):
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.GetMemory(s.GetMemoryRequest(id="00000000-0000-4000-8000-000000000000"))
    # A refused call's duration is recorded after its status went out (abort sends it at once):
    # give the server a moment to record the last one before reading the counts.
    for _ in range(100):
        if total(otel, "rpc.server.call.duration", **key, **{"rpc.grpc.status_code": 5}) >= nf_before + 2:
            break
        await asyncio.sleep(0.05)
    assert total(otel, "rpc.server.call.duration", **key, **{"rpc.grpc.status_code": 0}) == ok_before + 1
    assert total(otel, "rpc.server.call.duration", **key, **{"rpc.grpc.status_code": 5}) == nf_before + 2
    (attrs, point), *_ = [
        (a, p) for a, p in otel.points("rpc.server.call.duration") if a.get("rpc.method") == "GetMemory"
    ]
    assert attrs["rpc.system"] == "grpc" and point.sum > 0


async def test_gate_outcomes(otel: Otel, stub: Stub) -> None:
    def outcome(name: str) -> float:
        return total(otel, "engram.gate.outcomes", **{"engram.gate.outcome": name, "engram.collection": "g"})

    before = {k: outcome(k) for k in ("created", "duplicate", "near_duplicate")}
    await stub.AddMemory(s.AddMemoryRequest(collection="g", content="Frank drinks green tea every morning."))
    await stub.AddMemory(s.AddMemoryRequest(collection="g", content="Frank drinks green tea every morning."))
    await stub.AddMemory(s.AddMemoryRequest(collection="g", content="Frank drinks green tea most mornings."))
    after = {k: outcome(k) - before[k] for k in before}
    assert after["created"] == 1 and after["duplicate"] == 1
    assert after["near_duplicate"] + after["duplicate"] + after["created"] == 3


async def test_embedding_batches(otel: Otel, stub: Stub) -> None:
    before = total(otel, "engram.embedding.batch.size", **{"engram.embedding.lane": "documents"})
    lat_before = total(otel, "engram.embedding.duration", **{"engram.outcome": "ok"})
    await stub.AddMemory(s.AddMemoryRequest(content="A fact about embeddings."))
    assert total(otel, "engram.embedding.batch.size", **{"engram.embedding.lane": "documents"}) == before + 1
    assert total(otel, "engram.embedding.duration", **{"engram.outcome": "ok"}) >= lat_before + 1


async def test_sweeper_and_memories_gauge(
    otel: Otel, stub: Stub, srv: EngramServer, clock: ManualClock
) -> None:
    await stub.AddMemory(s.AddMemoryRequest(collection="sw", content="The meeting is at noon.", importance=2))
    await stub.AddMemory(
        s.AddMemoryRequest(collection="sw", content="My name is Ada Lovelace.", type=m.MEMORY_TYPE_IDENTITY)
    )
    await telemetry.refresh_memory_gauge(srv.store, clock.now())
    gauge = {
        (a["engram.collection"], a["engram.memory.type"]): p.value for a, p in otel.points("engram.memories")
    }
    assert gauge[("sw", "event")] == 1 and gauge[("sw", "identity")] == 1 and gauge[("sw", "insight")] == 0

    before = total(otel, "engram.sweeper.deleted", **{"engram.collection": "sw"})
    clock.advance(4 * 86400)  # the event (importance 2) lives 3 days
    assert await srv.service.sweep() == {"sw": 1}
    assert total(otel, "engram.sweeper.deleted", **{"engram.collection": "sw"}) == before + 1


def test_reflection_helpers(otel: Otel) -> None:
    def runs(outcome: str) -> float:
        return total(otel, "engram.reflection.runs", **{"engram.reflection.outcome": outcome})

    before = runs("completed")
    telemetry.record_reflection_run("completed", collection="engram_reflection")
    telemetry.record_reflection_insights("stored", 2)
    assert runs("completed") == before + 1
    assert total(otel, "engram.reflection.insights", **{"engram.reflection.insight": "stored"}) >= 2

    with telemetry.reflection_span("engram_reflection"), telemetry.llm_span("gpt-4o-mini") as call:
        call.set_tokens(120, 40)
    (llm,) = otel.named("chat gpt-4o-mini")
    (parent,) = otel.named("engram.reflection")
    assert llm.parent is not None and parent.context is not None
    assert llm.parent.span_id == parent.context.span_id
    attrs = dict(llm.attributes or {})
    assert (
        attrs["gen_ai.request.model"],
        attrs["gen_ai.usage.input_tokens"],
        attrs["gen_ai.usage.output_tokens"],
    ) == (
        "gpt-4o-mini",
        120,
        40,
    )
    assert total(otel, "engram.llm.duration", **{"gen_ai.request.model": "gpt-4o-mini"}) >= 1

    with pytest.raises(TimeoutError), telemetry.llm_span("gpt-4o-mini"):
        raise TimeoutError
    assert total(otel, "engram.llm.duration", **{"engram.outcome": "error"}) >= 1


async def test_search_caches(otel: Otel, stub: Stub) -> None:
    """A repeated search is served from the candidate cache; after a write, its nearest list is
    patched rather than searched again (embedded storage)."""

    def cache(result: str) -> float:
        return total(otel, "engram.search.candidate_cache", **{"engram.cache.result": result})

    def lists(how: str) -> float:
        return total(
            otel, "engram.storage.nearest_lists", **{"engram.nearest_list": how, "engram.collection": "c"}
        )

    await stub.AddMemory(s.AddMemoryRequest(collection="c", content="Frank keeps his bike in the shed."))
    before = {k: cache(k) for k in ("hit", "miss")} | {k: lists(k) for k in ("searched", "patched")}
    query = s.SearchMemoriesRequest(collections=["c"], query="where is the bike?", limit=5)
    await stub.SearchMemories(query)
    await stub.SearchMemories(query)
    await stub.AddMemory(s.AddMemoryRequest(collection="c", content="The car is parked on Elm Street."))
    await stub.SearchMemories(query)
    assert (cache("hit") - before["hit"], cache("miss") - before["miss"]) == (1, 2)
    assert (lists("searched") - before["searched"], lists("patched") - before["patched"]) == (1, 1)
