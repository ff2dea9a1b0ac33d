"""What only the embedded store has: crash durability, background HNSW builds, the data-dir
lock and on-disk layout errors."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engram_server.adapters.storage import edge
from engram_server.adapters.storage.edge import EdgeStore
from engram_server.domain.errors import StorageUnavailable
from engram_server.domain.model import CollectionSpec, MemoryRecord, StoredPoint, StoreFilter, Vector

DIM = 16


def spec(name: str = "default") -> CollectionSpec:
    return CollectionSpec(name=name, embedding_model="test/random", dimension=DIM, created_at=1.0)


def unit_vectors(n: int, rng: np.random.Generator) -> Vector:
    v = rng.normal(size=(n, DIM)).astype(np.float32)
    out: Vector = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)
    return out


def record(**kw: object) -> MemoryRecord:
    return replace(MemoryRecord(id=str(uuid.uuid4()), collection="default", content="c"), **kw)  # type: ignore[arg-type]


_CHILD = textwrap.dedent(
    """
    import asyncio, sys, uuid
    from pathlib import Path
    import numpy as np
    from engram_server.adapters.storage.edge import EdgeStore
    from engram_server.domain.model import CollectionSpec, MemoryRecord, StoredPoint

    async def main() -> None:
        store = EdgeStore(Path(sys.argv[1]))
        await store.open()
        await store.create_collection(CollectionSpec("default", "test/random", 16, 1.0))
        rng = np.random.default_rng(0)
        while True:  # upsert forever; the parent kills us
            rid = str(uuid.uuid4())
            v = rng.normal(size=16).astype(np.float32)
            await store.upsert("default", [StoredPoint(MemoryRecord(rid, "default", "x"), v)])
            print(rid, flush=True)  # acknowledged: upsert returned

    asyncio.run(main())
    """
)


async def test_acknowledged_upserts_survive_kill_9(tmp_path: Path) -> None:
    data = tmp_path / "data"
    # A plain Popen (not asyncio's child watcher, which can lose the exit status to a race and
    # report 255): the kill must be seen as a kill.
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(data)], stdout=subprocess.PIPE)  # noqa: ASYNC220
    acked: list[str] = []
    try:
        assert child.stdout is not None
        while len(acked) < 200:
            line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 60)
            assert line, "child died before acknowledging 200 upserts"
            acked.append(line.decode().strip())
        child.send_signal(signal.SIGKILL)  # no close(), no flush, no atexit
    finally:
        if child.poll() is None:
            child.kill()
        await asyncio.to_thread(child.wait)
        if child.stdout is not None:
            child.stdout.close()
    assert child.returncode == -signal.SIGKILL

    store = EdgeStore(data)
    await store.open()  # also proves the lock of the killed process is gone
    try:
        found = await store.retrieve("default", acked)
        assert {p.record.id for p in found} == set(acked)
        assert await store.count("default", StoreFilter()) >= len(acked)
    finally:
        await store.close()


async def test_background_hnsw_build_keeps_reads_and_writes_working(tmp_path: Path) -> None:
    rng = np.random.default_rng(12)
    store = EdgeStore(tmp_path, hnsw_threshold=300, background_hnsw=True)
    await store.open()
    try:
        await store.create_collection(spec())
        vecs = unit_vectors(700, rng)
        recs = [record() for _ in range(700)]
        queries = unit_vectors(20, rng)

        async def top10(q: Vector) -> list[str]:
            return [h.record.id for h in await store.search("default", q, 10, StoreFilter())]

        await store.upsert(
            "default", [StoredPoint(r, v) for r, v in zip(recs[:250], vecs[:250], strict=True)]
        )
        before = [await top10(q) for q in queries]
        shard = store._cols["default"].shard  # white box: to observe the index being built
        assert shard.info().indexed_vectors_count == 0

        # crossing the threshold schedules optimize() in the background; keep reading/writing
        await store.upsert(
            "default", [StoredPoint(r, v) for r, v in zip(recs[250:400], vecs[250:400], strict=True)]
        )
        assert store._cols["default"].optimizing is not None
        for i in range(400, 700, 50):
            await store.upsert(
                "default",
                [StoredPoint(r, v) for r, v in zip(recs[i : i + 50], vecs[i : i + 50], strict=True)],
            )
            assert len(await top10(queries[0])) == 10
        await store.wait_optimized()
        assert shard.info().indexed_vectors_count >= 300
        assert await store.count("default", StoreFilter()) == 700

        # the same answers as exact search, over all 700 points
        for q in queries:
            exact = [recs[i].id for i in np.argsort(-(vecs @ q))[:10]]
            assert await top10(q) == exact
        # and for the first 250 points only, the same as before the index existed
        first = {r.id for r in recs[:250]}
        for q, b in zip(queries, before, strict=True):
            hits = [h for h in await store.search("default", q, 700, StoreFilter()) if h.record.id in first]
            assert [h.record.id for h in hits[:10]] == b
    finally:
        await store.close()


async def test_second_opener_gets_a_clear_error(tmp_path: Path) -> None:
    first = EdgeStore(tmp_path)
    await first.open()
    try:
        await first.create_collection(spec())
        second = EdgeStore(tmp_path)
        with pytest.raises(StorageUnavailable, match="in use by another process"):
            await second.open()
        await second.close()  # closing a store that failed to open is harmless
    finally:
        await first.close()
    again = EdgeStore(tmp_path)
    await again.open()
    assert [s.name for s in await again.list_collections()] == ["default"]
    await again.close()


async def test_engine_wal_lock_is_reported_clearly(tmp_path: Path) -> None:
    """Even without our own lock file (e.g. another tool holding the shard), the engine's WAL
    lock error becomes StorageUnavailable."""
    first = EdgeStore(tmp_path)
    await first.open()
    await first.create_collection(spec())
    try:
        (tmp_path / ".lock").unlink()  # sidestep our flock to reach the engine's WAL lock
        second = EdgeStore(tmp_path)
        with pytest.raises(StorageUnavailable, match="in use by another process"):
            await second.open()
        await second.close()
    finally:
        await first.close()


@pytest.mark.parametrize(
    "content",
    ["{not json", json.dumps({"format": 1, "name": "default"}), json.dumps({"format": 99}), "[]"],
)
async def test_corrupt_spec_is_a_clear_error(tmp_path: Path, content: str) -> None:
    store = EdgeStore(tmp_path)
    await store.open()
    await store.create_collection(spec())
    await store.close()
    (tmp_path / "collections" / "default" / "spec.json").write_text(content)
    broken = EdgeStore(tmp_path)
    # ({"format": 99} is read as written by a newer release: refused with its own clear message)
    with pytest.raises(StorageUnavailable, match=r"corrupt collection spec|newer Engram release"):
        await broken.open()
    # the failed open released everything: fixing the file makes the store usable again
    (tmp_path / "collections" / "default" / "spec.json").write_text(
        json.dumps(
            {"format": 1, "name": "default", "embedding_model": "m", "dimension": DIM, "created_at": 1.0}
        )
    )
    fixed = EdgeStore(tmp_path)
    await fixed.open()
    assert (await fixed.get_collection("default")) is not None
    await fixed.close()


async def test_layout_and_drop_removes_the_directory(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path)
    await store.open()
    try:
        await store.create_collection(spec("a"))
        col_dir = tmp_path / "collections" / "a"
        assert json.loads((col_dir / "spec.json").read_text())["dimension"] == DIM
        assert (col_dir / "shard" / "wal").is_dir()
        rng = np.random.default_rng(13)
        await store.upsert("a", [StoredPoint(record(), v) for v in unit_vectors(3, rng)])
        assert await store.drop_collection("a") == 3
        assert not col_dir.exists()
        assert [p.name for p in (tmp_path / "collections").iterdir()] == []
    finally:
        await store.close()


async def test_sync_writes_mode_round_trips(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path, sync_writes=True)
    await store.open()
    try:
        await store.create_collection(spec())
        r = record()
        await store.upsert("default", [StoredPoint(r, unit_vectors(1, np.random.default_rng(14))[0])])
        await store.set_fields("default", {r.id: {"access_count": 2}})
        [got] = await store.retrieve("default", [r.id])
        assert got.record.access_count == 2
    finally:
        await store.close()


async def test_background_builds_count_unindexed_points_only_when_due(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exact count of unindexed points (a filtered count over the collection) is made only
    when the writes since the last one could have reached the threshold; the bound it keeps is
    never below the truth, set_fields included (a moved point leaves its indexed segment)."""
    from engram_server.adapters.storage import edge  # noqa: PLC0415

    counted: list[int] = []
    exact = edge.indexes._dense_unindexed

    def counting(col: object) -> int:
        n = exact(col)  # type: ignore[arg-type]
        counted.append(n)
        return n

    monkeypatch.setattr(edge.indexes, "_dense_unindexed", counting)
    rng = np.random.default_rng(5)
    store = EdgeStore(tmp_path, hnsw_threshold=300, background_hnsw=True)
    await store.open()
    try:
        await store.create_collection(spec())
        col = store._cols["default"]  # white box
        recs = [record() for _ in range(1000)]
        vecs = unit_vectors(1000, rng)

        async def write(lo: int, hi: int) -> None:
            await store.upsert(
                "default", [StoredPoint(r, v) for r, v in zip(recs[lo:hi], vecs[lo:hi], strict=True)]
            )

        def sound() -> None:
            assert col.unindexed_bound is None or col.unindexed_bound >= exact(col)

        await write(0, 100)
        assert counted == [100]
        for lo in range(100, 280, 20):  # below the threshold: no more counting
            await write(lo, lo + 20)
            sound()
        await store.set_fields("default", {r.id: {"access_count": 3} for r in recs[:15]})
        sound()
        assert counted == [100]
        assert col.optimizing is None
        await write(280, 300)  # the bound reaches 300 + 15: count, then build
        assert counted[1:] == [300]
        assert col.optimizing is not None
        await store.wait_optimized()
        await write(300, 310)  # after a build: count again (and build again if still due)
        assert len(counted) == 3
        sound()
        await store.wait_optimized()
        await write(310, 311)
        await store.wait_optimized()
        assert exact(col) < 300
        indexed = [r.id for r in recs[:250]]
        await store.set_fields("default", {i: {"access_count": 9} for i in indexed})
        sound()
        await write(311, 330)
        sound()
    finally:
        await store.close()


