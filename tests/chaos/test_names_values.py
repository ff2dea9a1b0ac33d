"""Item 7 of the hardening issue: names and values that used to slip through are refused with
INVALID_ARGUMENT and a field violation; a store that already holds such a name keeps working.

Real server, real embedded store, real channel on loopback."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from google.protobuf import timestamp_pb2

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1.memory_service_pb2_grpc import MemoryServiceStub
from engram_server.domain.model import CollectionSpec
from engram_server.domain.validation import is_blank
from engram_server.testing import rich, running_server

INVISIBLE = [
    "\u200b",
    "\u200b\u200c\u200d\ufeff",
    " \u2060 \u00ad ",
    "\u3164\u3164",
    "\u202e\u200e",
    "\u2800",
]


async def _invalid(call: object, fieldname: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call  # type: ignore[misc]
    err = rich(caught.value)
    assert err.code is grpc.StatusCode.INVALID_ARGUMENT, err
    assert err.reason == "ERROR_REASON_INVALID_ARGUMENT"
    assert fieldname in err.violations, err.violations


async def test_names_and_values_that_slipped_through_are_refused(tmp_path: Path) -> None:
    async with running_server(tmp_path / "data") as server, grpc.aio.insecure_channel(server.address) as ch:
        stub = MemoryServiceStub(ch)
        for name in ("bob\n", "bob\r\n", "\nbob", "bob\x00"):
            await _invalid(stub.AddMemory(s.AddMemoryRequest(content="hi", collection=name)), "collection")
            await _invalid(stub.ListMemories(s.ListMemoriesRequest(collection=name)), "collection")
        for content in INVISIBLE:
            await _invalid(stub.AddMemory(s.AddMemoryRequest(content=content)), "content")
            await _invalid(stub.SearchMemories(s.SearchMemoriesRequest(query=content)), "query")
        for nanos in (-1, 2_000_000_000, 1_000_000_000):
            bad = timestamp_pb2.Timestamp(seconds=1_700_000_000, nanos=nanos)
            await _invalid(stub.AddMemory(s.AddMemoryRequest(content="hi", created_at=bad)), "created_at")
            await _invalid(stub.AddMemory(s.AddMemoryRequest(content="hi", valid_until=bad)), "valid_until")
            await _invalid(
                stub.AddMemories(s.AddMemoriesRequest(memories=[s.NewMemory(content="hi", created_at=bad)])),
                "memories[0].created_at",
            )
            await _invalid(
                stub.SearchMemories(
                    s.SearchMemoriesRequest(query="hi", filter=m.MemoryFilter(created_after=bad))
                ),
                "filter.created_after",
            )
        far = timestamp_pb2.Timestamp(seconds=10**15)
        await _invalid(stub.AddMemory(s.AddMemoryRequest(content="hi", valid_until=far)), "valid_until")
        # nothing was created along the way
        listed = await stub.ListCollections(s.ListCollectionsRequest())
        assert [c.name for c in listed.collections] == []
        # and visible text with format characters inside is still fine
        ok = await stub.AddMemory(s.AddMemoryRequest(content="zero\u200bwidth inside", collection="bob"))
        assert ok.memory.content == "zero\u200bwidth inside"


async def test_a_store_that_already_holds_such_a_name_lists_and_deletes_it(tmp_path: Path) -> None:
    async with running_server(tmp_path / "data") as server, grpc.aio.insecure_channel(server.address) as ch:
        stub = MemoryServiceStub(ch)
        await stub.AddMemory(s.AddMemoryRequest(content="the real bob", collection="bob"))
        # an older release accepted "bob\n": put one in the store the way it did
        spec = await server.store.get_collection("bob")
        assert spec is not None
        await server.store.create_collection(
            CollectionSpec("bob\n", spec.embedding_model, spec.dimension, spec.created_at, spec.lexical)
        )
        names = [c.name for c in (await stub.ListCollections(s.ListCollectionsRequest())).collections]
        assert sorted(names) == ["bob", "bob\n"]
        deleted = await stub.DeleteCollection(s.DeleteCollectionRequest(name="bob\n"))
        assert deleted.deleted_count == 0
        names = [c.name for c in (await stub.ListCollections(s.ListCollectionsRequest())).collections]
        assert names == ["bob"]
        # it went to the trash like any collection (the sweeper purges it after the retention)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.DeleteCollection(s.DeleteCollectionRequest(name="bob\n"))
        assert rich(err.value).reason == "ERROR_REASON_COLLECTION_IN_TRASH"
        page = await stub.ListMemories(s.ListMemoriesRequest(collection="bob"))
        assert [x.content for x in page.memories] == ["the real bob"]


async def test_what_a_store_holds_under_such_a_name_can_be_deleted_restored_and_purged(
    tmp_path: Path,
) -> None:
    """Memories and the collection itself, under a name an older release accepted: DeleteMemory,
    ListTrash, RestoreMemory, PurgeTrash (ids and purge_collection), RestoreCollection all work;
    writing to the name is still refused."""
    from dataclasses import replace  # noqa: PLC0415

    async with running_server(tmp_path / "data") as server, grpc.aio.insecure_channel(server.address) as ch:
        stub = MemoryServiceStub(ch)
        ids = []
        for text in ("Legacy note one about the boiler.", "Legacy note two about the garden."):
            ids.append((await stub.AddMemory(s.AddMemoryRequest(content=text, collection="bob"))).memory.id)
        spec = await server.store.get_collection("bob")
        assert spec is not None
        legacy = "bob\n"
        await server.store.create_collection(
            CollectionSpec(legacy, spec.embedding_model, spec.dimension, spec.created_at, spec.lexical)
        )
        points = await server.store.retrieve("bob", ids, with_vectors=True)
        await server.store.upsert(
            legacy, [replace(p, record=replace(p.record, collection=legacy)) for p in points]
        )
        one = ids[0]
        await stub.DeleteMemory(s.DeleteMemoryRequest(id=one, collection=legacy))
        trash = await stub.ListTrash(s.ListTrashRequest(collection=legacy))
        assert [x.id for x in trash.memories] == [one]
        await stub.RestoreMemory(s.RestoreMemoryRequest(id=one, collection=legacy))
        await stub.DeleteMemory(s.DeleteMemoryRequest(id=one, collection=legacy))
        purged = await stub.PurgeTrash(s.PurgeTrashRequest(collection=legacy, ids=[one]))
        assert purged.purged_count == 1
        assert not (await stub.ListTrash(s.ListTrashRequest(collection=legacy))).memories
        # the collection: to the trash, back, to the trash, purged
        await stub.DeleteCollection(s.DeleteCollectionRequest(name=legacy))
        restored = await stub.RestoreCollection(s.RestoreCollectionRequest(name=legacy))
        assert restored.collection.name == legacy and restored.collection.memory_count == 1
        await stub.DeleteCollection(s.DeleteCollectionRequest(name=legacy))
        gone = await stub.PurgeTrash(s.PurgeTrashRequest(collection=legacy, purge_collection=True))
        assert gone.purged_count == 1
        assert await server.store.get_collection(legacy) is None
        # a name the rules refuse and the store does not hold is still invalid, everywhere
        await _invalid(stub.AddMemory(s.AddMemoryRequest(content="new", collection=legacy)), "collection")
        await _invalid(stub.PurgeTrash(s.PurgeTrashRequest(collection=legacy)), "collection")
        await _invalid(
            stub.PurgeTrash(s.PurgeTrashRequest(collection="eve\n", purge_collection=True)), "collection"
        )
        await _invalid(stub.RestoreCollection(s.RestoreCollectionRequest(name="eve\n")), "name")
        kept = await stub.ListMemories(s.ListMemoriesRequest(collection="bob"))
        assert sorted(x.id for x in kept.memories) == sorted(ids)  # the valid "bob" is untouched


def test_blank_means_nothing_visible() -> None:
    for text in ["", " ", "\t\n", *INVISIBLE]:
        assert is_blank(text), repr(text)
    for text in ["a", "\u200ba", "记", "🙂", "·"]:
        assert not is_blank(text), repr(text)
