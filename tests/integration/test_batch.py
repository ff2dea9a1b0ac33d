"""AddMemories (batch ingestion) through a real gRPC channel to a live in-process server
(embedded qdrant-edge, the real local embedding model, a manual clock): per-item gate outcomes
against the collection and the earlier items of the batch, order, whole-call refusal of invalid
input, limits, idempotency, and TTL exactly as AddMemory computes it."""

from __future__ import annotations

from typing import Any

import grpc

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.app import EngramServer
from engram_server.domain.clock import ManualClock
from engram_server.domain.model import StoreFilter
from tests.support.rpc import add, count, fails, ts

Stub = memory_service_pb2_grpc.MemoryServiceStub
HOUR = 3600.0
DAY = 86400.0

DARK = "I prefer dark mode in all my code editors."
DARK_PARAPHRASE = "In every code editor I use, I like a dark theme."  # near zone of DARK (0.70–0.92)
BERLIN = "I live in Berlin."
TAX = "The quarterly tax filing deadline is April 15."
BOOK = "Currently reading 'The Left Hand of Darkness' by Ursula K. Le Guin."


def item(content: str, **kw: Any) -> s.NewMemory:
    return s.NewMemory(content=content, **kw)


async def add_many(stub: Stub, *items: s.NewMemory, collection: str = "") -> list[s.AddMemoryResult]:
    resp = await stub.AddMemories(s.AddMemoriesRequest(collection=collection, memories=list(items)))
    assert len(resp.results) == len(items)
    return list(resp.results)


async def test_outcomes_per_item_in_order(stub: Stub, server: EngramServer) -> None:
    stored = await add(stub, DARK, type=m.MEMORY_TYPE_DIRECTIVE, source_type=m.SOURCE_TYPE_DOCUMENT)
    results = await add_many(
        stub,
        item(BERLIN, source_type=m.SOURCE_TYPE_DOCUMENT),  # 0 new
        item(DARK, source_type=m.SOURCE_TYPE_USER_INPUT),  # 1 copy of the stored memory
        item(TAX),  # 2 new
        item("i live in  berlin", source_type=m.SOURCE_TYPE_USER_INPUT),  # 3 copy of item 0
        item(DARK_PARAPHRASE),  # 4 new, near the stored memory
        item(BOOK),  # 5 new
    )
    outcomes = [r.outcome for r in results]
    assert outcomes == [
        s.ADD_OUTCOME_CREATED,
        s.ADD_OUTCOME_DUPLICATE,
        s.ADD_OUTCOME_CREATED,
        s.ADD_OUTCOME_DUPLICATE,
        s.ADD_OUTCOME_CREATED,
        s.ADD_OUTCOME_CREATED,
    ]
    # Order: each created result is its own item.
    assert [results[i].memory.content for i in (0, 2, 4, 5)] == [BERLIN, TAX, DARK_PARAPHRASE, BOOK]
    assert len({results[i].memory.id for i in (0, 2, 4, 5)}) == 4

    # A copy of a stored memory: that memory, its similarity, its provenance promoted.
    dup = results[1]
    assert dup.memory.id == stored.memory.id and dup.duplicate_similarity > 0.92
    assert not dup.HasField("duplicate_of_index")
    assert dup.memory.source_type == m.SOURCE_TYPE_USER_INPUT
    got = await stub.GetMemory(s.GetMemoryRequest(id=stored.memory.id))
    assert list(got.memory.source_type_history) == [m.SOURCE_TYPE_DOCUMENT, m.SOURCE_TYPE_USER_INPUT]

    # A copy of an earlier item of the batch: that item's memory and index; the write carries the
    # merged provenance.
    in_batch = results[3]
    assert in_batch.memory.id == results[0].memory.id and in_batch.duplicate_of_index == 0
    assert in_batch.duplicate_similarity == 1.0  # same text once normalised
    berlin = await stub.GetMemory(s.GetMemoryRequest(id=results[0].memory.id))
    assert berlin.memory.source_type == m.SOURCE_TYPE_USER_INPUT
    assert list(berlin.memory.source_type_history) == [m.SOURCE_TYPE_DOCUMENT, m.SOURCE_TYPE_USER_INPUT]

    near = {n.id: n.similarity for n in results[4].near_duplicates}
    assert stored.memory.id in near and 0.70 <= near[stored.memory.id] <= 0.92
    assert not results[5].near_duplicates
    assert all(not r.replayed for r in results)
    assert await count(stub) == 5  # the stored one + four new
    assert await server.store.count("default", StoreFilter(include_history=True)) == 5


