"""Cross-encoder reranking of English queries, through a live server: the model lifts an answer
the fused ranking placed lower, ENGRAM_RERANK=off gives the fused ranking back, a Chinese query is
not reranked, ``final`` stays monotonic with the order, and ``ScoreBreakdown.rerank`` comes over
gRPC. Real server, real gRPC channel, the real local embedder and the real cross-encoder (skipped
when its package is not installed), a manual clock."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import grpc
import pytest

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.adapters import rerank
from engram_server.domain.clock import ManualClock
from engram_server.testing import running_server
from tests.integration.test_rescore_cues import CHAT as RESCORE_CHAT

pytestmark = pytest.mark.skipif(not rerank.available(), reason="the reranking model package is not installed")

Stub = memory_service_pb2_grpc.MemoryServiceStub
COLLECTION = "chat"

# The rescoring tests' chat, and two Chinese turns the cross-encoder must leave alone.
CHAT = [*RESCORE_CHAT, "Ann: 我的猫叫帕斯卡，它喜欢看船。", "Bob: 我的陶艺课在星期四。"]


async def _add(stub: Stub, clock: ManualClock, texts: Sequence[str]) -> None:
    await stub.AddMemories(
        s.AddMemoriesRequest(
            collection=COLLECTION,
            memories=[
                s.NewMemory(content=t, type=m.MEMORY_TYPE_EVENT, allow_duplicate=True, session_id="s1")
                for t in texts
            ],
        )
    )
    clock.advance(600.0)


async def _ranked(tmp: Path, queries: Sequence[str], **settings: object) -> list[list[s.SearchResult]]:
    clock = ManualClock(start=1_700_000_000.0)
    async with (
        running_server(tmp, clock=clock, **settings) as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        stub = Stub(ch)
        await _add(stub, clock, CHAT)
        out = []
        for q in queries:
            resp = await stub.SearchMemories(
                s.SearchMemoriesRequest(query=q, collections=[COLLECTION], limit=10)
            )
            out.append(list(resp.results))
        return out


HANG = "Where will Bob hang the painting?"
HALLWAY = "Bob: In the hallway, next to the photo of my grandmother."
CHINESE = "帕斯卡是谁？"


def _position(results: Sequence[s.SearchResult], content: str) -> int:
    return [r.memory.content for r in results].index(content)


async def test_rerank_lifts_an_english_answer_and_off_keeps_the_fused_order(tmp_path: Path) -> None:
    queries = [HANG, CHINESE]
    off = await _ranked(tmp_path / "off", queries, rerank="off")
    on = await _ranked(tmp_path / "on", queries, rerank="auto")
    # the fused ranking places the answer lower; the cross-encoder lifts it
    assert _position(on[0], HALLWAY) < _position(off[0], HALLWAY)
    # over gRPC: the model's judgement on the reranked results, 0 with reranking off
    assert any(r.score.rerank > 0.0 for r in on[0])
    assert all(0.0 <= r.score.rerank <= 1.0 for r in on[0])
    assert all(r.score.rerank == 0.0 for res in off for r in res)
    # a Chinese memory is not read by the (English) model
    assert all(r.score.rerank == 0.0 for r in on[0] if "我" in r.memory.content)
    # final stays monotonic with the returned order; relevance is the fused ranking's own
    for res in on:
        finals = [r.score.final for r in res]
        assert finals == sorted(finals, reverse=True)
    rel_off = {r.memory.content: r.score.relevance for r in off[0]}
    assert all(
        r.score.relevance == pytest.approx(rel_off[r.memory.content])
        for r in on[0]
        if r.memory.content in rel_off
    )
    # the head keeps the fused finals, handed out in the new order
    assert sorted(r.score.final for r in on[0]) == pytest.approx(sorted(r.score.final for r in off[0]))
    # a Chinese query is not reranked: the same results, order and scores as with reranking off
    # (finals to float noise: the two servers embed their batches apart, and floats differ in the
    # fifth decimal now and then)
    assert [(r.memory.content, r.score.rerank) for r in on[1]] == [
        (r.memory.content, r.score.rerank) for r in off[1]
    ]
    assert [r.score.final for r in on[1]] == pytest.approx([r.score.final for r in off[1]], abs=1e-4)
