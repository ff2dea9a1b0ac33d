"""The per-request reranking switch (SearchMemoriesRequest.rerank, the client's ``rerank=``),
through a live server: OFF gives the fused order of a server without reranking, ON and unset the
cross-encoder's; ON on a server started with ENGRAM_RERANK=off answers without reranking; an
unknown value is INVALID_ARGUMENT. Real server, real gRPC channel, the real local embedder and the
real cross-encoder (skipped when its package is not installed), a manual clock."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import grpc
import pytest

from engram_client import AsyncEngramClient, EngramClient
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.adapters import rerank
from engram_server.domain.clock import ManualClock
from engram_server.testing import running_server
from tests.integration.test_rerank import CHAT, COLLECTION, HALLWAY, HANG, _add, _position
from tests.support.rpc import fails

pytestmark = pytest.mark.skipif(not rerank.available(), reason="the reranking model package is not installed")

Stub = memory_service_pb2_grpc.MemoryServiceStub


def _rows(results: Sequence[s.SearchResult]) -> list[tuple[str, float]]:
    """Each result's memory and the model's part of its score, in order. Not ``final``: each search
    counts its results as recalled, and a recalled memory decays more slowly, so ``final`` may
    move by a little between two searches depending on when that count lands."""
    return [(r.memory.content, r.score.rerank) for r in results]


async def _search(stub: Stub, mode: int) -> list[s.SearchResult]:
    resp = await stub.SearchMemories(
        s.SearchMemoriesRequest(query=HANG, collections=[COLLECTION], limit=10, rerank=mode)  # type: ignore[arg-type]
    )
    return list(resp.results)


async def test_per_request_switch_over_grpc_and_the_async_client(tmp_path: Path) -> None:
    clock = ManualClock(start=1_700_000_000.0)
    async with running_server(tmp_path / "auto", clock=clock, rerank="auto") as srv:
        async with grpc.aio.insecure_channel(srv.address) as ch:
            stub = Stub(ch)
            await _add(stub, clock, CHAT)
            default = await _search(stub, s.RERANK_MODE_UNSPECIFIED)
            on = await _search(stub, s.RERANK_MODE_ON)
            off = await _search(stub, s.RERANK_MODE_OFF)
            await fails(_search(stub, 7), grpc.StatusCode.INVALID_ARGUMENT, "ERROR_REASON_INVALID_ARGUMENT")
        async with AsyncEngramClient(srv.address) as client:
            c_default = await client.search(HANG, collections=COLLECTION, limit=10)
            c_on = await client.search(HANG, collections=COLLECTION, limit=10, rerank=True)
            c_off = await client.search(HANG, collections=COLLECTION, limit=10, rerank=False)
    # unset is the server's default (on): the model's judgement comes back, and lifts the answer
    assert _rows(default) == _rows(on)
    assert any(r.score.rerank > 0.0 for r in on)
    # OFF: no model, the fused order (the answer lower than with the model)
    assert all(r.score.rerank == 0.0 for r in off)
    assert _position(on, HALLWAY) < _position(off, HALLWAY)
    # the client's parameter maps onto the same three modes
    assert [(h.memory.content, h.score.rerank) for h in c_default] == _rows(on)
    assert [(h.memory.content, h.score.rerank) for h in c_on] == _rows(on)
    assert [(h.memory.content, h.score.rerank) for h in c_off] == _rows(off)

    # a server started without reranking gives, with OFF, the same answer as the switch
    clock2 = ManualClock(start=1_700_000_000.0)
    async with (
        running_server(tmp_path / "off", clock=clock2, rerank="off") as srv2,
        grpc.aio.insecure_channel(srv2.address) as ch2,
    ):
        stub2 = Stub(ch2)
        await _add(stub2, clock2, CHAT)
        server_off = await _search(stub2, s.RERANK_MODE_UNSPECIFIED)
        asked_on = await _search(stub2, s.RERANK_MODE_ON)
    assert [c for c, _ in _rows(server_off)] == [c for c, _ in _rows(off)]
    # ON cannot conjure a model the server does not run: the answer is the fused one
    assert _rows(asked_on) == _rows(server_off)


def test_the_sync_client_sends_the_switch(tmp_path: Path) -> None:
    import asyncio  # noqa: PLC0415

    async def serve_and_ask() -> tuple[list[float], list[float]]:
        clock = ManualClock(start=1_700_000_000.0)
        async with running_server(tmp_path, clock=clock, rerank="auto") as srv:
            async with grpc.aio.insecure_channel(srv.address) as ch:
                await _add(Stub(ch), clock, CHAT)

            def ask() -> tuple[list[float], list[float]]:
                with EngramClient(srv.address) as client:
                    on = client.search(HANG, collections=COLLECTION, limit=10, rerank=True)
                    off = client.search(HANG, collections=COLLECTION, limit=10, rerank=False)
                return [h.score.rerank for h in on], [h.score.rerank for h in off]

            return await asyncio.to_thread(ask)

    on, off = asyncio.run(serve_and_ask())
    assert any(y > 0.0 for y in on)
    assert all(y == 0.0 for y in off)


async def test_only_a_reranked_search_takes_the_deeper_pool(tmp_path: Path) -> None:
    """The semantic side asks the store for ENGRAM_MIN_RERANKED_CANDIDATES (150) when the
    cross-encoder will read the head, and ENGRAM_MIN_CANDIDATES (100) otherwise: asked off, or a
    Chinese query (never reranked)."""
    clock = ManualClock(start=1_700_000_000.0)
    async with running_server(tmp_path, clock=clock, rerank="auto") as srv:
        asked: list[int] = []
        store = srv.store
        real = store.candidates

        async def counting(
            collection: str, vector: object, limit: int, *args: object, **kw: object
        ) -> object:
            asked.append(limit)
            return await real(collection, vector, limit, *args, **kw)  # type: ignore[arg-type]

        store.candidates = counting  # type: ignore[method-assign]
        async with grpc.aio.insecure_channel(srv.address) as ch:
            stub = Stub(ch)
            await _add(stub, clock, CHAT)
            for mode in (s.RERANK_MODE_UNSPECIFIED, s.RERANK_MODE_OFF):
                await _search(stub, mode)
            await stub.SearchMemories(
                s.SearchMemoriesRequest(query="帕斯卡喜欢什么？", collections=[COLLECTION], limit=10)
            )
    assert asked == [150, 100, 100]