async def test_hybrid_collection_gets_its_hnsw_index_at_open(tmp_path: Path) -> None:
    """Sparse vectors are always indexed and counted as such: the dense index must still be built."""
    from engram_server.adapters.lexical import LEXICAL_ENCODER_ID, Bm25Encoder  # noqa: PLC0415
    from engram_server.adapters.storage.edge import _dense_unindexed  # noqa: PLC0415

    rng = np.random.default_rng(21)
    enc = Bm25Encoder()
    n = 500
    vecs = unit_vectors(n, rng)
    recs = [record(content=f"memory number {i} about topic {i % 17}") for i in range(n)]
    store = EdgeStore(tmp_path, hnsw_threshold=200)
    await store.open()
    await store.create_collection(replace(spec(), lexical=LEXICAL_ENCODER_ID))
    await store.upsert(
        "default",
        [StoredPoint(r, v, enc.encode_document(r.content)) for r, v in zip(recs, vecs, strict=True)],
    )
    col = store._cols["default"]  # white box: observe the index
    assert col.shard.info().indexed_vectors_count >= n  # the sparse vectors alone
    assert _dense_unindexed(col) == n
    await store.close()

    reopened = EdgeStore(tmp_path, hnsw_threshold=200)
    await reopened.open()  # builds due indexes before serving
    try:
        col = reopened._cols["default"]
        assert _dense_unindexed(col) < 200
        assert col.shard.info().indexed_vectors_count >= 2 * n - 200
        q = vecs[7]
        found = await reopened.candidates("default", q, 10, StoreFilter(), sparse=enc.encode_query("topic 7"))
        assert recs[7].id in found.ids
    finally:
        await reopened.close()


