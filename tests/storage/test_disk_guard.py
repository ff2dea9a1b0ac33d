"""The embedded store's free-space guard, with the free-space reading injected (issue 27, item 1):
below the headroom every write is refused with StorageFull before it reaches the engine, reads
keep working, background writers pause, and a store opened below the headroom releases its
reserve file. The real full volume is in ``tests/chaos/test_disk_full.py``."""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from engram_server.adapters.storage.diskguard import (
    MIB,
    NEW_COLLECTION_BYTES,
    RESERVE_FILE,
    DiskGuard,
    filesystem_type,
)
from engram_server.adapters.storage.edge import EdgeStore
from engram_server.domain.errors import Reason, StorageFull
from engram_server.domain.model import CollectionSpec, MemoryRecord, StoredPoint, StoreFilter

HEADROOM = 100 * MIB


class Volume:
    """An injected free-space reading."""

    def __init__(self, free: int) -> None:
        self.free = free

    def __call__(self, path: Path) -> int:
        return self.free


def point(n: int) -> StoredPoint:
    rng = np.random.default_rng(n)
    v = rng.standard_normal(8).astype(np.float32)
    now = time.time()
    rec = MemoryRecord(
        id=str(uuid.uuid4()), collection="c", content=f"memory {n}", created_at=now, updated_at=now
    )
    return StoredPoint(rec, v / np.linalg.norm(v))


def spec(name: str = "c") -> CollectionSpec:
    return CollectionSpec(name, "test-model", 8, time.time())


def test_check_refuses_below_the_headroom_and_says_why(tmp_path: Path) -> None:
    volume = Volume(HEADROOM + 5 * MIB)
    guard = DiskGuard(tmp_path, HEADROOM, free_bytes=volume, reserve_bytes=0)
    guard.check()  # above: fine
    guard.check(4 * MIB)
    with pytest.raises(StorageFull) as caught:
        guard.check(6 * MIB, what="new collection")  # the write itself would cross the headroom
    assert caught.value.reason is Reason.STORAGE_FULL
    assert caught.value.metadata["needed_bytes"] == str(6 * MIB)
    volume.free = HEADROOM - 1
    with pytest.raises(StorageFull) as caught:
        guard.check()
    assert caught.value.metadata == {
        "free_bytes": str(HEADROOM - 1),
        "headroom_bytes": str(HEADROOM),
        "needed_bytes": "0",
    }
    assert "ENGRAM_DISK_HEADROOM_MB" in caught.value.message
    assert not guard.room()


def test_filesystem_type_of_a_path(tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "/dev/vda / ext4 rw 0 0\ntmpfs /srv/engram tmpfs rw 0 0\ntmpfs /srv/engram-old tmpfs rw 0 0\n"
        "/dev/vdb /srv/engram/disk xfs rw 0 0\n"
    )
    assert filesystem_type(Path("/srv/engram/data"), mounts) == "tmpfs"
    assert filesystem_type(Path("/srv/engram/disk/data"), mounts) == "xfs"
    assert filesystem_type(Path("/srv/engramx"), mounts) == "ext4"
    assert filesystem_type(Path("/srv/engram"), tmp_path / "missing") == ""


def test_zero_headroom_turns_the_check_off(tmp_path: Path) -> None:
    guard = DiskGuard(tmp_path, 0, free_bytes=Volume(0))
    guard.check(10**12)
    assert guard.room()
    assert not (tmp_path / RESERVE_FILE).exists()


