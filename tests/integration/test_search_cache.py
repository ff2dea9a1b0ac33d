"""The search candidate cache (ENGRAM_SEARCH_CACHE_ENTRIES): a repeated search reuses the storage's
candidate list only while that list is exactly what storage would return now — every write, update,
delete and expiry is seen at once — and ranking (recency) still runs at the time of each search.
Real server, real gRPC channel, embedded qdrant-edge, the real local model, a manual clock."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.app import EngramServer
from engram_server.domain.clock import ManualClock
from engram_server.domain.ranking import reinforced_recency
from engram_server.testing import running_server
from tests.support.rpc import add, ts

Stub = memory_service_pb2_grpc.MemoryServiceStub
HOUR = 3600.0
QUERY = "where is the spare house key hidden?"


class Spy:
    """Counts the storage candidate fetches of a live server."""

    def __init__(self, server: EngramServer) -> None:
        self.calls = 0
        real = server.store.candidates

        async def candidates(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return await real(*args, **kwargs)

        server.store.candidates = candidates  # type: ignore[method-assign]


async def search(stub: Stub, query: str = QUERY, **kw: Any) -> list[Any]:
    resp = await stub.SearchMemories(s.SearchMemoriesRequest(query=query, **{"limit": 10, **kw}))
    return list(resp.results)


def ids(results: list[Any]) -> list[str]:
    return [r.memory.id for r in results]


@pytest.fixture
async def cached(tmp_path: Path, clock: ManualClock) -> AsyncIterator[tuple[EngramServer, Stub, Spy]]:
    async with (
        running_server(tmp_path / "data", clock=clock) as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        yield srv, Stub(ch), Spy(srv)


async def test_repeated_search_reuses_candidates_and_ranks_at_search_time(
    cached: tuple[EngramServer, Stub, Spy], clock: ManualClock
) -> None:
    server, stub, spy = cached
    await add(stub, "The spare house key is under the blue flower pot.", importance=6)
    await add(stub, "My name is Ada and I live in Lisbon.", type=m.MEMORY_TYPE_IDENTITY)
    first = await search(stub)
    assert spy.calls == 1
    again = await search(stub)
    assert spy.calls == 1  # reused
    assert [(r.memory.id, r.score.final) for r in again] == [(r.memory.id, r.score.final) for r in first]
    # access counters are written after searches: they do not invalidate the candidates, but the
    # records returned carry the new counts
    await server.service.drain()
    counted = await search(stub)
    assert spy.calls == 1
    assert {r.memory.access_count for r in counted} == {2}
    await server.service.drain()
    assert {r.memory.access_count for r in await search(stub)} == {3}
    # recency is computed when the search runs, not when the candidates were fetched
    clock.advance(10 * HOUR)
    later = await search(stub)
    assert spy.calls == 1
    event = next(r for r in later if r.memory.type == m.MEMORY_TYPE_EVENT)
    before = next(r for r in first if r.memory.id == event.memory.id)
    # (a float on the wire; the 3 recalls so far slow the decay: reinforcement)
    assert event.score.recency == pytest.approx(reinforced_recency(0.99, 10.0, 3), rel=1e-6)
    assert 0.99**10 < event.score.recency < 1.0
    assert event.score.final < before.score.final
    # a limit within the same candidate counts (max(3 x limit, 100) semantic, max(3 x limit, 50)
    # lexical) shares the list ...
    await search(stub, limit=15)
    assert spy.calls == 1
    # ... another candidate count, filter or query text is another list
    await search(stub, limit=40)
    await search(stub, filter=m.MemoryFilter(min_importance=5))
    await search(stub, query="spare key location")
    assert spy.calls == 4


async def test_writes_updates_deletes_and_expiry_are_seen_at_once(
    cached: tuple[EngramServer, Stub, Spy], clock: ManualClock
) -> None:
    _, stub, spy = cached
    pot = await add(stub, "The spare house key is under the blue flower pot.")
    assert ids(await search(stub)) == [pot.memory.id]
    # a new memory
    box = await add(stub, "We hid a second spare key in the garden key box, code 4711.")
    assert set(ids(await search(stub))) == {pot.memory.id, box.memory.id}
    # an update replaces the content (the old version is kept as history, never returned)
    moved = await stub.UpdateMemory(
        s.UpdateMemoryRequest(id=pot.memory.id, content="The spare house key now hangs in the garage.")
    )
    contents = [r.memory.content for r in await search(stub)]
    assert moved.memory.content in contents and pot.memory.content not in contents
    # a delete
    await stub.DeleteMemory(s.DeleteMemoryRequest(id=box.memory.id))
    assert ids(await search(stub)) == [moved.memory.id]
    # expiry: nothing is written, time passes valid_until
    soon = await add(
        stub, "Today the spare key is with the neighbour at number 12.", valid_until=ts(clock.now() + HOUR)
    )
    assert soon.memory.id in ids(await search(stub))
    calls = spy.calls
    assert soon.memory.id in ids(await search(stub))
    assert spy.calls == calls  # still valid: reused
    clock.advance(HOUR)
    assert ids(await search(stub)) == [moved.memory.id]
    assert spy.calls == calls + 1  # one of the candidates expired: fetched anew
    # time going backwards (a test clock, a corrected system clock) also refetches
    clock.advance(-2 * HOUR)
    assert soon.memory.id in ids(await search(stub))


async def test_nearest_lists_follow_their_setting(tmp_path: Path, clock: ManualClock) -> None:
    for setting, kept in ((None, 4096), (0, 0), (7, 7)):
        overrides = {} if setting is None else {"nearest_lists": setting}
        async with running_server(tmp_path / f"data-{setting}", clock=clock, **overrides) as srv:
            assert srv.store._nearest.entries == kept  # type: ignore[attr-defined]  # white box


async def test_quantization_follows_its_setting(tmp_path: Path, clock: ManualClock) -> None:
    """``ENGRAM_EDGE_QUANTIZATION`` reaches the embedded store: the default collection a first
    AddMemory creates has int8 codes by default and none with ``none``."""
    for setting, want in ((None, "int8"), ("none", None)):
        data = tmp_path / f"data-{setting}"
        overrides = {} if setting is None else {"edge_quantization": setting}
        async with (
            running_server(data, clock=clock, **overrides) as srv,
            grpc.aio.insecure_channel(srv.address) as ch,
        ):
            await add(Stub(ch), "The spare house key is under the blue flower pot.")
        config = json.loads((data / "collections" / "default" / "shard" / "edge_config.json").read_text())
        got = config.get("quantization_config")
        assert (got["scalar"]["type"] if got else None) == want, setting


async def test_cache_off(tmp_path: Path, clock: ManualClock) -> None:
    async with (
        running_server(tmp_path / "data", clock=clock, search_cache_entries=0) as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        stub, spy = Stub(ch), Spy(srv)
        await add(stub, "The spare house key is under the blue flower pot.")
        for _ in range(3):
            await search(stub)
        assert spy.calls == 3


async def test_cache_is_bounded(tmp_path: Path, clock: ManualClock) -> None:
    async with (
        running_server(tmp_path / "data", clock=clock, search_cache_entries=2) as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        stub, spy = Stub(ch), Spy(srv)
        await add(stub, "The spare house key is under the blue flower pot.")
        for q in ("key one", "key two", "key three", "key one"):
            await search(stub, query=q)
        assert spy.calls == 4  # "key one" was evicted (least recently used)
        await search(stub, query="key three")
        assert spy.calls == 4


async def test_result_records_survive_writes_to_other_memories(
    cached: tuple[EngramServer, Stub, Spy], clock: ManualClock
) -> None:
    """The records of a search's results are read again only when they may have changed: a
    write to another memory of the collection leaves them cached, an update of a result does
    not; written access counters are copied into the cached records."""
    server, stub, _ = cached
    server.service.policy = replace(server.service.policy, access_flush_seconds=3600.0)  # flushed by drain
    reads: list[int] = []
    real = server.store.retrieve

    async def retrieve(collection: str, wanted: Any, **kwargs: Any) -> Any:
        reads.append(len(wanted))
        return await real(collection, wanted, **kwargs)

    server.store.retrieve = retrieve  # type: ignore[method-assign]

    async def searched() -> tuple[list[Any], int]:
        before = len(reads)
        results = await search(stub)
        return results, len(reads) - before

    pot = await add(stub, "The spare house key is under the blue flower pot.")
    box = await add(stub, "We hid a second spare key in the garden key box, code 4711.")
    first, n = await searched()
    assert set(ids(first)) == {pot.memory.id, box.memory.id} and n == 1
    # another memory written: the candidates are fetched again, the two records are not
    await add(stub, "The dentist appointment moved to Friday at nine.")
    again, n = await searched()
    fresh = set(ids(again)) - set(ids(first))  # the new memory, if it is among the results
    assert set(ids(first)) <= set(ids(again))
    assert (n, reads[-1]) == ((1, len(fresh)) if fresh else (0, reads[-1]))
    # one of them updated: read again (its new content returned), the other one reused
    moved = await stub.UpdateMemory(
        s.UpdateMemoryRequest(id=pot.memory.id, content="The spare house key now hangs in the garage.")
    )
    after, n = await searched()
    assert moved.memory.content in [r.memory.content for r in after] and n == 1 and reads[-1] == 1
    # access counters written: the cached records get the counts the store wrote (not read again)
    await server.service.drain()
    counted, n = await searched()
    assert n == 0
    by_id = {r.memory.id: r.memory for r in counted}
    assert by_id[box.memory.id].access_count == 3  # the counts of the three searches before
    stored = (await stub.GetMemory(s.GetMemoryRequest(id=box.memory.id))).memory
    assert (stored.access_count, stored.last_accessed_at) == (3, by_id[box.memory.id].last_accessed_at)


FACTS = [
    "The spare house key is under the blue flower pot.",
    "Ada's dentist appointment is on Friday at nine.",
    "The team offsite will be in Porto in May.",
    "Ada prefers green tea to coffee in the morning.",
    "The garden irrigation timer runs at six every evening.",
    "Bruno lent Ada his ladder last weekend.",
    "The car needs new brake pads before the trip.",
    "Ada is learning Japanese on Tuesday evenings.",
    "The quarterly report is due on the last Friday of the month.",
    "The neighbour at number 12 keeps a copy of the key.",
]
QUESTIONS = [
    "where is the spare key?",
    "what does Ada drink in the morning?",
    "when is the dentist?",
    "what needs doing on the car?",
    "where is the offsite?",
]


#: Searches without a filter, and with user filters (kept nearest lists are per filter).
SEARCH_FILTERS = [
    None,
    None,
    m.MemoryFilter(types=[m.MEMORY_TYPE_EVENT]),
    m.MemoryFilter(min_importance=5),
]


async def test_caches_answer_like_a_server_without_them(tmp_path: Path, clock: ManualClock) -> None:
    """Two servers on one clock get the same random adds, updates, deletes, time steps and
    searches; one has every search cache (candidates, nearest lists, records), the other none.
    Every search returns the same memories with the same scores and counters."""
    rng = random.Random(11)
    async with (
        running_server(tmp_path / "cached", clock=clock) as a,
        running_server(tmp_path / "plain", clock=clock, search_cache_entries=0, nearest_lists=0) as b,
        grpc.aio.insecure_channel(a.address) as ca,
        grpc.aio.insecure_channel(b.address) as cb,
    ):
        stubs = (Stub(ca), Stub(cb))
        pairs: list[tuple[str, str]] = []  # the same memory's id in each server
        searches = sweeps = 0
        for step in range(80):
            op = rng.choice(["add", "add", "search", "search", "search", "update", "delete", "time", "sweep"])
            if op == "add" or (not pairs and op in ("update", "delete")):
                content = f"{rng.choice(FACTS)} (note {step})"
                importance = rng.randint(1, 10)
                kind = rng.choice([m.MEMORY_TYPE_EVENT, m.MEMORY_TYPE_INSIGHT])
                got = [await add(st, content, importance=importance, type=kind) for st in stubs]
                assert got[0].outcome == got[1].outcome
                if got[0].outcome == s.ADD_OUTCOME_CREATED:
                    pairs.append((got[0].memory.id, got[1].memory.id))
            elif op in ("update", "delete"):
                pair = rng.choice(pairs)
                content = f"{rng.choice(FACTS)} (rewritten {step})"
                codes = []
                for st, mid in zip(stubs, pair, strict=True):
                    try:
                        if op == "update":
                            await st.UpdateMemory(s.UpdateMemoryRequest(id=mid, content=content))
                        else:
                            await st.DeleteMemory(s.DeleteMemoryRequest(id=mid))
                        codes.append(grpc.StatusCode.OK)
                    except grpc.aio.AioRpcError as exc:  # expired and swept
                        codes.append(exc.code())
                assert codes[0] == codes[1] and codes[0] in (grpc.StatusCode.OK, grpc.StatusCode.NOT_FOUND)
                if op == "delete" or codes[0] != grpc.StatusCode.OK:
                    pairs.remove(pair)
            elif op == "time":
                clock.advance(rng.choice([60.0, HOUR, 24 * HOUR, 4 * 24 * HOUR]))
            elif op == "sweep":  # expired memories deleted (by filter) in both
                swept = [await server.service.sweep() for server in (a, b)]
                assert swept[0] == swept[1]
                sweeps += bool(swept[0])
            else:
                query = rng.choice(QUESTIONS)
                flt = rng.choice(SEARCH_FILTERS)
                found = [await search(st, query, filter=flt) for st in stubs]
                for server in (a, b):
                    await server.service.drain()  # counters written alike
                seen = [
                    [
                        (
                            r.memory.content,
                            r.memory.access_count,
                            round(r.score.final, 6),
                            round(r.score.raw_similarity, 6),
                        )
                        for r in results
                    ]
                    for results in found
                ]
                assert seen[0] == seen[1], (step, query, flt)
                searches += 1
        assert searches >= 15 and len(pairs) >= 5 and sweeps >= 1
