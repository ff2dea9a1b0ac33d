"""The server store keeps each point's rescoring cues in its payload and returns them with the
search's own candidate query, so a search reads no record to rescore; points written without the
field (an older release) rank exactly as before, their text read.

A live Engram server on the session's real Qdrant node (``qdrant_server``: skips without the
binary), a real gRPC channel, the real local model, a manual clock. Chat turns (a LoCoMo
conversation when the data is on this machine, and the small built-in chat always) are searched
three ways: with the stored cues, from the texts read (the service's own fallback), and after the
cue fields are removed from every point (what an older release wrote). The answers (ids, order,
every score field) must be equal; the Qdrant reads per search are counted on the client.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from qdrant_client import models

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.adapters.storage.qdrant import QdrantStore
from engram_server.adapters.storage.qdrant_cues import CUE_FIELDS, CueMemo, stored_cue
from engram_server.adapters.storage.qdrant_grpc import PACKED_FIELD
from engram_server.app import EngramServer
from engram_server.domain.clock import ManualClock
from engram_server.domain.ranking import RescoreCue, rescore_cue
from engram_server.testing import running_server
from tests.integration.test_rescore_cues import CHAT, COLLECTION, LOCOMO, QUERIES, _add, _answer, _locomo
from tests.support.qdrant import QdrantNode

Stub = memory_service_pb2_grpc.MemoryServiceStub


class _Reads:
    """Counts the Qdrant calls a store makes (by client method) and the points it retrieves."""

    def __init__(self, store: QdrantStore) -> None:
        self.calls: Counter[str] = Counter()
        self.retrieved = 0
        client = store._c
        for name in ("retrieve", "query_points", "query_batch_points", "scroll"):
            real = getattr(client, name)

            def counting(*a: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
                self.calls[_name] += 1
                if _name == "retrieve":
                    self.retrieved += len(kw.get("ids") or a[1])
                return _real(*a, **kw)

            setattr(client, name, counting)
        raw = store._raw  # the search's reads as raw gRPC (qdrant_grpc): counted by the same names
        assert raw is not None, "a server store with prefer_grpc reads through qdrant_grpc"
        for name, as_name in (("get", "retrieve"), ("query_batch", "query_batch_points")):
            real = getattr(raw, name)

            def counting_raw(*a: Any, _real: Any = real, _name: str = as_name, **kw: Any) -> Any:
                self.calls[_name] += 1
                if _name == "retrieve":
                    self.retrieved += len(a[1])
                return _real(*a, **kw)

            setattr(raw, name, counting_raw)

    def snapshot(self) -> tuple[int, int]:
        return self.calls["retrieve"], self.retrieved


async def _read_path() -> None:
    return None


def _search(query: str, limit: int) -> s.SearchMemoriesRequest:
    return s.SearchMemoriesRequest(query=query, collections=[COLLECTION], limit=limit)


async def _run(
    stub: Stub, reads: _Reads, queries: Sequence[str], limit: int
) -> tuple[list[Any], list[tuple[int, int]]]:
    """Each query's answer and the (retrieve calls, points retrieved) its search made."""
    answers, counts = [], []
    for q in queries:
        calls, points = reads.snapshot()
        answers.append(_answer(await stub.SearchMemories(_search(q, limit))))
        after = reads.snapshot()
        counts.append((after[0] - calls, after[1] - points))
    return answers, counts


async def _from_texts(server: EngramServer, stub: Stub, queries: Sequence[str], limit: int) -> list[Any]:
    """The answers with the store's cues hidden from the service (it reads the texts)."""
    service: Any = server.service
    service._rescore_cues = lambda head: _read_path()
    try:
        return [_answer(await stub.SearchMemories(_search(q, limit))) for q in queries]
    finally:
        del service._rescore_cues


