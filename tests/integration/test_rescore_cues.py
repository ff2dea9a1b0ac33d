"""Rescoring from the cues the embedded store keeps ranks exactly as rescoring from the texts read.

A search rescores its best ``rescore_depth`` candidates from their text (a lead label the query
names, the share of question sentences). The embedded store keeps those two cues of every point
beside its ranking fields, computed when the point is written or loaded, so the search reads no
record to rescore. These run chat turns (a LoCoMo conversation when the data is on this machine,
and a small built-in chat always) through a live server and check that the ranking with the
kept cues is the ranking from the texts read (ids, order, every score field), that only the
winners are read, and that the cues are right after an update and after a restart. Real server,
real gRPC channel, the real local model, a manual clock."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.adapters.storage.edge import EdgeStore
from engram_server.adapters.storage.payload import rank_key
from engram_server.app import EngramServer
from engram_server.domain.clock import ManualClock
from engram_server.domain.ranking import rescore_cue
from engram_server.testing import running_server

Stub = memory_service_pb2_grpc.MemoryServiceStub
T = m.MemoryType
#: The LoCoMo development half, beside the project (``../shared/data/locomo``, as eval.locomo
#: reads it) in the nearest folder above that holds it; never copied into the project.
LOCOMO = next(
    (
        p / "shared" / "data" / "locomo" / "locomo_dev.json"
        for p in Path(__file__).resolve().parents
        if (p / "shared" / "data" / "locomo" / "locomo_dev.json").is_file()
    ),
    Path("shared/data/locomo/locomo_dev.json"),
)
COLLECTION = "chat"

# fmt: off
CHAT = [
    "Ann: Hi Bob! Did you finish the painting you started last week?",
    "Bob: Yes, I finished it on Sunday. It is a sunrise over the lake.",
    "Ann: That sounds lovely. Where are you going to hang it?",
    "Bob: In the hallway, next to the photo of my grandmother.",
    "Ann: I moved to Porto in March. The new flat is near the river.",
    "Bob: Porto! Do you like it there? Is the flat big enough for your cat?",
    "Ann: I love it. Pascal has a balcony now and watches the boats all day.",
    "Bob: I started a pottery class on Thursdays. My first bowl cracked in the kiln.",
    "Ann: Oh no! Will you try again? What went wrong?",
    "Bob: The clay was too wet. The teacher says I should wedge it longer.",
    "Ann: My sister is visiting in May; we are going hiking in the Gerês park.",
    "Bob: Which trail are you taking? How long is it?",
    "Ann: The Trilho da Preguiça, about 12 km. We will camp one night.",
    "Bob: I am reading a book about the history of pottery in Japan.",
    "Ann: What is it called? Would you lend it to me when you are done?",
    "Bob: It is called The Unknown Craftsman. Sure, I will bring it next time.",
    "Reminder to self: water the basil before leaving.",
    "Did Ann ever say when her sister arrives?",
]
QUERIES = [
    "What did Bob paint?",
    "Where did Ann move?",
    "What happened to Bob's first bowl?",
    "Who is visiting Ann in May?",
    "Which book is Bob reading?",
    "Does Ann have a pet?",
    "What trail will Ann and her sister hike?",
    "Where will Bob hang the painting?",
    "pottery class",
    "Ann sister hiking",
]
# fmt: on


def _locomo(turns: int, questions: int) -> tuple[list[str], list[str]] | None:
    """The first ``turns`` turns of LoCoMo conv-26 as ``"Speaker: text"`` and its first
    ``questions`` questions; None when the data is not on this machine."""
    if not LOCOMO.is_file():
        return None
    sample = json.loads(LOCOMO.read_text(encoding="utf-8"))[0]
    conv = sample["conversation"]
    texts: list[str] = []
    n = 1
    while f"session_{n}" in conv and len(texts) < turns:
        texts.extend(f"{t['speaker']}: {t['text']}" for t in conv[f"session_{n}"])
        n += 1
    return texts[:turns], [str(q["question"]) for q in sample["qa"][:questions]]


def _answer(resp: s.SearchMemoriesResponse) -> list[tuple[Any, ...]]:
    return [
        (
            r.memory.id,
            r.memory.content,
            r.score.final,
            r.score.relevance,
            r.score.recency,
            r.score.importance,
            r.score.lexical,
            r.score.episode,
            r.score.rescore,
        )
        for r in resp.results
    ]


async def _add(stub: Stub, clock: ManualClock, texts: Sequence[str]) -> None:
    for start in range(0, len(texts), 64):
        chunk = texts[start : start + 64]
        await stub.AddMemories(
            s.AddMemoriesRequest(
                collection=COLLECTION,
                memories=[
                    s.NewMemory(content=t, type=T.MEMORY_TYPE_EVENT, allow_duplicate=True, session_id="s1")
                    for t in chunk
                ],
            )
        )
        clock.advance(600.0)


class _Reads:
    """Counts the ids a server's store reads in full (``Store.retrieve``)."""

    def __init__(self, store: EdgeStore) -> None:
        self.ids: list[str] = []
        real = store.retrieve

        async def counting(collection: str, ids: Sequence[str], **kw: Any) -> Any:
            self.ids.extend(ids)
            return await real(collection, ids, **kw)

        store.retrieve = counting  # type: ignore[method-assign]


