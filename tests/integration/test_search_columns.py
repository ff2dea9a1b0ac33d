"""A search's candidate columns and its answer are what the plain way of building them gives.

The embedded store turns the engine's hits into candidate columns in one pass a hit (the ranking
fields it keeps beside the engine decide liveness), and SearchMemories builds its results inside
the answer. These run chat turns (a small built-in chat always, a LoCoMo conversation when the data
is on this machine) through a live server and check, query by query:

* the store's columns (ids in order, cosine, BM25 score, type, importance, times, script) equal a
  reference built the plain way: the same engine queries with the whole filter applied by the
  engine and every field read from the points' payloads;
* the gRPC answer equals the answer built from ``service.search`` in-process the plain way (a
  ``SearchResult`` message per hit, copied into the answer), every score field included.

Real server, real gRPC channel, the real local model, a manual clock."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import qdrant_edge as qe
from google.protobuf.timestamp_pb2 import Timestamp

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.adapters.storage.edge import EdgeStore
from engram_server.adapters.storage.edge.engine import DENSE_SEARCH_PARAMS, _edge_filter
from engram_server.adapters.storage.payload import LEXICAL_VECTOR, filter_plan
from engram_server.api import convert as c
from engram_server.api.answers import answer_budget, fitting
from engram_server.app import EngramServer
from engram_server.domain.clock import ManualClock
from engram_server.domain.model import Candidates, StoreFilter
from engram_server.domain.service.commands import SearchQuery
from engram_server.testing import running_server
from tests.integration.test_rescore_cues import CHAT, COLLECTION, QUERIES, _add, _locomo

Stub = memory_service_pb2_grpc.MemoryServiceStub
DENSE, LEXICAL = 100, 50  # candidate counts of one store query (the store answers any alike)
MARGIN = 16


@pytest.fixture
async def live(tmp_path: Path, clock: ManualClock) -> AsyncIterator[tuple[EngramServer, Stub]]:
    async with (
        running(tmp_path, clock) as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        srv.service._note_access = lambda records, now: None
        yield srv, Stub(ch)


def running(tmp_path: Path, clock: ManualClock) -> Any:
    return running_server(tmp_path / "data", clock=clock, search_cache_entries=0, nearest_lists=0)


def _plain_columns(store: EdgeStore, vector: Any, sparse: Any, flt: StoreFilter) -> dict[str, list[Any]]:
    """The candidates the plain way: the engine applies the whole filter; ids, ranking fields and
    scores from the points as the engine returns them (payloads, ``str`` ids)."""
    shard = store._cols[COLLECTION].shard
    where = _edge_filter(filter_plan(flt))
    query = vector.reshape(-1).tolist()
    dense = shard.query(
        qe.QueryRequest(
            limit=DENSE + max(MARGIN, DENSE // 4),
            query=qe.Query.Nearest(query),
            filter=where,
            with_payload=True,
            with_vector=False,
            params=DENSE_SEARCH_PARAMS,
        )
    )
    # BM25 as the store asks it: a margin more, unfiltered (the engine scores a filtered sparse
    # query apart, in other floats), the first ``LEXICAL`` live ones by their payloads kept
    lexical = [
        h
        for h in shard.query(
            qe.QueryRequest(
                limit=LEXICAL + MARGIN,
                query=qe.Query.Nearest(
                    qe.SparseVector(list(sparse.indices), list(sparse.values)), using=LEXICAL_VECTOR
                ),
                with_payload=True,
                with_vector=False,
            )
        )
        if _live(h.payload or {}, flt)
    ][:LEXICAL]
    bm25 = {str(h.id): float(h.score) for h in lexical if h.score > 0}
    rows: list[tuple[str, float, dict[str, Any]]] = [
        (str(h.id), float(h.score), h.payload or {}) for h in dense[:DENSE]
    ]
    rows += [(str(h.id), float(h.score), h.payload or {}) for h in dense[DENSE:] if str(h.id) in bm25]
    seen = {pid for pid, _, _ in rows}
    only = [pid for pid in bm25 if pid not in seen]
    if only:
        exact = shard.query(
            qe.QueryRequest(
                limit=len(only),
                query=qe.Query.Nearest(query),
                filter=qe.Filter(must=[qe.HasIdCondition(set(only))]),
                with_payload=True,
                with_vector=False,
                params=qe.SearchParams(quantization=qe.QuantizationSearchParams(ignore=True)),
            )
        )
        rows += sorted(((str(h.id), float(h.score), h.payload or {}) for h in exact), key=lambda r: -r[1])
    return {
        "ids": [pid for pid, _, _ in rows],
        "cosine": [cos for _, cos, _ in rows],
        "lexical": [bm25.get(pid, 0.0) for pid, _, _ in rows],
        "types": [p["type"] for _, _, p in rows],
        "importance": [float(p["importance"]) for _, _, p in rows],
        "created_at": [float(p["created_at"]) for _, _, p in rows],
        "scripts": [str(p.get("script") or "") for _, _, p in rows],
    }


def _live(payload: dict[str, Any], flt: StoreFilter) -> bool:
    """Current, not a draft, not trashed and not expired at ``flt.live_at``, read from a payload."""
    assert flt.live_at is not None
    return (
        not payload.get("superseded_by")
        and not payload.get("draft")
        and not payload.get("trashed_at")
        and float(payload.get("valid_until", math.inf)) > flt.live_at
    )


def _columns(found: Candidates) -> dict[str, list[Any]]:
    return {
        "ids": list(found.ids),
        "cosine": found.cosine.tolist(),
        "lexical": found.lexical.tolist(),
        "types": [t.value for t in found.types],
        "importance": found.importance.tolist(),
        "created_at": found.created_at.tolist(),
        "scripts": list(found.scripts),
    }


def _plain_answer(hits: Sequence[Any], budget: int) -> s.SearchMemoriesResponse:
    results, truncated = fitting(
        (s.SearchResult(memory=c.memory_out(h.memory), score=c.score_out(h.score)) for h in hits), budget
    )
    return s.SearchMemoriesResponse(results=results, truncated=truncated)


async def _check(
    server: EngramServer, stub: Stub, clock: ManualClock, queries: Sequence[str], limit: int
) -> int:
    store = server.store
    assert isinstance(store, EdgeStore)
    svc: Any = server.service
    budget = answer_budget(server.settings.max_message_bytes)
    rows = 0
    for q in queries:
        vector = (await svc._embed([q], query=True))[0]
        sparse = svc._lexical.encode_query(q)
        flt = StoreFilter(live_at=clock.now())
        found = await store.candidates(COLLECTION, vector, DENSE, flt, sparse=sparse, lexical_limit=LEXICAL)
        assert _columns(found) == _plain_columns(store, np.asarray(vector), sparse, flt), q
        rows += len(found)
        answer = await stub.SearchMemories(
            s.SearchMemoriesRequest(query=q, collections=[COLLECTION], limit=limit)
        )
        hits = await svc.search(SearchQuery(query=q, collections=(COLLECTION,), limit=limit))
        assert answer == _plain_answer(hits, budget), q
        assert len(answer.results) == min(limit, len(found))
    return rows


async def test_columns_and_answer_of_a_chat_are_the_plain_ones(
    live: tuple[EngramServer, Stub], clock: ManualClock
) -> None:
    server, stub = live
    await _add(stub, clock, CHAT)
    # history versions, a deletion and an expired memory: points the engine holds that a search
    # must not return (the store tells them from its kept fields, the reference from payloads)
    page = await stub.ListMemories(s.ListMemoriesRequest(collection=COLLECTION, page_size=100))
    by_text = {mem.content: mem.id for mem in page.memories}
    for old, new in [
        (CHAT[0], "Ann: Did Bob finish the sunrise painting? He did, on Sunday."),
        (CHAT[5], "Bob: Porto!"),
    ]:
        await stub.UpdateMemory(s.UpdateMemoryRequest(collection=COLLECTION, id=by_text[old], content=new))
    await stub.DeleteMemory(s.DeleteMemoryRequest(collection=COLLECTION, id=by_text[CHAT[13]]))
    soon = Timestamp(seconds=int(clock.now()) + 60)
    await stub.UpdateMemory(
        s.UpdateMemoryRequest(collection=COLLECTION, id=by_text[CHAT[7]], valid_until=soon)
    )
    clock.advance(3600.0)
    # 18 turns, 2 updated (their history versions dead), 1 deleted, 1 expired
    assert await _check(server, stub, clock, QUERIES, 5) == len(QUERIES) * (len(CHAT) - 2)


async def test_columns_and_answer_of_a_locomo_conversation_are_the_plain_ones(
    live: tuple[EngramServer, Stub], clock: ManualClock
) -> None:
    data = _locomo(turns=240, questions=30)
    if data is None:
        pytest.skip("LoCoMo data not found (see test_rescore_cues.LOCOMO)")
    texts, questions = data
    server, stub = live
    await _add(stub, clock, texts)
    clock.advance(3600.0)
    # past the first 100 nearest: BM25-found rows kept from the margin and lexical-only rows
    assert await _check(server, stub, clock, questions, 10) > len(questions) * DENSE