async def test_near_zone_against_earlier_items(stub: Stub) -> None:
    first, second = await add_many(stub, item(DARK), item(DARK_PARAPHRASE), collection="prefs")
    assert first.outcome == second.outcome == s.ADD_OUTCOME_CREATED
    assert not first.near_duplicates
    near = {n.id: n for n in second.near_duplicates}
    assert first.memory.id in near
    assert 0.70 <= near[first.memory.id].similarity <= 0.92
    assert near[first.memory.id].content == DARK
    # The same answer a second single add would get.
    single = await add(stub, DARK_PARAPHRASE + " Always.", collection="prefs")
    assert first.memory.id in {n.id for n in single.near_duplicates}


async def test_exact_copies_within_the_batch_are_written_once(stub: Stub) -> None:
    results = await add_many(stub, *(item(TAX) for _ in range(4)))
    assert [r.outcome for r in results] == [s.ADD_OUTCOME_CREATED] + [s.ADD_OUTCOME_DUPLICATE] * 3
    assert {r.memory.id for r in results} == {results[0].memory.id}
    assert [r.duplicate_of_index for r in results[1:]] == [0, 0, 0]
    assert await count(stub) == 1


async def test_ttl_and_defaults_as_single_add(stub: Stub, clock: ManualClock) -> None:
    now = clock.now()
    results = await add_many(
        stub,
        item("The user's favourite editor is Helix."),
        item("My name is Ada Lovelace.", type=m.MEMORY_TYPE_IDENTITY, importance=9),
        item("Currently in Lisbon for the conference.", tags=["location"], importance=9),
        item("Dentist appointment on Friday at 10:00.", valid_until=ts(now + 5 * HOUR)),
        item("Met Sam for lunch at the harbour.", created_at=ts(now - 2 * DAY), importance=2),
        collection="ttl",
    )
    plain, ident, tagged, explicit, old = (r.memory for r in results)
    assert plain.collection == "ttl" and plain.type == m.MEMORY_TYPE_EVENT and plain.importance == 5
    assert plain.source == m.SOURCE_AGENT and plain.source_type == m.SOURCE_TYPE_UNKNOWN
    assert plain.valid_until.seconds == int(now + 7 * DAY)
    assert not ident.HasField("valid_until")
    assert tagged.valid_until.seconds == int(now + 7 * DAY)
    assert explicit.valid_until.seconds == int(now + 5 * HOUR)
    assert old.created_at.seconds == int(now - 2 * DAY)
    assert old.valid_until.seconds == int(now - 2 * DAY + 3 * DAY)  # event, importance < 5: 3 days
    # Exactly what AddMemory computes for the same input.
    single = await add(
        stub, "Met Sam for coffee at the station.", created_at=ts(now - 2 * DAY), importance=2, collection="x"
    )
    assert single.memory.valid_until.seconds == old.valid_until.seconds


