"""The embedded store's access ledger (``engram_server.adapters.storage.access``): access counters
kept in a log beside the engine, so that counting search hits never rewrites a point."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pytest

from engram_server.adapters.storage import access
from engram_server.adapters.storage.access import ACCESS_LOG, AccessLedger
from engram_server.adapters.storage.edge import EdgeStore
from engram_server.domain.model import CollectionSpec, MemoryRecord, StoredPoint, StoreFilter

DIM = 16


def _key() -> int:
    return uuid.uuid4().int


def test_entries_replay_from_the_log(tmp_path: Path) -> None:
    path = tmp_path / ACCESS_LOG
    a, b, c = _key(), _key(), _key()
    ledger = AccessLedger(path)
    ledger.set({a: (1, 10.0), b: (2, 20.0)})
    ledger.set({a: (3, 30.0)})
    ledger.forget([b, c])  # c has no entry: nothing written for it
    ledger.close()
    assert path.stat().st_size == 4 * 32  # three sets and one tombstone
    again = AccessLedger(path)
    assert (again.get(a), again.get(b), again.get(c), len(again)) == ((3, 30.0), None, None, 1)
    payload = {"access_count": 0, "last_accessed_at": None, "content": "x"}
    assert again.overlay(a, dict(payload)) == {**payload, "access_count": 3, "last_accessed_at": 30.0}
    assert again.overlay(b, dict(payload)) == payload
    again.close()


def test_a_torn_last_record_is_dropped_and_later_appends_stay_aligned(tmp_path: Path) -> None:
    path = tmp_path / ACCESS_LOG
    a, b = _key(), _key()
    ledger = AccessLedger(path)
    ledger.set({a: (5, 50.0)})
    ledger.close()
    with open(path, "ab") as f:
        f.write(b"\x01" * 20)  # a crash in the middle of an append
    torn = AccessLedger(path)
    assert torn.get(a) == (5, 50.0) and torn.records == 1
    assert path.stat().st_size == 32
    torn.set({b: (1, 1.0)})
    torn.close()
    after = AccessLedger(path)
    assert (after.get(a), after.get(b)) == ((5, 50.0), (1, 1.0))
    after.close()


def test_the_log_is_rewritten_when_mostly_replaced_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(access, "_COMPACT_MIN", 40)
    path = tmp_path / ACCESS_LOG
    keys = [_key() for _ in range(5)]
    ledger = AccessLedger(path, sync=True)
    for n in range(1, 30):
        ledger.set({k: (n, float(n)) for k in keys})
    assert ledger.records < 40 + 5  # rewritten at least once
    ledger.close()
    again = AccessLedger(path)
    assert all(again.get(k) == (29, 29.0) for k in keys) and again.records == path.stat().st_size // 32
    assert not [p for p in tmp_path.iterdir() if p.name != ACCESS_LOG]  # no temporary file left
    again.close()


def test_a_failed_append_changes_nothing_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What readers see is what the log holds: a write that fails (a full disk) is not shown."""
    a = _key()
    ledger = AccessLedger(tmp_path / ACCESS_LOG)
    ledger.set({a: (1, 1.0)})

    class Full:
        def write(self, _: bytes) -> int:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(ledger, "_open", Full)
    with pytest.raises(OSError):
        ledger.set({a: (2, 2.0)})
    with pytest.raises(OSError):
        ledger.forget([a])
    assert ledger.get(a) == (1, 1.0)
    monkeypatch.undo()
    ledger.close()
    assert AccessLedger(tmp_path / ACCESS_LOG).get(a) == (1, 1.0)


def test_a_missing_last_access_round_trips(tmp_path: Path) -> None:
    k = _key()
    ledger = AccessLedger(tmp_path / ACCESS_LOG)
    ledger._counts[k] = (0, None)  # white box: an entry without a time
    ledger._write([(k, 0, None)])
    ledger.close()
    again = AccessLedger(tmp_path / ACCESS_LOG)
    assert again.get(k) == (0, None)
    again.close()


