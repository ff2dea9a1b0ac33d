"""A hostile client creating and deleting collections, over a real gRPC channel with the real
embedded store.

Each open embedded collection maps its files (about 185 memory maps and one file descriptor a
new one), DeleteCollection moves a collection to the trash, which keeps its shard open, and
nothing bounded the number of collections: a client that created and deleted some 350 collections
drove the process to the kernel's limit of memory maps (``vm.max_map_count``), after which every
collection create or open, ``default`` of every other tenant included, failed with
STORAGE_UNAVAILABLE "Out of memory (os error 12)". Now live and trashed collections together stay
within ``ENGRAM_MAX_COLLECTIONS`` and the map limit (the map reading injected here): the trash
gives way (its longest-trashed collection is purged for good to make room), and a new collection
the live ones leave no room for is refused with RESOURCE_EXHAUSTED /
``ERROR_REASON_COLLECTION_LIMIT``; existing collections keep serving. A client that creates and
deletes collections in a loop runs forever. Names that never became collections leave nothing
behind in memory, and the session ledger keeps only the most recently used agents.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.adapters.storage.edge import EdgeStore
from engram_server.adapters.storage.mapguard import MAP_HEADROOM, MAPS_PER_COLLECTION, MapGuard
from engram_server.testing import rich, running_server

pytestmark = pytest.mark.timeout(600)

LIMIT = "ERROR_REASON_COLLECTION_LIMIT"


@contextlib.asynccontextmanager
async def serving(data: Path, **settings: Any) -> AsyncIterator[memory_service_pb2_grpc.MemoryServiceStub]:
    """A real server on ``data`` (with ``settings``) and a stub on a real channel to it."""
    async with running_server(data, **settings) as srv, grpc.aio.insecure_channel(srv.address) as ch:
        yield memory_service_pb2_grpc.MemoryServiceStub(ch)


async def refused(call: object) -> dict[str, str]:
    """Await a call that must be refused for the collection limit: its ErrorInfo metadata."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call  # type: ignore[misc]
    err = rich(caught.value)
    assert err.code == grpc.StatusCode.RESOURCE_EXHAUSTED, err
    assert err.reason == LIMIT, err
    return err.metadata | {"message": err.message}


async def names(stub: memory_service_pb2_grpc.MemoryServiceStub) -> set[str]:
    return {c.name for c in (await stub.ListCollections(s.ListCollectionsRequest())).collections}


async def still_serving(stub: memory_service_pb2_grpc.MemoryServiceStub, collection: str, text: str) -> None:
    """An add to an existing collection is stored and found again."""
    added = await stub.AddMemory(s.AddMemoryRequest(collection=collection, content=text))
    assert added.outcome == s.ADD_OUTCOME_CREATED
    found = await stub.SearchMemories(s.SearchMemoriesRequest(query=text, collections=[collection], limit=3))
    assert found.results and found.results[0].memory.id == added.memory.id


async def test_the_collection_limit_refuses_one_more_and_purging_frees_room(tmp_path: Path) -> None:
    async with serving(tmp_path / "data", max_collections=5) as stub:
        await stub.AddMemory(s.AddMemoryRequest(content="The default tenant likes green tea."))
        for i in range(1, 5):
            await stub.AddMemory(
                s.AddMemoryRequest(collection=f"tenant{i}", content=f"Tenant {i} lives in Oslo.")
            )
        assert len(await names(stub)) == 5

        # The sixth collection, by every path that creates one: refused, nothing made.
        meta = await refused(stub.AddMemory(s.AddMemoryRequest(collection="flood0", content="One more.")))
        assert (meta["limit"], meta["count"], meta["trashed"], meta["collection"]) == (
            "5",
            "5",
            "0",
            "flood0",
        )
        assert "DeleteCollection" in meta["message"] and "ENGRAM_MAX_COLLECTIONS" in meta["message"]
        await refused(
            stub.AddMemories(
                s.AddMemoriesRequest(collection="flood1", memories=[s.NewMemory(content="Batch of one.")])
            )
        )
        exported = b"".join(
            [
                chunk.data
                async for chunk in stub.ExportMemories(s.ExportMemoriesRequest(collections=["tenant1"]))
            ]
        )

        async def chunks() -> AsyncIterator[s.ImportMemoriesRequest]:
            yield s.ImportMemoriesRequest(data=exported, collection="flood2")

        await refused(stub.ImportMemories(chunks()))
        assert "flood0" not in await names(stub) and len(await names(stub)) == 5

        # Every existing collection, default included, keeps serving adds and searches.
        await still_serving(stub, "default", "The default tenant also drinks coffee at nine.")
        await still_serving(stub, "tenant3", "Tenant three plays the violin on Sundays.")

        # Restoring a trashed collection makes nothing new: allowed at the limit.
        await stub.DeleteCollection(s.DeleteCollectionRequest(name="tenant1"))
        await stub.RestoreCollection(s.RestoreCollectionRequest(name="tenant1"))
        await still_serving(stub, "tenant1", "Tenant one moved from Oslo to Bergen.")

        # Purging a trashed collection frees room for exactly one.
        await stub.DeleteCollection(s.DeleteCollectionRequest(name="tenant2"))
        await stub.PurgeTrash(s.PurgeTrashRequest(collection="tenant2", purge_collection=True))
        made = await stub.AddMemory(s.AddMemoryRequest(collection="flood0", content="Now there is room."))
        assert made.outcome == s.ADD_OUTCOME_CREATED
        await refused(stub.AddMemory(s.AddMemoryRequest(collection="flood3", content="And no more.")))
        assert "flood0" in await names(stub)