async def test_ranking_fields_are_loaded_after_open_and_candidates_then_read_ids_only(tmp_path: Path) -> None:
    """After open the ranking fields of every point are read in the background, a page at a time;
    then a candidate query asks the engine for ids and scores only (white box: the payload read
    for missing fields is counted)."""
    rng = np.random.default_rng(22)
    n = 2500  # > two pages
    vecs = unit_vectors(n, rng)
    recs = [record(importance=1 + i % 10, created_at=float(i), valid_until=1e12) for i in range(n)]
    store = EdgeStore(tmp_path)
    await store.open()
    await store.create_collection(spec())
    await store.upsert("default", [StoredPoint(r, v) for r, v in zip(recs, vecs, strict=True)])
    await store.close()

    reopened = EdgeStore(tmp_path)
    await reopened.open()
    try:
        col = reopened._cols["default"]
        for _ in range(200):  # the pages queue behind each other on the io thread
            if col.warm:
                break
            await reopened.count("default", StoreFilter())  # one io-thread job: lets pages run
        assert col.warm and len(col.ranks) == n
        reads: list[int] = []
        real = col.shard

        class Counting:
            def __getattr__(self, name: str) -> object:
                return getattr(real, name)

            def retrieve(self, ids: list[object], *args: object) -> object:
                reads.append(len(ids))
                return real.retrieve(ids, *args)

        col.shard = Counting()  # type: ignore[assignment]
        found = await reopened.candidates("default", vecs[3], 50, StoreFilter())
        assert reads == [] and len(found) == 50 and found.ids[0] == recs[3].id
        by_id = {r.id: r for r in recs}
        for k, pid in enumerate(found.ids):
            assert (found.importance[k], found.created_at[k]) == (
                by_id[pid].importance,
                by_id[pid].created_at,
            )
        col.ranks.clear()  # a point whose fields are unknown is read from the engine, once
        await reopened.candidates("default", vecs[3], 50, StoreFilter())
        await reopened.candidates("default", vecs[3], 50, StoreFilter())
        assert reads == [50]
        col.shard = real
    finally:
        await reopened.close()