async def _read_path() -> None:
    return None


def _search(query: str, limit: int = 5) -> s.SearchMemoriesRequest:
    return s.SearchMemoriesRequest(query=query, collections=[COLLECTION], limit=limit)


async def _both_ways(
    server: EngramServer, stub: Stub, queries: Sequence[str], limit: int
) -> tuple[list[Any], list[Any], list[int]]:
    """Each query's answer with the kept cues and with the texts read (the store's cues hidden
    from the service), and how many records the cue run read per search."""
    store = server.store
    assert isinstance(store, EdgeStore)
    reads = _Reads(store)
    with_cues, read_counts = [], []
    for q in queries:
        before = len(reads.ids)
        with_cues.append(_answer(await stub.SearchMemories(_search(q, limit))))
        read_counts.append(len(reads.ids) - before)
    service: Any = server.service
    service._rescore_cues = lambda head: _read_path()
    try:
        from_texts = [_answer(await stub.SearchMemories(_search(q, limit))) for q in queries]
    finally:
        del service._rescore_cues
    del store.retrieve  # (the instance wrapper: the class method again)
    return with_cues, from_texts, read_counts


def _cues_right(server: EngramServer, contents: dict[str, str]) -> None:
    """The store keeps, for every point, the cue of its text."""
    store = server.store
    assert isinstance(store, EdgeStore)
    col = store._cols[COLLECTION]
    for pid, text in contents.items():
        assert col.cues.get(rank_key(pid)) == rescore_cue(text), text


