"""RunConsolidation end to end (issue 30, item 3): a live server (embedded Qdrant, the local model,
a real gRPC channel) merges a cluster of related event memories into one insight that keeps every
specific; the sources become its history and search stops returning them. Without an LLM the rules
merge; with one (the real ``openai`` client against a local OpenAI-wire server) the LLM does, and an
answer that drops a specific falls back to the rules."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.domain.clock import ManualClock
from engram_server.testing import running_server
from tests.reflection.test_reflection import Llm, chat_reply, settings_for
from tests.support.rpc import add, count

Stub = memory_service_pb2_grpc.MemoryServiceStub
HOUR = 3600.0

PIANO = [
    "Emma started piano lessons on March 3 with her teacher Mr. Lee.",
    "Emma had her second piano lesson on March 10 and learned the C major scale.",
    "Mr. Lee said Emma should practise piano for 20 minutes a day.",
]
OTHER = "The user's car needs new tyres before the trip to Denver."
#: The test's clusters: the local model puts the piano memories at 0.61-0.77 of each other.
CLUSTERING = {"consolidation_cluster_threshold": 0.70}


@pytest.fixture
async def st(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Stub]:
    async with (
        running_server(tmp_path / "data", clock=clock, **CLUSTERING) as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        yield Stub(ch)


async def seed(st: Stub, clock: ManualClock) -> list[s.AddMemoryResponse]:
    out = []
    for text in [*PIANO, OTHER]:
        out.append(await add(st, text, tags=["family"] if "Emma" in text else []))
        clock.advance(HOUR)
    return out


async def consolidate(st: Stub, **kw: Any) -> s.RunConsolidationResponse:
    resp: s.RunConsolidationResponse = await st.RunConsolidation(s.RunConsolidationRequest(**kw))
    return resp


async def test_rules_merge_a_cluster_keeping_every_detail(st: Stub, clock: ManualClock) -> None:
    added = await seed(st, clock)
    resp = await consolidate(st)
    assert resp.outcome == s.CONSOLIDATION_OUTCOME_COMPLETED, resp.detail
    (cluster,) = resp.clusters
    assert cluster.merged_by == "rules"
    assert set(cluster.source_ids) == {a.memory.id for a in added[:3]}
    insight = cluster.insight
    assert insight.type == m.MEMORY_TYPE_INSIGHT
    assert list(insight.derived_from) == list(cluster.source_ids)
    assert "source:consolidation" in insight.tags and "family" in insight.tags
    for detail in ("March 3", "March 10", "20 minutes", "Mr. Lee", "C major"):
        assert detail in insight.content
    assert (resp.candidates, resp.memories_before, resp.memories_after) == (4, 4, 2)
    # The sources are the insight's history: kept, never searched.
    got = await st.GetMemory(s.GetMemoryRequest(id=insight.id, include_history=True))
    assert {h.id for h in got.history} == set(cluster.source_ids)
    found = await st.SearchMemories(
        s.SearchMemoriesRequest(query="When did Emma start piano lessons?", limit=5)
    )
    ids = [r.memory.id for r in found.results]
    assert ids[0] == insight.id and not set(ids) & set(cluster.source_ids)
    assert await count(st) == 2


async def test_dry_run_writes_nothing(st: Stub, clock: ManualClock) -> None:
    await seed(st, clock)
    resp = await consolidate(st, dry_run=True)
    assert resp.outcome == s.CONSOLIDATION_OUTCOME_WOULD_RUN
    (cluster,) = resp.clusters
    assert len(cluster.source_ids) == 3 and "March 10" in cluster.insight.content
    assert await count(st) == 4


async def test_throttled_by_interval_and_by_nothing_changed(st: Stub, clock: ManualClock) -> None:
    await seed(st, clock)
    assert (await consolidate(st)).outcome == s.CONSOLIDATION_OUTCOME_COMPLETED
    again = await consolidate(st)
    assert again.outcome == s.CONSOLIDATION_OUTCOME_THROTTLED and "minimum interval" in again.detail
    assert again.HasField("next_run_after")
    clock.advance(7 * HOUR)
    idle = await consolidate(st)
    assert idle.outcome == s.CONSOLIDATION_OUTCOME_THROTTLED and "nothing was written" in idle.detail
    await add(st, "The user booked a dentist appointment for Friday.")
    ran = await consolidate(st)
    assert ran.outcome == s.CONSOLIDATION_OUTCOME_NOTHING_TO_MERGE  # ran: no new cluster
    assert (await consolidate(st, force=True)).outcome == s.CONSOLIDATION_OUTCOME_NOTHING_TO_MERGE


async def test_unrelated_memories_are_not_merged(st: Stub, clock: ManualClock) -> None:
    for text in (OTHER, "Dinner with Sam is on Saturday.", "The quarterly report is due April 14."):
        await add(st, text)
    resp = await consolidate(st)
    assert resp.outcome == s.CONSOLIDATION_OUTCOME_NOTHING_TO_MERGE and not resp.clusters
    assert await count(st) == 3


async def test_the_llm_merges_when_configured(tmp_path: Path, clock: ManualClock, llm: Llm) -> None:
    merged = (
        "Emma started piano lessons with Mr. Lee on March 3; at the second lesson on March 10 she "
        "learned the C major scale, and Mr. Lee asked for 20 minutes of practice a day."
    )
    llm.replies.append(chat_reply(json.dumps({"content": merged})))
    async with (
        running_server(tmp_path / "data", clock=clock, **settings_for(llm), **CLUSTERING) as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        st = Stub(ch)
        await seed(st, clock)
        resp = await consolidate(st)
        (cluster,) = resp.clusters
        assert cluster.merged_by == "llm" and cluster.insight.content == merged
        prompt = llm.calls[-1].json["messages"][-1]["content"]
        assert all(text in prompt for text in PIANO)


async def test_an_llm_answer_that_drops_a_specific_falls_back_to_the_rules(
    tmp_path: Path, clock: ManualClock, llm: Llm
) -> None:
    lossy = "Emma takes piano lessons with Mr. Lee and practises daily."  # no dates, no minutes
    llm.replies.append(chat_reply(json.dumps({"content": lossy})))
    async with (
        running_server(tmp_path / "data", clock=clock, **settings_for(llm), **CLUSTERING) as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        st = Stub(ch)
        await seed(st, clock)
        (cluster,) = (await consolidate(st)).clusters
        assert cluster.merged_by == "rules" and "March 10" in cluster.insight.content
        assert len(llm.calls) == 1