@pytest.mark.parametrize("segments", [0, 6])
async def test_segment_setting_bounds_what_each_index_build_merges(tmp_path: Path, segments: int) -> None:
    """ENGRAM_EDGE_SEGMENTS reaches the engine: with 6 the optimizer keeps several indexed
    segments instead of merging everything into one graph at every build (and never more than
    asked, plus the one being written); searches see every point either way."""
    rng = np.random.default_rng(23)
    store = EdgeStore(tmp_path, hnsw_threshold=200, background_hnsw=True, segments=segments)
    await store.open()
    try:
        recs, _ = await _write_in_batches(store, rng)
        info = store._cols["default"].shard.info()  # white box: the engine's segments
        if segments:
            assert 2 < info.segments_count <= segments + 1
        else:  # the engine's choice: merged to about one per core, plus the one being written
            assert info.segments_count <= (os.cpu_count() or 1) + 1
        assert await store.count("default", StoreFilter()) == len(recs)
        assert info.points_count == len(recs)
    finally:
        await store.close()


async def _write_in_batches(store: EdgeStore, rng: np.random.Generator) -> tuple[list[MemoryRecord], Vector]:
    """Create "default" and write 8 batches of 220 points, waiting for each index build."""
    await store.create_collection(spec())
    recs: list[MemoryRecord] = []
    vecs: list[Vector] = []
    for _ in range(8):
        batch = [record() for _ in range(220)]
        v = unit_vectors(len(batch), rng)
        await store.upsert("default", [StoredPoint(r, x) for r, x in zip(batch, v, strict=True)])
        await store.wait_optimized()
        recs += batch
        vecs.append(v)
    return recs, np.vstack(vecs)


async def _import_in_segments(path: Path, rng: np.random.Generator) -> tuple[list[MemoryRecord], Vector]:
    """A collection written the way a large import is (ENGRAM_EDGE_SEGMENTS=6, indexes built as it
    grows), left with several segments."""
    store = EdgeStore(path, hnsw_threshold=200, background_hnsw=True, segments=6)
    await store.open()
    try:
        return await _write_in_batches(store, rng)
    finally:
        await store.close()


async def test_compact_merges_an_import_s_segments_and_keeps_every_point(tmp_path: Path) -> None:
    """``compact`` (``engram compact``) merges a collection imported with many segments down to the
    store's setting, keeps every point findable, writes the access ledger's counters into the
    engine (emptying the ledger), and the merge persists."""
    rng = np.random.default_rng(31)
    recs, vecs = await _import_in_segments(tmp_path, rng)
    probes = [0, 500, 1000, len(recs) - 1]
    store = EdgeStore(tmp_path, hnsw_threshold=200, segments=2)
    await store.open()
    try:
        before = store._cols["default"].shard.info().segments_count  # white box: the engine's segments
        assert before > 3
        counted = {recs[k].id: (k + 1, 100.0 + k) for k in probes}
        await store.add_access("default", {i: (n, at) for i, (n, at) in counted.items()})

        async def counters() -> dict[str, tuple[int, float | None]]:
            got = await store.retrieve("default", list(counted))
            return {p.record.id: (p.record.access_count, p.record.last_accessed_at) for p in got}

        report = await store.compact("default")
        ledger = store._cols["default"].access
        assert report.access_folded == len(probes) and len(ledger) == 0 and ledger.records == 0
        assert await counters() == counted  # now from the engine's payload
        assert (report.collection, report.segments_before, report.points) == ("default", before, len(recs))
        assert report.segments_after <= 3 < before  # 2, plus at most the one being written
        assert report.segments_after == store._cols["default"].shard.info().segments_count
        assert report.optimizer_rounds >= 1 and report.indexed_vectors >= len(recs)
        assert await store.count("default", StoreFilter()) == len(recs)
        for k in probes:
            found = await store.candidates("default", vecs[k], 5, StoreFilter())
            assert found.ids[0] == recs[k].id
        again = await store.compact("default")  # nothing left to do
        assert again.optimizer_rounds == 0 and again.segments_after == report.segments_after
        assert again.access_folded == 0
    finally:
        await store.close()
    reopened = EdgeStore(tmp_path, hnsw_threshold=200, segments=2)
    await reopened.open()
    try:
        assert reopened._cols["default"].shard.info().segments_count == report.segments_after
        got = await reopened.retrieve("default", list(counted))
        assert {p.record.id: (p.record.access_count, p.record.last_accessed_at) for p in got} == counted
    finally:
        await reopened.close()