async def test_the_trash_gives_way_to_new_collections_oldest_first(tmp_path: Path) -> None:
    """A collection in the trash holds its shard, so it counts against the limit; it is a
    deletion's grace period, not a reservation: at the limit, the collection longest in the trash
    is purged for good to make room, and a create-and-delete loop runs forever."""
    async with serving(tmp_path / "data", max_collections=4) as stub:
        await stub.AddMemory(s.AddMemoryRequest(content="The default tenant likes green tea."))
        await stub.AddMemory(s.AddMemoryRequest(collection="keep", content="Kept: lives in Oslo."))
        for i in range(12):  # each loop: 2 live + up to 2 trashed, at the limit of 4
            name = f"session{i}"
            made = await stub.AddMemory(s.AddMemoryRequest(collection=name, content=f"Session {i} notes."))
            assert made.outcome == s.ADD_OUTCOME_CREATED
            await stub.DeleteCollection(s.DeleteCollectionRequest(name=name))
            trash = await stub.ListCollections(s.ListCollectionsRequest(include_trashed=True))
            trashed = sorted(c.name for c in trash.trashed)
            # The two most recently deleted stay restorable; older ones gave way, oldest first.
            assert trashed == sorted(f"session{k}" for k in range(max(0, i - 1), i + 1)), (i, trashed)
        # What is left in the trash restores as it was; live collections were never touched.
        await stub.RestoreCollection(s.RestoreCollectionRequest(name="session11"))
        found = await stub.SearchMemories(
            s.SearchMemoriesRequest(query="Session 11 notes.", collections=["session11"], limit=1)
        )
        assert found.results and found.results[0].memory.content == "Session 11 notes."
        await still_serving(stub, "keep", "Kept: moved to Bergen.")
        # Live collections alone at the limit: refused, and no live collection is touched.
        await stub.AddMemory(s.AddMemoryRequest(collection="third", content="A third live one."))
        meta = await refused(stub.AddMemory(s.AddMemoryRequest(collection="fifth", content="No room.")))
        assert (meta["count"], meta["trashed"]) == ("4", "0")  # (session10 gave way to "third")


class Maps:
    """The process's map count as the guard reads it (injected); the limit is the kernel's default."""

    limit = 65_530

    def __init__(self) -> None:
        self.used = 1_000

    def __call__(self) -> int:
        return self.used


