"""The trash through a real gRPC channel to a live server (embedded store, the real local model,
a manual clock): delete → trash → restore / purge / sweep, for memories and collections."""

from __future__ import annotations

from pathlib import Path

import grpc

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.app import EngramServer
from engram_server.domain.clock import ManualClock
from engram_server.domain.model import StoreFilter
from engram_server.testing import running_server
from tests.support.rpc import add, count, fails

Stub = memory_service_pb2_grpc.MemoryServiceStub
DAY = 86400.0
WEEK = 7 * DAY
EVERYTHING = StoreFilter(include_history=True, include_drafts=True, include_trashed=True)


async def search_ids(stub: Stub, query: str, collection: str = "default") -> list[str]:
    resp = await stub.SearchMemories(s.SearchMemoriesRequest(query=query, collections=[collection], limit=20))
    return [r.memory.id for r in resp.results]


async def trash_ids(stub: Stub, collection: str = "") -> list[str]:
    page = await stub.ListTrash(s.ListTrashRequest(collection=collection, page_size=1000))
    return [x.id for x in page.memories]


async def test_delete_trashes_and_restore_brings_back_the_memory_with_its_history(
    stub: Stub, server: EngramServer, clock: ManualClock
) -> None:
    first = await add(stub, "The user's favourite colour is green.", importance=6)
    mid = first.memory.id
    await stub.UpdateMemory(
        s.UpdateMemoryRequest(id=mid, content="The user's favourite colour is dark green.")
    )
    other = await add(stub, "Deploys happen on Tuesdays.")
    assert mid in await search_ids(stub, "favourite colour")

    clock.advance(60)
    done = await stub.DeleteMemory(s.DeleteMemoryRequest(id=mid))
    assert [d.id for d in done.deleted] == [mid]
    assert done.deleted[0].trashed_at.seconds == int(clock.now())
    assert done.purge_at.seconds == int(clock.now() + WEEK)
    # gone from search, get, listing (with history too) and the gate
    assert mid not in await search_ids(stub, "favourite colour")
    err = await fails(
        stub.GetMemory(s.GetMemoryRequest(id=mid)), grpc.StatusCode.NOT_FOUND, "ERROR_REASON_MEMORY_NOT_FOUND"
    )
    assert err.metadata.get("trashed") == "true"
    assert await count(stub, include_history=True) == 1
    await fails(
        stub.UpdateMemory(s.UpdateMemoryRequest(id=mid, content="x")),
        grpc.StatusCode.NOT_FOUND,
        "ERROR_REASON_MEMORY_NOT_FOUND",
    )
    again = await add(stub, "The user's favourite colour is dark green.")  # no duplicate of a trashed one
    assert again.outcome == s.ADD_OUTCOME_CREATED
    # in the trash: the memory (its history version goes with it, not listed)
    page = await stub.ListTrash(s.ListTrashRequest())
    assert [x.id for x in page.memories] == [mid]
    assert page.memories[0].content == "The user's favourite colour is dark green."
    # purged when the retention passes, or when it expires if that comes first (as here: an event)
    assert page.memories[0].valid_until.seconds < clock.now() + WEEK
    assert page.memories[0].purge_at == page.memories[0].valid_until
    stored = {p.record.id: p.record for p in await _all(server, "default")}
    assert sum(1 for r in stored.values() if r.trashed_at is not None) == 2  # memory + history version

    restored = await stub.RestoreMemory(s.RestoreMemoryRequest(id=mid))
    assert restored.memory.id == mid and not restored.memory.HasField("trashed_at")
    assert restored.memory.version == 2 and restored.memory.content.endswith("dark green.")
    # the near-copy written while it was in the trash is reported, not refused
    assert again.memory.id in {n.id for n in restored.near_duplicates}
    got = await stub.GetMemory(s.GetMemoryRequest(id=mid, include_history=True))
    assert [h.version for h in got.history] == [1]
    assert mid in await search_ids(stub, "favourite colour")
    assert await trash_ids(stub) == []
    assert other.memory.id in await search_ids(stub, "deploy day")
    # restoring what is not in the trash
    await fails(
        stub.RestoreMemory(s.RestoreMemoryRequest(id=mid)),
        grpc.StatusCode.NOT_FOUND,
        "ERROR_REASON_MEMORY_NOT_FOUND",
    )
    await fails(
        stub.RestoreMemory(s.RestoreMemoryRequest(id="not-a-uuid")),
        grpc.StatusCode.INVALID_ARGUMENT,
        "ERROR_REASON_INVALID_ARGUMENT",
    )