def test_engram_compact_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``engram compact`` reports each collection; refuses a data directory a server holds, an
    unknown collection, and a Qdrant server URL, with a message and a non-zero exit."""
    from engram_server import cli  # noqa: PLC0415

    rng = np.random.default_rng(32)
    recs, _ = asyncio.run(_import_in_segments(tmp_path, rng))
    monkeypatch.setenv("ENGRAM_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("ENGRAM_EDGE_SEGMENTS", "2")
    cli.main(["compact"])
    out = capsys.readouterr().out
    assert out.startswith("default: ") and f"{len(recs):,} points" in out and "-> " in out

    with pytest.raises(SystemExit) as unknown:
        cli.main(["compact", "--collection", "nope"])
    assert "'nope' does not exist" in str(unknown.value.code)

    async def held() -> None:
        server_store = EdgeStore(tmp_path)
        await server_store.open()
        try:
            with pytest.raises(SystemExit) as busy:
                await asyncio.to_thread(cli.main, ["compact"])
            assert "in use by another process" in str(busy.value.code)
        finally:
            await server_store.close()

    asyncio.run(held())

    monkeypatch.setenv("ENGRAM_QDRANT_URL", "http://127.0.0.1:1")
    with pytest.raises(SystemExit) as remote:
        cli.main(["compact"])
    assert "embedded store" in str(remote.value.code)

    empty = tmp_path / "empty"
    monkeypatch.delenv("ENGRAM_QDRANT_URL")
    monkeypatch.setenv("ENGRAM_DATA_DIR", str(empty))
    cli.main(["compact"])
    assert "no collections" in capsys.readouterr().out and not empty.exists()


async def test_neighbour_lookups_use_their_own_beam_width(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``neighbour_ef`` reaches the engine with search/search_batch (the write gate's lookups) and
    not with candidates (Search keeps the engine's default); with the default gate width (64) on an
    indexed collection near copies are found exactly and the neighbours nearly so."""
    from engram_server.adapters.lexical import Bm25Encoder  # noqa: PLC0415
    from engram_server.adapters.storage import edge  # noqa: PLC0415

    rng = np.random.default_rng(8)
    n, dim = 3000, 96
    raw = rng.normal(size=(n, dim)).astype(np.float32)
    vecs = (raw / np.linalg.norm(raw, axis=1, keepdims=True)).astype(np.float32)
    recs = [record() for _ in range(n)]
    seed = EdgeStore(tmp_path, hnsw_threshold=500)
    await seed.open()
    await seed.create_collection(replace(spec(), dimension=dim))
    for lo in range(0, n, 500):
        await seed.upsert(
            "default",
            [StoredPoint(r, v) for r, v in zip(recs[lo : lo + 500], vecs[lo : lo + 500], strict=True)],
        )
    await seed.close()
    picks = rng.choice(n, size=64, replace=False)
    noisy = vecs[picks] + rng.normal(scale=0.05 / np.sqrt(dim), size=(64, dim)).astype(np.float32)
    queries = (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)
    exact = [[recs[i].id for i in np.argsort(-(vecs @ q))[:8]] for q in queries]

    sent: list[int | None] = []  # the hnsw_ef of every query request the store builds
    real = edge.engine.qe.QueryRequest

    def spy(*args: object, **kwargs: object) -> object:
        params = kwargs.get("params")
        sent.append(None if params is None else params.hnsw_ef)  # type: ignore[attr-defined]
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(edge.engine.qe, "QueryRequest", spy)
    store = EdgeStore(tmp_path, hnsw_threshold=500, neighbour_ef=64)
    await store.open()  # builds the index before serving
    try:
        assert store._cols["default"].shard.info().indexed_vectors_count >= n - 500  # white box
        sent.clear()
        found = await store.search_batch("default", queries, 8, StoreFilter())
        assert sent == [64] * len(queries)
        top1 = np.mean([bool(f) and f[0].record.id == recs[i].id for f, i in zip(found, picks, strict=True)])
        at8 = np.mean([len({h.record.id for h in f} & set(e)) / 8 for f, e in zip(found, exact, strict=True)])
        assert top1 == 1.0
        assert at8 >= 0.95
        sent.clear()
        one = await store.search("default", queries[0], 8, StoreFilter())
        assert sent == [64]
        assert [h.record.id for h in one] == [h.record.id for h in found[0]]
        sent.clear()
        await store.candidates(
            "default", queries[0], 8, StoreFilter(), sparse=Bm25Encoder().encode_query("c")
        )
        assert sent and set(sent) == {None}
    finally:
        await store.close()
    default = EdgeStore(tmp_path, hnsw_threshold=500)  # 0: the engine's default
    await default.open()
    try:
        sent.clear()
        await default.search("default", queries[0], 8, StoreFilter())
        assert sent == [None]
    finally:
        await default.close()