@pytest.fixture
async def live(
    qdrant_server: QdrantNode, tmp_path: Path, clock: ManualClock
) -> AsyncIterator[tuple[EngramServer, Stub]]:
    async with (
        running_server(
            tmp_path / "data",
            clock=clock,
            qdrant_url=qdrant_server.url,
            qdrant_grpc_port=qdrant_server.grpc_port,
            qdrant_prefix=f"cues{tmp_path.name[-6:]}_",
            search_cache_entries=0,
            nearest_lists=0,
            rerank="off",  # the cross-encoder reads its candidates' texts; counted here: rescoring
        ) as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        srv.service._note_access = lambda records, now: None  # type: ignore[method-assign]
        yield srv, Stub(ch)


async def _strip_cues(store: QdrantStore) -> None:
    """Make every point look written by an older release: no cue fields, no packed ranking value."""
    await store._c.delete_payload(
        store._qname(COLLECTION),
        keys=[*CUE_FIELDS, PACKED_FIELD],
        points=models.FilterSelector(filter=models.Filter()),
        wait=True,
    )


async def _stored_cues(store: QdrantStore) -> dict[str, tuple[str, RescoreCue | None]]:
    """By id, each point's text and the cue its payload keeps."""
    records, _ = await store._c.scroll(
        store._qname(COLLECTION), limit=10_000, with_payload=["content", *CUE_FIELDS]
    )
    return {str(r.id): (str((r.payload or {})["content"]), stored_cue(r.payload)) for r in records}


async def _three_ways(
    server: EngramServer, stub: Stub, queries: Sequence[str], limit: int
) -> tuple[list[Any], list[tuple[int, int]], list[tuple[int, int]]]:
    store = server.store
    assert isinstance(store, QdrantStore)
    reads = _Reads(store)
    with_cues, cue_reads = await _run(stub, reads, queries, limit)
    assert with_cues == await _from_texts(server, stub, queries, limit)
    await _strip_cues(store)
    # The first search on the older points reads their ranking fields in one more retrieve (its
    # candidate query asked for the packed value alone); from then on the query asks for them.
    first, first_reads = await _run(stub, reads, queries[:1], limit)
    legacy, legacy_reads = await _run(stub, reads, queries, limit)
    assert legacy == with_cues
    assert first == legacy[:1]
    assert first_reads[0][0] == legacy_reads[0][0] + 1
    assert first_reads[0][1] > legacy_reads[0][1]
    return with_cues, cue_reads, legacy_reads


async def test_server_search_rescores_from_stored_cues_with_one_read_less(
    live: tuple[EngramServer, Stub], clock: ManualClock
) -> None:
    server, stub = live
    await _add(stub, clock, CHAT)
    clock.advance(3600.0)
    store = server.store
    assert isinstance(store, QdrantStore)
    for text, cue in (await _stored_cues(store)).values():
        assert cue == rescore_cue(text), text  # written with each point
    limit = 5
    answers, cue_reads, legacy_reads = await _three_ways(server, stub, QUERIES, limit)
    assert all(len(a) == limit for a in answers)
    # Rescoring moved scores (a named speaker, a question), so the comparison means something.
    assert any(row[-1] > 0 for a in answers for row in a)
    assert any(row[-1] < 0 for a in answers for row in a)
    # With the cues: one retrieve per search, of the winners only. Without them (older points):
    # the rescored candidates' texts are read first (every candidate here: 18 memories).
    assert cue_reads == [(1, limit)] * len(QUERIES)
    assert all(calls == 2 and points == limit + len(CHAT) for calls, points in legacy_reads), legacy_reads


async def test_an_updated_text_gets_its_new_cue(live: tuple[EngramServer, Stub], clock: ManualClock) -> None:
    server, stub = live
    await _add(stub, clock, CHAT)
    store = server.store
    assert isinstance(store, QdrantStore)
    by_text = {text: pid for pid, (text, _) in (await _stored_cues(store)).items()}
    asked = by_text["Bob: Which trail are you taking? How long is it?"]
    new = "Ann: We are taking the Trilho da Preguiça with my sister."
    await stub.UpdateMemory(s.UpdateMemoryRequest(collection=COLLECTION, id=asked, content=new))
    # (set_fields of the text, the other way a text changes, keeps the cue in step too)
    told = by_text["Ann: I moved to Porto in March. The new flat is near the river."]
    await store.set_fields(COLLECTION, {told: {"content": "Moved to Porto? Yes, in March."}})
    stored = await _stored_cues(store)
    assert new in {text for text, _ in stored.values()}
    for text, cue in stored.values():
        assert cue == rescore_cue(text), text
    assert stored[told][1] == RescoreCue(None, 0.5)  # (the label "Ann" it had is cleared)
    clock.advance(3600.0)
    reads = _Reads(store)
    answers, counts = await _run(stub, reads, QUERIES, 5)
    assert answers == await _from_texts(server, stub, QUERIES, 5)
    assert counts == [(1, 5)] * len(QUERIES)


async def test_locomo_server_ranking_with_stored_cues_is_the_ranking_from_the_texts(
    live: tuple[EngramServer, Stub], clock: ManualClock
) -> None:
    data = _locomo(turns=240, questions=40)
    if data is None:
        pytest.skip(f"LoCoMo data not found at {LOCOMO}")
    texts, questions = data
    server, stub = live
    await _add(stub, clock, texts)
    clock.advance(3600.0)
    limit = 10
    answers, cue_reads, legacy_reads = await _three_ways(server, stub, questions, limit)
    assert sum(1 for a in answers for row in a if row[-1] != 0) > len(questions)
    assert cue_reads == [(1, limit)] * len(questions)
    # older points: the best 50 read for rescoring, then the winners
    assert all(calls == 2 and points > limit for calls, points in legacy_reads), legacy_reads


def test_the_cue_memo_keeps_each_querys_newest_cues() -> None:
    """``CueMemo.put_cues`` (one query's hits at once): the newest value of an id wins across its
    two generations, a hit without a cue forgets its id, and the memo stays bounded."""
    memo = CueMemo(entries=8)
    a, b = RescoreCue("Alice", 0.0), RescoreCue(None, 0.5)
    memo.put_cues("c", ["1", "2", "3"], [a, a, a], [1.0, 2.0, 3.0])
    memo.put_cues("c", ["1", "4"], [b, b], [10.0, 4.0])  # the young generation is now full: it rolls
    assert memo.get("c", "1") == (b, 10.0)
    memo.put_cues("c", ["2", "5"], [b, None], [20.0, 5.0])  # a None among them: one at a time
    assert memo.get("c", "2") == (b, 20.0)
    assert memo.get("c", "5") is None
    memo.put_cues("c", ["1"], [None], [0.0])  # no cue now: forgotten in both generations
    assert memo.get("c", "1") is None
    assert memo.get("other", "2") is None
    for i in range(100):
        memo.put_cues("c", [f"x{i}", f"y{i}"], [a, b], [float(i), float(i)])
    assert len(memo) <= 8 + 2
    assert memo.get("c", "y99") == (b, 99.0)
    memo.forget("c", ["y99"])
    assert memo.get("c", "y99") is None
    memo.forget("c")
    assert len(memo) == 0