def test_crossing_is_logged_once_then_the_recovery(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    volume = Volume(HEADROOM * 2)
    guard = DiskGuard(tmp_path, HEADROOM, free_bytes=volume, reserve_bytes=0)
    caplog.set_level(logging.INFO, logger="engram_server.adapters.storage.diskguard")
    guard.room()
    volume.free = HEADROOM // 2
    for _ in range(50):
        guard.room()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "STORAGE_FULL" in warnings[0].getMessage()
    volume.free = HEADROOM * 2
    guard.room()
    assert [r.levelno for r in caplog.records].count(logging.INFO) == 1


def test_reserve_is_made_with_room_and_released_when_low(tmp_path: Path) -> None:
    volume = Volume(HEADROOM * 2)
    guard = DiskGuard(tmp_path, HEADROOM, free_bytes=volume)
    assert guard.reserve_bytes == HEADROOM // 4
    assert not guard.release_reserve_if_low()
    guard.room()
    reserve = tmp_path / RESERVE_FILE
    assert reserve.stat().st_blocks * 512 >= guard.reserve_bytes  # allocated for real, not sparse
    volume.free = HEADROOM - 1
    assert guard.release_reserve_if_low()
    assert not reserve.exists()
    guard.room()  # still low: not made again
    assert not reserve.exists()
    volume.free = HEADROOM + guard.reserve_bytes - 1  # above the headroom, not room for the reserve too
    guard.room()
    assert not reserve.exists()
    volume.free = HEADROOM + guard.reserve_bytes
    guard.room()
    assert reserve.exists()


async def test_edge_store_refuses_writes_below_the_headroom_and_keeps_reading(tmp_path: Path) -> None:
    volume = Volume(HEADROOM * 4)
    store = EdgeStore(
        tmp_path / "data",
        disk_guard=DiskGuard(tmp_path / "data", HEADROOM, free_bytes=volume, reserve_bytes=0),
    )
    await store.open()
    try:
        await store.create_collection(spec())
        kept = [point(i) for i in range(5)]
        await store.upsert("c", kept)

        volume.free = HEADROOM - 1
        with pytest.raises(StorageFull):
            await store.upsert("c", [point(99)])
        with pytest.raises(StorageFull):
            await store.create_collection(spec("other"))
        with pytest.raises(StorageFull):
            await store.delete("c", [kept[0].record.id])
        with pytest.raises(StorageFull):
            await store.delete_where("c", StoreFilter())
        with pytest.raises(StorageFull):
            await store.set_fields("c", {kept[0].record.id: {"importance": 9}})
        with pytest.raises(StorageFull):
            await store.put_state("k", {"a": 1})
        # Access counters are skipped, not failed: a search still answers.
        assert await store.add_access("c", {kept[0].record.id: (1, time.time())}) == {}
        # Reads.
        assert await store.count("c", StoreFilter()) == 5
        records, _ = await store.scroll("c", StoreFilter(), 100)
        assert {r.id for r in records} == {p.record.id for p in kept}
        got = await store.retrieve("c", [kept[1].record.id])
        assert got[0].record.content == "memory 1"
        hits = await store.search("c", kept[2].vector, 3, StoreFilter())  # type: ignore[arg-type]
        assert hits[0].record.id == kept[2].record.id
        # Nothing refused reached the engine.
        assert await store.get_collection("other") is None
        assert {r.id for r in (await store.scroll("c", StoreFilter(), 100))[0]} == {p.record.id for p in kept}

        # On a tmpfs a new collection needs its up-front size besides the headroom.
        store.disk.memory_backed = True
        volume.free = HEADROOM + NEW_COLLECTION_BYTES - 1
        await store.upsert("c", [point(6)])  # an ordinary write fits
        with pytest.raises(StorageFull):
            await store.create_collection(spec("other"))
        volume.free = HEADROOM + NEW_COLLECTION_BYTES
        await store.create_collection(spec("other"))
        assert await store.count("c", StoreFilter()) == 6
    finally:
        await store.close()


async def test_index_build_waits_for_room_for_the_collection(tmp_path: Path) -> None:
    volume = Volume(HEADROOM * 4)
    guard = DiskGuard(tmp_path / "data", HEADROOM, free_bytes=volume, reserve_bytes=0)
    store = EdgeStore(tmp_path / "data", hnsw_threshold=20, background_hnsw=True, disk_guard=guard)
    await store.open()
    try:
        await store.create_collection(spec())
        volume.free = HEADROOM + 1  # above the headroom, but no room to rewrite the segments
        await store.upsert("c", [point(i) for i in range(40)])
        await store.wait_optimized()
        col = store._cols["c"]  # the optimizer's state
        assert col.optimizing is None  # put off: no build was started
        volume.free = HEADROOM * 100
        await store.upsert("c", [point(100)])
        assert col.optimizing is not None
        await store.wait_optimized()
        assert await store.count("c", StoreFilter()) == 41
    finally:
        await store.close()


async def test_store_opened_below_the_headroom_releases_the_reserve(tmp_path: Path) -> None:
    data = tmp_path / "data"
    volume = Volume(HEADROOM * 4)
    store = EdgeStore(data, disk_guard=DiskGuard(data, HEADROOM, free_bytes=volume))
    await store.open()
    await store.create_collection(spec())
    await store.upsert("c", [point(1)])
    await store.close()
    assert (data / RESERVE_FILE).exists()

    volume.free = 0
    store = EdgeStore(data, disk_guard=DiskGuard(data, HEADROOM, free_bytes=volume))
    await store.open()
    try:
        assert not (data / RESERVE_FILE).exists()
        assert await store.count("c", StoreFilter()) == 1
        with pytest.raises(StorageFull):
            await store.upsert("c", [point(2)])
    finally:
        await store.close()