async def _all(server: EngramServer, collection: str) -> list[object]:
    out: list[object] = []
    offset = None
    while True:
        page, offset = await server.store.scroll(collection, EVERYTHING, 256, offset)
        out.extend(await server.store.retrieve(collection, [r.id for r in page]))
        if offset is None:
            return out


async def test_protected_deletes_keep_their_rule_and_purge_is_final(
    stub: Stub, server: EngramServer, clock: ManualClock
) -> None:
    ident = await add(stub, "My name is Ada Lovelace.", type=m.MEMORY_TYPE_IDENTITY)
    await fails(
        stub.DeleteMemory(s.DeleteMemoryRequest(id=ident.memory.id)),
        grpc.StatusCode.FAILED_PRECONDITION,
        "ERROR_REASON_PROTECTED_MEMORY",
    )
    assert await trash_ids(stub) == []
    await stub.DeleteMemory(s.DeleteMemoryRequest(id=ident.memory.id, force=True))
    a = await add(stub, "Lunch with Marco on Friday.")
    b = await add(stub, "The office wifi password changes monthly.")
    await stub.DeleteMemory(s.DeleteMemoryRequest(id=a.memory.id))
    await stub.DeleteMemory(s.DeleteMemoryRequest(id=b.memory.id))
    assert sorted(await trash_ids(stub)) == sorted([ident.memory.id, a.memory.id, b.memory.id])

    one = await stub.PurgeTrash(s.PurgeTrashRequest(ids=[a.memory.id]))
    assert one.purged_count == 1
    assert await server.store.retrieve("default", [a.memory.id]) == []
    await fails(  # purging what is not in the trash (a live memory, or one purged already)
        stub.PurgeTrash(s.PurgeTrashRequest(ids=[a.memory.id])),
        grpc.StatusCode.NOT_FOUND,
        "ERROR_REASON_MEMORY_NOT_FOUND",
    )
    rest = await stub.PurgeTrash(s.PurgeTrashRequest())
    assert rest.purged_count == 2
    assert await trash_ids(stub) == []
    assert await server.store.count("default", EVERYTHING) == 0


async def test_the_sweeper_purges_after_the_retention_and_expired_memories_stay_gone(
    stub: Stub, server: EngramServer, clock: ManualClock
) -> None:
    year = _ts(clock.now() + 365 * DAY)
    keep = await add(stub, "Standing meeting every Monday at nine.", valid_until=year)
    early = await add(stub, "Parcel arrives tomorrow.", valid_until=_ts(clock.now() + 2 * DAY))
    late = await add(stub, "The user is learning Portuguese.", valid_until=year)
    await stub.DeleteMemory(s.DeleteMemoryRequest(id=early.memory.id))
    clock.advance(3 * DAY)
    await stub.DeleteMemory(s.DeleteMemoryRequest(id=late.memory.id))
    # the expired one is out of the trash listing at once and swept; it cannot be restored
    assert await trash_ids(stub) == [late.memory.id]
    await fails(
        stub.RestoreMemory(s.RestoreMemoryRequest(id=early.memory.id)),
        grpc.StatusCode.NOT_FOUND,
        "ERROR_REASON_MEMORY_NOT_FOUND",
    )
    assert await server.service.sweep() == {"default": 1}
    assert await server.store.retrieve("default", [early.memory.id]) == []
    clock.advance(WEEK - 1)
    assert await server.service.sweep() == {}
    assert await trash_ids(stub) == [late.memory.id]
    clock.advance(2)
    assert await server.service.sweep() == {"default": 1}
    assert await trash_ids(stub) == []
    assert [
        p.record.id for p in await server.store.retrieve("default", [keep.memory.id, late.memory.id])
    ] == [keep.memory.id]