async def test_changed_since_names_the_points_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``changed_since`` (what the record cache of search results trusts): the points written
    after a generation, by id (a deletion by filter names the points it deleted); None when a
    write's points are unknown (a deletion by filter of more points than are logged) or too old."""
    rng = np.random.default_rng(41)
    store = EdgeStore(tmp_path)
    await store.open()
    try:
        await store.create_collection(spec())
        a, b, c = (record(valid_until=1e12) for _ in range(3))
        await store.upsert(
            "default", [StoredPoint(r, v) for r, v in zip((a, b, c), unit_vectors(3, rng), strict=True)]
        )
        g0 = store.generation("default")
        assert g0 is not None and store.changed_since("default", g0) == frozenset()
        await store.upsert("default", [StoredPoint(replace(a, content="new"), unit_vectors(1, rng)[0])])
        await store.delete("default", [b.id])
        assert store.changed_since("default", g0) == {a.id, b.id}
        g1 = store.generation("default")
        await store.add_access("default", {c.id: (1, 5.0)})  # counters: no generation
        await store.set_fields("default", {c.id: {"importance": 9}})
        assert store.changed_since("default", g1) == {c.id}
        assert store.changed_since("default", g0) == {a.id, b.id, c.id}
        g_swept = store.generation("default")
        assert g_swept is not None
        assert await store.delete_where("default", StoreFilter(expired_at=2e12)) == 2  # a and c
        assert store.changed_since("default", g_swept) == {a.id, c.id}
        assert store.changed_since("default", g0) == {a.id, b.id, c.id}
        d = record(valid_until=1e12)
        await store.upsert("default", [StoredPoint(d, unit_vectors(1, rng)[0])])
        monkeypatch.setattr(edge.points, "_LOGGED_DELETE_MAX", 0)  # more than is logged: by filter, unknown
        assert await store.delete_where("default", StoreFilter(expired_at=2e12)) == 1
        assert store.changed_since("default", g0) is None
        assert await store.count("default", StoreFilter(include_history=True)) == 0
        g2 = store.generation("default")
        assert g2 is not None
        for _ in range(edge.engine._HISTORY + 1):
            await store.set_fields("default", {c.id: {"importance": 8}})
        assert store.changed_since("default", g2) is None  # older than what is remembered
        assert store.changed_since("other", g2) is None
    finally:
        await store.close()


async def test_growing_past_the_threshold_without_background_builds_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With index builds at start-up only (the default), an operator learns when a collection's
    unindexed points pass the threshold while serving (searches scan them until a restart)."""
    rng = np.random.default_rng(43)
    store = EdgeStore(tmp_path, hnsw_threshold=100)
    await store.open()
    try:
        await store.create_collection(spec())
        with caplog.at_level("WARNING", logger="engram_server.adapters.storage.edge"):
            for _ in range(4):
                batch = [record() for _ in range(40)]
                await store.upsert(
                    "default", [StoredPoint(r, v) for r, v in zip(batch, unit_vectors(40, rng), strict=True)]
                )
        warnings = [r.getMessage() for r in caplog.records if "without an HNSW index" in r.getMessage()]
        assert len(warnings) == 1 and "ENGRAM_HNSW_BACKGROUND=true" in warnings[0]
        assert "holds 120 points" in warnings[0]  # counted when the bound passed 100 (3rd batch)
    finally:
        await store.close()
