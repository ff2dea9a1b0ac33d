"""The limit on collections: its default derived from the system's limits, and the map guard that
refuses a new embedded collection near ``vm.max_map_count`` (see ``mapguard``)."""

from __future__ import annotations

import mmap
import time
from pathlib import Path

import pytest

from engram_server.adapters.storage.edge import EdgeStore
from engram_server.adapters.storage.mapguard import (
    MAP_HEADROOM,
    MAPS_PER_COLLECTION,
    MIN_COLLECTIONS,
    SERVER_STORE_MAX_COLLECTIONS,
    MapGuard,
    derived_max_collections,
    max_map_count,
    pids_limit,
    process_maps,
)
from engram_server.app import FD_RESERVE, max_collections
from engram_server.config import ConfigError, Settings, load_settings
from engram_server.domain.errors import CollectionLimit, Reason
from engram_server.domain.model import CollectionSpec

BIG = 1 << 20  # open files: not the binding bound


def test_the_default_follows_the_kernels_map_limit() -> None:
    # (65,530 − 4,096) / 256: the kernel's default vm.max_map_count.
    assert derived_max_collections(65_530, BIG) == 239
    assert derived_max_collections(262_144, BIG) == 1_008
    assert derived_max_collections(1_048_576, BIG) == 4_080
    # What the derived number costs stays below the limit with the reserve left over.
    n = derived_max_collections(65_530, BIG)
    assert n * MAPS_PER_COLLECTION + 4_096 <= 65_530


def test_the_default_follows_the_open_files_limit_when_it_is_lower() -> None:
    # 4,096 descriptors, 1,256 kept for connections and the server's own: (4,096 − 1,256) / 2 =
    # 1,420, above the maps' 239; 1,700 descriptors: (1,700 − 1,256) / 2 = 222, below it.
    assert derived_max_collections(65_530, 4_096, 1_000 + 256) == 239
    assert derived_max_collections(65_530, 1_700, 1_256) == 222
    assert derived_max_collections(None, 1_700, 1_256) == 222


def test_the_default_follows_a_containers_task_limit() -> None:
    # 8 engine threads per collection: pids.max 1,024 leaves (1,024 − 512) / 8 = 64 collections.
    assert derived_max_collections(65_530, BIG, 0, 1_024) == 64
    assert derived_max_collections(65_530, BIG, 0, 100_000) == 239
    assert pids_limit(Path("/nonexistent/pids.max")) is None


def test_the_default_has_a_floor_and_a_fallback() -> None:
    assert derived_max_collections(5_000, BIG) == MIN_COLLECTIONS
    assert derived_max_collections(65_530, 1_024, 1_256) == MIN_COLLECTIONS
    assert derived_max_collections(None, None) == SERVER_STORE_MAX_COLLECTIONS


def test_the_setting_the_server_store_and_the_embedded_default() -> None:
    assert max_collections(Settings(max_collections=7)) == 7
    assert max_collections(Settings(qdrant_url="http://qdrant:6333")) == SERVER_STORE_MAX_COLLECTIONS
    assert max_collections(Settings(qdrant_url="http://qdrant:6333", max_collections=50)) == 50
    here = Settings()
    expected = derived_max_collections(
        max_map_count(), _hard_nofile(), here.max_connections + FD_RESERVE, pids_limit()
    )
    assert max_collections(here) == expected
    assert load_settings({"ENGRAM_MAX_COLLECTIONS": "12"}).max_collections == 12
    with pytest.raises(ConfigError, match="ENGRAM_MAX_COLLECTIONS"):
        load_settings({"ENGRAM_MAX_COLLECTIONS": "-1"})


def _hard_nofile() -> int | None:
    import resource  # noqa: PLC0415

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return None if hard == resource.RLIM_INFINITY else hard


def test_process_maps_counts_this_process_maps() -> None:
    before = process_maps()
    assert before is not None and before > 10
    with mmap.mmap(-1, 1 << 20) as _:  # one more anonymous map
        during = process_maps()
    assert during is not None and during >= before + 1
    assert max_map_count() == int(Path("/proc/sys/vm/max_map_count").read_text())


def test_the_guard_refuses_exactly_when_the_headroom_would_be_lost() -> None:
    limit = 65_530
    used = limit - MAP_HEADROOM - MAPS_PER_COLLECTION
    guard = MapGuard(maps_in_use=lambda: used, map_limit=lambda: limit)
    guard.check("fits")  # exactly enough
    over = MapGuard(maps_in_use=lambda: used + 1, map_limit=lambda: limit)
    assert not over.room()
    with pytest.raises(CollectionLimit) as caught:
        over.check("flood")
    assert caught.value.reason is Reason.COLLECTION_LIMIT
    assert caught.value.metadata["maps"] == str(used + 1)
    assert caught.value.metadata["max_map_count"] == str(limit)
    assert "vm.max_map_count" in caught.value.message
    # Unknown readings (not Linux): no refusal.
    MapGuard(maps_in_use=lambda: None, map_limit=lambda: limit).check("x")
    MapGuard(maps_in_use=lambda: used + 1, map_limit=lambda: None).check("x")


async def test_the_embedded_store_asks_the_guard_before_it_creates(tmp_path: Path) -> None:
    used = [1_000]
    store = EdgeStore(tmp_path, map_guard=MapGuard(maps_in_use=lambda: used[0], map_limit=lambda: 65_530))
    await store.open()
    try:
        spec = CollectionSpec(name="a", embedding_model="m", dimension=8, created_at=time.time())
        await store.create_collection(spec)
        used[0] = 65_000
        with pytest.raises(CollectionLimit):
            await store.create_collection(
                CollectionSpec(name="b", embedding_model="m", dimension=8, created_at=0)
            )
        assert [s.name for s in await store.list_collections()] == ["a"]
        assert not (tmp_path / "collections" / "b").exists()
        await store.create_collection(spec)  # an existing collection: nothing to create, no refusal
    finally:
        await store.close()