async def test_delete_collection_goes_to_the_trash_with_its_own_restore_and_purge(
    stub: Stub, server: EngramServer, clock: ManualClock
) -> None:
    a = await add(stub, "Secret plan for project Falcon.", collection="tenant-a")
    await add(stub, "Budget for project Falcon is 40k.", collection="tenant-a")
    await add(stub, "Something else entirely.", collection="tenant-b")
    gone = await stub.DeleteCollection(s.DeleteCollectionRequest(name="tenant-a"))
    assert gone.deleted_count == 2 and gone.purge_at.seconds == int(clock.now() + WEEK)
    cols = await stub.ListCollections(s.ListCollectionsRequest())
    assert [c.name for c in cols.collections] == ["default", "tenant-b"] or [
        c.name for c in cols.collections
    ] == ["tenant-b"]
    assert not cols.trashed
    cols = await stub.ListCollections(s.ListCollectionsRequest(include_trashed=True))
    assert [(t.name, t.memory_count) for t in cols.trashed] == [("tenant-a", 2)]
    assert cols.trashed[0].purge_at.seconds == int(clock.now() + WEEK)
    # nothing reads or writes it meanwhile; a search naming no collection skips it
    for call in (
        stub.AddMemory(s.AddMemoryRequest(collection="tenant-a", content="new")),
        stub.SearchMemories(s.SearchMemoriesRequest(query="Falcon", collections=["tenant-a"])),
        stub.GetMemory(s.GetMemoryRequest(collection="tenant-a", id=a.memory.id)),
        stub.ListMemories(s.ListMemoriesRequest(collection="tenant-a")),
    ):
        err = await fails(call, grpc.StatusCode.FAILED_PRECONDITION, "ERROR_REASON_COLLECTION_IN_TRASH")
        assert err.metadata["collection"] == "tenant-a"
    everywhere = await stub.SearchMemories(s.SearchMemoriesRequest(query="project Falcon"))
    assert {r.memory.collection for r in everywhere.results} <= {"tenant-b"}

    back = await stub.RestoreCollection(s.RestoreCollectionRequest(name="tenant-a"))
    assert back.collection.name == "tenant-a" and back.collection.memory_count == 2
    assert a.memory.id in await search_ids(stub, "project Falcon", "tenant-a")
    await fails(
        stub.RestoreCollection(s.RestoreCollectionRequest(name="tenant-a")),
        grpc.StatusCode.NOT_FOUND,
        "ERROR_REASON_COLLECTION_NOT_FOUND",
    )
    # purge: only a collection that is in the trash
    await fails(
        stub.PurgeTrash(s.PurgeTrashRequest(collection="tenant-a", purge_collection=True)),
        grpc.StatusCode.NOT_FOUND,
        "ERROR_REASON_COLLECTION_NOT_FOUND",
    )
    await stub.DeleteCollection(s.DeleteCollectionRequest(name="tenant-a"))
    purged = await stub.PurgeTrash(s.PurgeTrashRequest(collection="tenant-a", purge_collection=True))
    assert purged.purged_count == 2
    assert await server.store.get_collection("tenant-a") is None
    # the sweeper drops a trashed collection once the retention passed
    await stub.DeleteCollection(s.DeleteCollectionRequest(name="tenant-b"))
    clock.advance(WEEK + 1)
    assert await server.service.sweep() == {"tenant-b": 1}
    assert await server.store.get_collection("tenant-b") is None
    # and the name is free again
    fresh = await add(stub, "A fresh start.", collection="tenant-b")
    assert fresh.outcome == s.ADD_OUTCOME_CREATED


async def test_with_retention_zero_deletes_are_final(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path / "data", trash_retention_seconds=0.0) as srv,
        grpc.aio.insecure_channel(srv.address) as channel,
    ):
        stub = memory_service_pb2_grpc.MemoryServiceStub(channel)
        a = await add(stub, "Temporary note.")
        done = await stub.DeleteMemory(s.DeleteMemoryRequest(id=a.memory.id))
        assert not done.HasField("purge_at")
        assert await srv.store.retrieve("default", [a.memory.id]) == []
        await add(stub, "Another note.", collection="scratch")
        gone = await stub.DeleteCollection(s.DeleteCollectionRequest(name="scratch"))
        assert not gone.HasField("purge_at")
        assert await srv.store.get_collection("scratch") is None