async def test_the_map_guard_refuses_a_collection_near_the_map_limit(tmp_path: Path) -> None:
    maps = Maps()
    data = tmp_path / "data"
    store = EdgeStore(data, map_guard=MapGuard(maps_in_use=maps, map_limit=lambda: Maps.limit))
    # The limit on collections set far too high: the guard is what stops the flood.
    async with serving(data, store=store, max_collections=100_000) as stub:
        await stub.AddMemory(s.AddMemoryRequest(content="The default tenant likes green tea."))
        await stub.AddMemory(s.AddMemoryRequest(collection="tenant1", content="Tenant 1 lives in Oslo."))

        # One map too many for a new collection and the headroom.
        maps.used = Maps.limit - MAP_HEADROOM - MAPS_PER_COLLECTION + 1
        meta = await refused(stub.AddMemory(s.AddMemoryRequest(collection="flood0", content="One more.")))
        assert (meta["maps"], meta["max_map_count"], meta["collection"]) == (
            str(maps.used),
            str(Maps.limit),
            "flood0",
        )
        assert "vm.max_map_count" in meta["message"] and "DeleteCollection" in meta["message"]
        assert "flood0" not in await names(stub)
        assert not (data / "collections" / "flood0").exists()
        # Existing collections keep serving reads and writes (and deletes, restores).
        await still_serving(stub, "default", "The default tenant also drinks coffee at nine.")
        await still_serving(stub, "tenant1", "Tenant one plays the violin on Sundays.")
        await stub.DeleteCollection(s.DeleteCollectionRequest(name="tenant1"))
        await stub.RestoreCollection(s.RestoreCollectionRequest(name="tenant1"))
        await still_serving(stub, "tenant1", "Tenant one moved from Oslo to Bergen.")

        # Exactly enough room: created.
        maps.used -= 1
        made = await stub.AddMemory(s.AddMemoryRequest(collection="flood0", content="Now there is room."))
        assert made.outcome == s.ADD_OUTCOME_CREATED


async def test_names_that_never_became_collections_leave_nothing_behind(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path / "data", max_collections=2) as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        stub = memory_service_pb2_grpc.MemoryServiceStub(ch)
        await stub.AddMemory(s.AddMemoryRequest(content="The default tenant likes green tea."))
        await stub.AddMemory(s.AddMemoryRequest(collection="tenant1", content="Tenant 1 lives in Oslo."))
        codes: set[grpc.StatusCode] = set()
        for i in range(300):
            calls = [
                stub.SearchMemories(s.SearchMemoriesRequest(query="tea", collections=[f"ghost{i}"])),
                stub.SearchMemories(s.SearchMemoriesRequest(query="tea", collections=[f"bad name {i}!"])),
                stub.DeleteCollection(s.DeleteCollectionRequest(name=f"ghost{i}")),
                stub.RestoreCollection(s.RestoreCollectionRequest(name=f"ghost{i}")),
                stub.PurgeTrash(s.PurgeTrashRequest(collection=f"ghost{i}", purge_collection=True)),
                stub.ListTrash(s.ListTrashRequest(collection=f"ghost{i}")),
                stub.GetContext(s.GetContextRequest(collections=[f"ghost{i}"], query="tea")),
            ]
            if i % 15 == 0:  # (without the limit each would make a collection: a few suffice)
                calls.append(
                    stub.AddMemory(
                        s.AddMemoryRequest(collection=f"ghost{i}", content="Refused at the limit.")
                    )
                )
            for call in calls:
                try:
                    await call
                except grpc.aio.AioRpcError as exc:
                    codes.add(exc.code())
        assert codes <= {
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            grpc.StatusCode.NOT_FOUND,
            grpc.StatusCode.INVALID_ARGUMENT,
        }, codes
        svc = srv.service
        # Only names that are collections may stay (and locks only while held).
        assert len(svc._locks) <= 2, len(svc._locks)
        assert set(svc._specs) <= {"default", "tenant1"}
        assert set(svc.last_write_at) <= {"default", "tenant1"}
        # The service still works for the real tenants.
        await still_serving(stub, "tenant1", "Tenant one plays the violin on Sundays.")


async def test_a_million_agent_ids_do_not_grow_the_session_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GetContext reads each agent's session ledger and kept every one read in memory, even of
    # agents that never had a session; the ledger now keeps the most recently used (50 here).
    monkeypatch.setattr("engram_server.domain.sessions.MAX_CACHED_AGENTS", 50, raising=False)
    async with running_server(tmp_path / "data") as srv, grpc.aio.insecure_channel(srv.address) as ch:
        stub = memory_service_pb2_grpc.MemoryServiceStub(ch)
        await stub.AddMemory(s.AddMemoryRequest(content="The default tenant likes green tea."))
        await stub.GetContext(s.GetContextRequest(session_id="one", agent_id="bot"))
        for i in range(200):
            await stub.GetContext(s.GetContextRequest(agent_id=f"stranger{i}"))
        assert len(srv.service.sessions._cache) <= 50
        # The evicted agent's ledger is read again from the store: its last session is known.
        pack = await stub.GetContext(s.GetContextRequest(session_id="two", agent_id="bot"))
        assert pack.last_session_id == "one"