async def test_counting_hits_writes_nothing_to_the_engine(tmp_path: Path) -> None:
    """In the engine's payload each counter write would copy the point out of its indexed segment
    (copy-on-write: measured at 100k, 20,000 hits counted that way made storage-bound candidate
    queries ≈ 30 % slower); with the ledger the engine's segments are left exactly as they were."""
    rng = np.random.default_rng(31)
    store = EdgeStore(tmp_path, hnsw_threshold=100)
    await store.open()
    try:
        await store.create_collection(
            CollectionSpec(name="default", embedding_model="test/random", dimension=DIM, created_at=1.0)
        )
        vecs = rng.normal(size=(300, DIM)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        recs = [MemoryRecord(id=str(uuid.uuid4()), collection="default", content=f"m{i}") for i in range(300)]
        await store.upsert("default", [StoredPoint(r, v) for r, v in zip(recs, vecs, strict=True)])
    finally:
        await store.close()
    store = EdgeStore(tmp_path, hnsw_threshold=100)
    await store.open()  # builds the index
    try:
        shard = store._cols["default"].shard  # white box: the engine's segments and their versions

        def segments() -> dict[str, int]:
            return {seg: m["segment_version"] for seg, m in shard.snapshot_manifest().items()}

        before = segments()
        for _ in range(3):
            await store.add_access("default", {r.id: (1, 5.0) for r in recs})
        assert segments() == before
        assert {p.record.access_count for p in await store.retrieve("default", [r.id for r in recs])} == {3}
        assert await store.count("default", StoreFilter()) == 300
    finally:
        await store.close()


class _CountingShard:
    """The engine shard, with its ``retrieve`` calls counted (the ids each asked for)."""

    def __init__(self, shard: object) -> None:
        self._shard = shard
        self.retrieved: list[int] = []

    def retrieve(self, ids: list[object], *args: object) -> object:
        self.retrieved.append(len(ids))
        return self._shard.retrieve(ids, *args)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._shard, name)


async def test_counting_again_reads_no_counters_back_from_the_engine(tmp_path: Path) -> None:
    """A point counted before has its counters in the ledger and its kept ranking fields say it is
    current: counting it again reads nothing from the engine. A point the ledger does not know, or
    whose kept fields are gone or say it is not current (a history version, a draft, trashed), is
    read; the counts are those of reading every point."""
    rng = np.random.default_rng(7)
    store = EdgeStore(tmp_path)
    await store.open()
    try:
        await store.create_collection(
            CollectionSpec(name="default", embedding_model="test/random", dimension=DIM, created_at=1.0)
        )
        vecs = rng.normal(size=(8, DIM)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        recs = [MemoryRecord(id=str(uuid.uuid4()), collection="default", content=f"m{i}") for i in range(8)]
        await store.upsert("default", [StoredPoint(r, v) for r, v in zip(recs, vecs, strict=True)])
        col = store._cols["default"]  # white box: count the engine reads
        shard = _CountingShard(col.shard)
        col.shard = shard  # type: ignore[assignment]
        ids = [r.id for r in recs]

        got = await store.add_access("default", {mid: (1, 5.0) for mid in ids})
        assert shard.retrieved == [8]  # not counted before: read
        assert got == {mid: (1, 5.0) for mid in ids}
        shard.retrieved.clear()
        got = await store.add_access("default", {mid: (2, 4.0) for mid in ids})
        assert shard.retrieved == []  # all in the ledger, all current: nothing read
        assert got == {mid: (3, 5.0) for mid in ids}  # (the last access stays the latest)

        # Made a history version, a draft and trashed (their kept fields dropped);
        # one upserted anew (its ledger entry forgotten: the counters are the payload's again).
        await store.set_fields(
            "default",
            {ids[0]: {"superseded_by": ids[7]}, ids[1]: {"draft": True}, ids[2]: {"trashed_at": 9.0}},
        )
        assert all(uuid.UUID(mid).int not in col.ranks for mid in ids[:3])
        await store.upsert("default", [StoredPoint(recs[3], vecs[3])])
        shard.retrieved.clear()
        got = await store.add_access("default", {mid: (1, 6.0) for mid in ids})
        assert shard.retrieved == [4]  # the history version, the draft, the trashed, the new one
        assert ids[0] not in got  # a history version keeps its counters
        assert got[ids[1]] == got[ids[2]] == got[ids[4]] == (4, 6.0)
        assert got[ids[3]] == (1, 6.0)  # upserted with the record's own count (0)
        shard.retrieved.clear()
        stored = {p.record.id: p.record for p in await store.retrieve("default", ids)}
        assert {mid: (r.access_count, r.last_accessed_at) for mid, r in stored.items() if mid in got} == got
        assert stored[ids[0]].access_count == 3
    finally:
        await store.close()