@pytest.fixture
async def live(tmp_path: Path, clock: ManualClock) -> AsyncIterator[tuple[EngramServer, Stub]]:
    # No search cache (every search reads storage), no access counters between runs (their
    # reinforcement would change the later runs' scores), no cross-encoder (it reads its
    # candidates' texts by design; these tests count the reads rescoring makes).
    async with (
        running_server(
            tmp_path / "data", clock=clock, search_cache_entries=0, nearest_lists=0, rerank="off"
        ) as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        srv.service._note_access = lambda records, now: None  # type: ignore[method-assign]
        yield srv, Stub(ch)


async def _contents(stub: Stub) -> dict[str, str]:
    out: dict[str, str] = {}
    token = ""
    while True:
        page = await stub.ListMemories(
            s.ListMemoriesRequest(collection=COLLECTION, page_size=200, page_token=token)
        )
        out.update((mem.id, mem.content) for mem in page.memories)
        token = page.next_page_token
        if not token:
            return out


async def test_ranking_with_kept_cues_is_the_ranking_from_the_texts_and_reads_only_the_winners(
    live: tuple[EngramServer, Stub], clock: ManualClock
) -> None:
    server, stub = live
    await _add(stub, clock, CHAT)
    clock.advance(3600.0)
    limit = 5
    with_cues, from_texts, read_counts = await _both_ways(server, stub, QUERIES, limit)
    assert with_cues == from_texts
    assert all(len(a) == limit for a in with_cues)
    # Rescoring moved scores (a named speaker, a question), so the comparison means something.
    assert any(row[-1] > 0 for a in with_cues for row in a)
    assert any(row[-1] < 0 for a in with_cues for row in a)
    # Only the winners are read in full (rescoring the best 50 read them all before).
    assert read_counts == [limit] * len(QUERIES)
    _cues_right(server, await _contents(stub))


async def test_kept_cues_follow_updates_and_deletions(
    live: tuple[EngramServer, Stub], clock: ManualClock
) -> None:
    server, stub = live
    await _add(stub, clock, CHAT)
    contents = await _contents(stub)
    by_text = {text: pid for pid, text in contents.items()}
    # A question becomes a statement by another speaker; a statement loses its label.
    asked = by_text["Bob: Which trail are you taking? How long is it?"]
    await stub.UpdateMemory(
        s.UpdateMemoryRequest(
            collection=COLLECTION,
            id=asked,
            content="Ann: We are taking the Trilho da Preguiça with my sister.",
        )
    )
    told = by_text["Ann: I moved to Porto in March. The new flat is near the river."]
    await stub.UpdateMemory(
        s.UpdateMemoryRequest(
            collection=COLLECTION, id=told, content="Moved to Porto in March? Yes, near the river."
        )
    )
    await stub.DeleteMemory(
        s.DeleteMemoryRequest(
            collection=COLLECTION,
            id=by_text["Bob: I am reading a book about the history of pottery in Japan."],
        )
    )
    clock.advance(3600.0)
    after = await _contents(stub)
    assert "Ann: We are taking the Trilho da Preguiça with my sister." in after.values()
    _cues_right(server, after)
    with_cues, from_texts, read_counts = await _both_ways(server, stub, QUERIES, 5)
    assert with_cues == from_texts
    assert read_counts == [5] * len(QUERIES)


async def test_kept_cues_are_loaded_again_after_a_restart(tmp_path: Path, clock: ManualClock) -> None:
    data = tmp_path / "data"
    opts: dict[str, Any] = {"clock": clock, "search_cache_entries": 0, "nearest_lists": 0, "rerank": "off"}
    async with running_server(data, **opts) as srv, grpc.aio.insecure_channel(srv.address) as ch:
        srv.service._note_access = lambda records, now: None  # type: ignore[method-assign]
        stub = Stub(ch)
        await _add(stub, clock, CHAT)
        clock.advance(3600.0)
        before = [_answer(await stub.SearchMemories(_search(q))) for q in QUERIES]
        contents = await _contents(stub)
    async with running_server(data, **opts) as srv, grpc.aio.insecure_channel(srv.address) as ch:
        srv.service._note_access = lambda records, now: None  # type: ignore[method-assign]
        stub = Stub(ch)
        store = srv.store
        assert isinstance(store, EdgeStore)
        for _ in range(200):  # the fields (and cues) of every point load in the background
            if store._cols[COLLECTION].warm:
                break
            await asyncio.sleep(0.05)
        assert store._cols[COLLECTION].warm
        _cues_right(srv, contents)
        assert len(store._cols[COLLECTION].cues) == len(contents)
        with_cues, from_texts, read_counts = await _both_ways(srv, stub, QUERIES, 5)
        assert with_cues == from_texts == before
        assert read_counts == [5] * len(QUERIES)


async def test_locomo_ranking_with_kept_cues_is_the_ranking_from_the_texts(
    live: tuple[EngramServer, Stub], clock: ManualClock
) -> None:
    data = _locomo(turns=240, questions=40)
    if data is None:
        pytest.skip(f"LoCoMo data not found at {LOCOMO}")
    texts, questions = data
    server, stub = live
    await _add(stub, clock, texts)
    clock.advance(3600.0)
    with_cues, from_texts, read_counts = await _both_ways(server, stub, questions, 10)
    assert with_cues == from_texts
    assert sum(1 for a in with_cues for row in a if row[-1] != 0) > len(questions)
    assert read_counts == [10] * len(questions)