async def test_an_invalid_item_refuses_the_whole_call(stub: Stub, server: EngramServer) -> None:
    await add(stub, DARK)
    err = await fails(
        stub.AddMemories(
            s.AddMemoriesRequest(
                memories=[
                    item(TAX),
                    item("   "),
                    item(BOOK, importance=11, tags=["ok", ""]),
                    item(BERLIN, request_id="x" * 200),
                ]
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "ERROR_REASON_INVALID_ARGUMENT",
    )
    assert set(err.violations) == {
        "memories[1].content",
        "memories[2].importance",
        "memories[2].tags[1]",
        "memories[3].request_id",
    }
    assert await count(stub) == 1  # nothing written

    err = await fails(
        stub.AddMemories(s.AddMemoriesRequest(memories=[item(TAX), item(BOOK, type=99)])),
        grpc.StatusCode.INVALID_ARGUMENT,
        "ERROR_REASON_INVALID_ARGUMENT",
    )
    assert set(err.violations) == {"memories[1].type"}
    err = await fails(
        stub.AddMemories(s.AddMemoriesRequest(collection="Not A Name", memories=[item(TAX)])),
        grpc.StatusCode.INVALID_ARGUMENT,
        "ERROR_REASON_INVALID_ARGUMENT",
    )
    assert set(err.violations) == {"collection"}
    err = await fails(
        stub.AddMemories(
            s.AddMemoriesRequest(
                memories=[item(TAX), item(BOOK, valid_until=ts(server.service.now() - HOUR))]
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "ERROR_REASON_INVALID_ARGUMENT",
    )
    assert set(err.violations) == {"memories[1].valid_until"}
    assert await count(stub) == 1


async def test_many_violations_are_listed_up_to_a_cap(stub: Stub) -> None:
    err = await fails(
        stub.AddMemories(s.AddMemoriesRequest(memories=[item("") for _ in range(30)])),
        grpc.StatusCode.INVALID_ARGUMENT,
        "ERROR_REASON_INVALID_ARGUMENT",
    )
    assert len(err.violations) == 11
    assert err.violations[""] == "20 more violations not listed"
    assert "memories[9].content" in err.violations


async def test_empty_and_oversized_batches_are_refused(stub: Stub, server: EngramServer) -> None:
    err = await fails(
        stub.AddMemories(s.AddMemoriesRequest()),
        grpc.StatusCode.INVALID_ARGUMENT,
        "ERROR_REASON_INVALID_ARGUMENT",
    )
    assert set(err.violations) == {"memories"}
    limit = server.service.policy.limits.max_batch_items
    assert limit == 64  # the documented default
    err = await fails(
        stub.AddMemories(
            s.AddMemoriesRequest(memories=[item(f"Fact number {i}.") for i in range(limit + 1)])
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "ERROR_REASON_INVALID_ARGUMENT",
    )
    assert set(err.violations) == {"memories"} and "at most 64" in err.violations["memories"]
    assert await server.store.list_collections() == []  # nothing written, not even a collection


async def test_idempotency_per_item(stub: Stub) -> None:
    batch = s.AddMemoriesRequest(
        memories=[item(BERLIN, request_id="imp-1"), item(TAX, request_id="imp-2"), item(BOOK)]
    )
    first = (await stub.AddMemories(batch)).results
    again = (await stub.AddMemories(batch)).results
    assert [r.replayed for r in again] == [True, True, False]
    assert [r.memory.id for r in again[:2]] == [r.memory.id for r in first[:2]]
    assert again[2].outcome == s.ADD_OUTCOME_DUPLICATE  # no key: the gate answers
    assert await count(stub) == 3
    # Keys are shared with AddMemory.
    single = await stub.AddMemory(s.AddMemoryRequest(content=BERLIN, request_id="imp-1"))
    assert single.replayed and single.memory.id == first[0].memory.id

    # A key reused for a different memory refuses the whole call; nothing else is written.
    await fails(
        stub.AddMemories(
            s.AddMemoriesRequest(memories=[item(DARK), item("Something else entirely.", request_id="imp-2")])
        ),
        grpc.StatusCode.ALREADY_EXISTS,
        "ERROR_REASON_IDEMPOTENCY_CONFLICT",
    )
    assert await count(stub) == 3
    # One key twice in one call is invalid.
    err = await fails(
        stub.AddMemories(
            s.AddMemoriesRequest(memories=[item(DARK, request_id="k"), item(DARK_PARAPHRASE, request_id="k")])
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "ERROR_REASON_INVALID_ARGUMENT",
    )
    assert set(err.violations) == {"memories[1].request_id"}
    assert await count(stub) == 3