def _ts(seconds: float) -> object:
    from google.protobuf import timestamp_pb2  # noqa: PLC0415

    return timestamp_pb2.Timestamp(seconds=int(seconds))


async def slots_of(stub: Stub, collection: str) -> dict[str, str]:
    listed = await stub.ListSlots(s.ListSlotsRequest(collection=collection))
    return {x.name: x.content for x in listed.slots}


async def test_slots_and_topics_go_with_their_collection(
    stub: Stub, server: EngramServer, clock: ManualClock
) -> None:
    """A trashed collection keeps its slots and topic ids (RestoreCollection brings them back); a
    collection dropped for good (purged, swept) takes them along, so a new collection of the same
    name starts without them."""
    for text in ("Deploy with Argo CD.", "Pods run in eu-west-1.", "The cluster has three node pools."):
        await add(stub, text, collection="tenant-a")
    await stub.UpdateSlot(s.UpdateSlotRequest(collection="tenant-a", name="persona", content="Terse."))
    await stub.UpdateSlot(s.UpdateSlotRequest(collection="tenant-b", name="guidance", content="Ask first."))
    topics = await stub.ListTopics(s.ListTopicsRequest(collection="tenant-a"))
    assert topics.topics and all(t.collection == "tenant-a" for t in topics.topics)
    ids = {t.id for t in topics.topics}

    await stub.DeleteCollection(s.DeleteCollectionRequest(name="tenant-a"))
    for call in (
        stub.ListSlots(s.ListSlotsRequest(collection="tenant-a")),
        stub.UpdateSlot(s.UpdateSlotRequest(collection="tenant-a", name="persona", content="x")),
        stub.ListTopics(s.ListTopicsRequest(collection="tenant-a")),
    ):
        await fails(call, grpc.StatusCode.FAILED_PRECONDITION, "ERROR_REASON_COLLECTION_IN_TRASH")
    await stub.RestoreCollection(s.RestoreCollectionRequest(name="tenant-a"))
    assert (await slots_of(stub, "tenant-a"))["persona"] == "Terse."
    again = await stub.ListTopics(s.ListTopicsRequest(collection="tenant-a"))
    assert {t.id for t in again.topics} == ids

    # purged: the slots and the topic state go; the other collection keeps its own
    await stub.DeleteCollection(s.DeleteCollectionRequest(name="tenant-a"))
    await stub.PurgeTrash(s.PurgeTrashRequest(collection="tenant-a", purge_collection=True))
    await add(stub, "A fresh start for tenant A.", collection="tenant-a")
    assert set((await slots_of(stub, "tenant-a")).values()) == {""}
    fresh = await stub.ListTopics(s.ListTopicsRequest(collection="tenant-a"))
    assert fresh.memory_count == 1 and not {t.id for t in fresh.topics} & ids
    assert (await slots_of(stub, "tenant-b"))["guidance"] == "Ask first."
    pack = await stub.GetContext(s.GetContextRequest(collections=["tenant-a"]))
    assert "Terse." not in pack.markdown

    # swept after the retention: the same
    await stub.UpdateSlot(s.UpdateSlotRequest(collection="tenant-b", name="persona", content="Kind."))
    await stub.DeleteCollection(s.DeleteCollectionRequest(name="tenant-b"))
    clock.advance(WEEK + 1)
    await server.service.sweep()
    await add(stub, "Tenant B again.", collection="tenant-b")
    assert set((await slots_of(stub, "tenant-b")).values()) == {""}


async def test_slots_go_with_a_collection_deleted_without_trash(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path / "data", trash_retention_seconds=0.0) as srv,
        grpc.aio.insecure_channel(srv.address) as channel,
    ):
        stub = memory_service_pb2_grpc.MemoryServiceStub(channel)
        await add(stub, "Scratch note.", collection="scratch")
        await stub.UpdateSlot(s.UpdateSlotRequest(collection="scratch", name="persona", content="Brief."))
        await stub.DeleteCollection(s.DeleteCollectionRequest(name="scratch"))
        await add(stub, "Scratch again.", collection="scratch")
        assert set((await slots_of(stub, "scratch")).values()) == {""}
