"""What only a real Qdrant server shows: int8 quantization with oversampling and rescoring, and the
write lease that keeps the gate exclusive across Engram replicas (conditional upserts).

Runs on the session's real server node (``qdrant_server`` in tests/conftest.py); skips without one.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator

import numpy as np
import pytest
from qdrant_client import AsyncQdrantClient, models

from engram_server.adapters.storage.payload import PAYLOAD_INDEXES, record_to_payload, spec_to_json
from engram_server.adapters.storage.qdrant import (
    ACORN_MAX_SELECTIVITY,
    HNSW_LINKED_INDEXES,
    QdrantStore,
)
from engram_server.domain.errors import StorageUnavailable
from engram_server.domain.model import CollectionSpec, MemoryRecord, StoredPoint, StoreFilter
from tests.support.qdrant import QdrantNode

DIM = 32
NOW = 1_800_000_000.0


def _spec(name: str = "default") -> CollectionSpec:
    return CollectionSpec(name=name, embedding_model="test/random", dimension=DIM, created_at=1.0)


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _store(node: QdrantNode, prefix: str, **kw: object) -> QdrantStore:
    return QdrantStore(node.url, grpc_port=node.grpc_port, prefix=prefix, **kw)  # type: ignore[arg-type]


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}_"


@pytest.fixture
async def client(qdrant_server: QdrantNode) -> AsyncIterator[AsyncQdrantClient]:
    c = AsyncQdrantClient(url=qdrant_server.url, check_compatibility=False)
    yield c
    await c.close()


async def _indexed(client: AsyncQdrantClient, qname: str, n: int) -> None:
    """Make the engine build its HNSW index (and the int8 codes) for every point, and wait."""
    await client.update_collection(qname, optimizers_config=models.OptimizersConfigDiff(indexing_threshold=1))
    for _ in range(600):
        info = await client.get_collection(qname)
        if info.status == models.CollectionStatus.GREEN and (info.indexed_vectors_count or 0) >= n:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"index not built: {info}")


async def test_int8_collections_search_the_codes_and_return_exact_rescored_cosines(
    qdrant_server: QdrantNode, client: AsyncQdrantClient, prefix: str
) -> None:
    rng = np.random.default_rng(7)
    n = 3000
    vecs = _unit(rng, n)
    store = _store(qdrant_server, prefix, quantization="int8", on_disk=True)
    await store.open()
    try:
        await store.create_collection(_spec())
        records = [
            MemoryRecord(str(uuid.uuid4()), "default", f"m{i}", valid_until=NOW + 1e6) for i in range(n)
        ]
        for start in range(0, n, 500):
            await store.upsert(
                "default",
                [StoredPoint(r, v) for r, v in zip(records[start : start + 500], vecs[start:], strict=False)],
            )
        qname = prefix + "default"
        info = await client.get_collection(qname)
        quant = info.config.quantization_config
        assert isinstance(quant, models.ScalarQuantization)
        assert (quant.scalar.type, quant.scalar.always_ram) == (models.ScalarType.INT8, True)
        params = info.config.params.vectors
        assert isinstance(params, models.VectorParams) and params.on_disk is True
        await _indexed(client, qname, n)

        ids = [r.id for r in records]
        queries = _unit(rng, 20)
        exact_scores = queries @ vecs.T
        recall: list[float] = []
        differs = 0
        for q, exact in zip(queries, exact_scores, strict=True):
            want = 10
            truth = {ids[i] for i in np.argsort(-exact)[:want]}
            got = await store.candidates("default", q, want, StoreFilter())
            # rescored: every score is the exact cosine of the original vectors
            expected = {ids[i]: float(exact[i]) for i in range(n)}
            assert np.allclose(got.cosine, [expected[i] for i in got.ids], atol=1e-5)
            recall.append(len(truth & set(got.ids)) / want)
            hits = await store.search("default", q, want, StoreFilter())
            assert np.allclose([h.score for h in hits], [expected[h.record.id] for h in hits], atol=1e-5)
            # the same query on the int8 codes without rescoring returns other (approximate) scores:
            # the quantized index is what the search ran on
            raw = await client.query_points(
                qname,
                query=q.tolist(),
                limit=want,
                search_params=models.SearchParams(
                    quantization=models.QuantizationSearchParams(rescore=False)
                ),
            )
            differs += any(abs(p.score - expected[str(p.id)]) > 1e-4 for p in raw.points)
        assert differs == len(queries)
        assert float(np.mean(recall)) >= 0.95, recall
    finally:
        await store.close()


async def test_without_quantization_searches_send_only_acorn(
    qdrant_server: QdrantNode, client: AsyncQdrantClient, prefix: str
) -> None:
    store = _store(qdrant_server, prefix)
    await store.open()
    try:
        await store.create_collection(_spec())
        info = await client.get_collection(prefix + "default")
        assert info.config.quantization_config is None
        for params in (store._search_params, store._neighbour_params):
            assert params is not None and params.quantization is None and params.hnsw_ef is None
            assert params.acorn == models.AcornSearchParams(
                enable=True, max_selectivity=ACORN_MAX_SELECTIVITY
            )
    finally:
        await store.close()


# ------------------------------------------------------------------ the write lease


async def test_the_write_lease_is_exclusive_across_stores(qdrant_server: QdrantNode, prefix: str) -> None:
    """Two stores (two replicas' worth of clients) and many concurrent holders: never two inside."""
    stores = [_store(qdrant_server, prefix) for _ in range(2)]
    for s in stores:
        await s.open()
    inside: list[int] = []
    overlaps = 0
    entered = 0

    async def hold(i: int, s: QdrantStore) -> None:
        nonlocal overlaps, entered
        async with s.write_lease("default"):
            entered += 1
            overlaps += bool(inside)
            inside.append(i)
            await asyncio.sleep(0.005)
            inside.remove(i)

    try:
        await asyncio.gather(*(hold(i, stores[i % 2]) for i in range(24)))
    finally:
        for s in stores:
            await s.close()
    assert (entered, overlaps) == (24, 0)


async def test_a_dead_holders_lease_expires_and_its_late_release_frees_nothing(
    qdrant_server: QdrantNode, prefix: str
) -> None:
    a = _store(qdrant_server, prefix, lease_seconds=0.5)
    b = _store(qdrant_server, prefix, lease_seconds=30)
    await a.open()
    await b.open()
    try:
        holder, token = await a._acquire("default")  # a "dies" holding it
        took = time.monotonic()
        async with b.write_lease("default"):
            assert time.monotonic() - took >= 0.3  # waited for the expiry (not the 30 s of b)
            lease = await b._read_lease("default")
            assert lease is not None and lease["token"] == token + 1
            await a._release("default", holder, token)  # a comes back: its release is fenced off
            after = await b._read_lease("default")
            assert after is not None and after["holder"] == lease["holder"]
        freed = await b._read_lease("default")
        assert freed is not None and freed["holder"] == "" and freed["token"] == token + 1
    finally:
        await a.close()
        await b.close()


async def test_a_lease_held_too_long_is_storage_unavailable(qdrant_server: QdrantNode, prefix: str) -> None:
    a = _store(qdrant_server, prefix, lease_seconds=60)
    b = _store(qdrant_server, prefix, lease_seconds=0.2, timeout=0.3)
    await a.open()
    await b.open()
    try:
        async with a.write_lease("default"):
            with pytest.raises(StorageUnavailable, match="write lease"):
                async with b.write_lease("default"):
                    pass
    finally:
        await a.close()
        await b.close()


async def test_local_mode_and_the_setting_turn_the_lease_off(qdrant_server: QdrantNode, prefix: str) -> None:
    off = _store(qdrant_server, prefix, write_lease=False)
    await off.open()
    try:
        async with off.write_lease("default"):
            pass
        assert await off._state_exists() is False  # nothing was written to Qdrant
    finally:
        await off.close()
    local = QdrantStore(":memory:")
    await local.open()
    async with local.write_lease("default"):
        assert await local._state_exists() is False
    await local.close()


# ------------------------------------------------------------------ payload indexes and ACORN


async def test_only_the_listed_payload_indexes_are_linked(
    qdrant_server: QdrantNode, client: AsyncQdrantClient, prefix: str
) -> None:
    """Every payload index exists; the engine builds extra HNSW links only for HNSW_LINKED_INDEXES
    (the cost that made indexing 100k memories take ~35 min when all of them were linked)."""
    store = _store(qdrant_server, prefix)
    await store.open()
    try:
        await store.create_collection(_spec())
        info = await client.get_collection(prefix + "default")
    finally:
        await store.close()
    schema = info.payload_schema
    assert set(schema) == set(PAYLOAD_INDEXES)
    linked = set()
    for field_name, index in schema.items():
        params = index.params
        assert params is not None, field_name  # explicit params: the engine reports enable_hnsw
        assert params.enable_hnsw in (True, False), (field_name, params)
        if params.enable_hnsw:
            linked.add(field_name)
    assert linked == set(HNSW_LINKED_INDEXES) == {"type", "tags", "source_type", "session_id", "agent_id"}
    # importance stays a range index (Store.top orders by it)
    imp = schema["importance"].params
    assert isinstance(imp, models.IntegerIndexParams) and imp.range is True


async def test_a_selective_filter_on_an_unlinked_index_finds_the_exact_top_hits(
    qdrant_server: QdrantNode, client: AsyncQdrantClient, prefix: str
) -> None:
    """importance >= 7 on 10% of the points, on an index without HNSW links: the store's searches
    (ACORN on) return what an exact search returns. The full-scan threshold is lowered so the
    engine walks the HNSW graph with the filter instead of scoring the 10% exhaustively."""
    rng = np.random.default_rng(11)
    n = 4000
    vecs = _unit(rng, n)
    important = rng.random(n) < 0.1
    importance = np.where(important, rng.integers(7, 11, n), rng.integers(1, 7, n))
    store = _store(qdrant_server, prefix)
    await store.open()
    try:
        await store.create_collection(_spec())
        qname = prefix + "default"
        await client.update_collection(qname, hnsw_config=models.HnswConfigDiff(full_scan_threshold=10))
        records = [
            MemoryRecord(
                str(uuid.uuid4()), "default", f"m{i}", importance=int(importance[i]), valid_until=NOW + 1e6
            )
            for i in range(n)
        ]
        for start in range(0, n, 500):
            await store.upsert(
                "default",
                [StoredPoint(r, v) for r, v in zip(records[start : start + 500], vecs[start:], strict=False)],
            )
        await _indexed(client, qname, n)
        ids = np.array([r.id for r in records])
        flt = StoreFilter(min_importance=7)
        want = 30
        queries = _unit(rng, 30)
        recall_store: list[float] = []
        recall_plain: list[float] = []
        for q in queries:
            exact = np.where(important, vecs @ q, -np.inf)
            truth = set(ids[np.argsort(-exact)[:want]])
            hits = await store.search("default", q, want, flt)
            assert all(h.record.importance >= 7 for h in hits)
            recall_store.append(len(truth & {h.record.id for h in hits}) / want)
            got = await store.candidates("default", q, want, flt)
            assert set(got.ids) == {h.record.id for h in hits}
            # the same filter without ACORN, as a reference for what the links' absence costs
            plain = await client.query_points(
                qname,
                query=q.tolist(),
                query_filter=models.Filter(
                    must=[models.FieldCondition(key="importance", range=models.Range(gte=7))]
                ),
                limit=want,
                search_params=models.SearchParams(hnsw_ef=want),
            )
            recall_plain.append(len(truth & {str(p.id) for p in plain.points}) / want)
        # the case is a hard one: without links and without ACORN the graph walk misses hits
        # (measured 0.44 here; 0.99 when importance had HNSW links)
        assert float(np.mean(recall_plain)) <= 0.8, recall_plain
        assert float(np.mean(recall_store)) >= 0.97, recall_store  # measured 1.0
    finally:
        await store.close()


# ------------------------------------------------------------------ migrating older collections


def _linked(index: models.PayloadIndexInfo) -> bool:
    """The engine links an index unless its params say ``enable_hnsw=False``."""
    return getattr(index.params, "enable_hnsw", None) is not False


async def test_opening_relinks_the_payload_indexes_of_a_collection_made_by_an_older_release(
    qdrant_server: QdrantNode, client: AsyncQdrantClient, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An older Engram created every payload index by type alone (all HNSW-linked). Opening the
    store re-creates the ones that should not be linked, in place (points and filtered searches
    unchanged), logs each, and a second open changes nothing."""
    qname = prefix + "default"
    spec = _spec()
    await client.create_collection(
        qname,
        vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE),
        metadata={"engram": spec_to_json(spec)},
    )
    old_types = {
        "keyword": models.PayloadSchemaType.KEYWORD,
        "float": models.PayloadSchemaType.FLOAT,
        "integer": models.PayloadSchemaType.INTEGER,
    }
    for field_name, kind in PAYLOAD_INDEXES.items():  # as releases before the HNSW_LINKED_INDEXES did
        await client.create_payload_index(qname, field_name, field_schema=old_types[kind], wait=True)
    rng = np.random.default_rng(3)
    n = 300
    vecs = _unit(rng, n)
    records = [
        MemoryRecord(str(uuid.uuid4()), "default", f"m{i}", importance=1 + i % 10, valid_until=NOW + 1e6)
        for i in range(n)
    ]
    await client.upsert(
        qname,
        [
            models.PointStruct(id=r.id, vector=v.tolist(), payload=record_to_payload(r))
            for r, v in zip(records, vecs, strict=True)
        ],
        wait=True,
    )
    before = await client.get_collection(qname)
    assert all(_linked(i) for i in before.payload_schema.values())  # the old layout

    unlinked = set(PAYLOAD_INDEXES) - HNSW_LINKED_INDEXES
    store = _store(qdrant_server, prefix)
    with caplog.at_level(logging.INFO, logger="engram_server.adapters.storage.qdrant"):
        await store.open()
    try:
        logged = {m for m in caplog.messages if qname in m and "re-created" in m}
        assert len(logged) == len(unlinked)
        assert all("enable_hnsw=true -> enable_hnsw=false" in m for m in logged)
        after = await client.get_collection(qname)
        schema = after.payload_schema
        assert set(schema) == set(PAYLOAD_INDEXES)
        assert {f for f, i in schema.items() if _linked(i)} == set(HNSW_LINKED_INDEXES)
        assert all(schema[f].params is not None for f in unlinked)
        imp = schema["importance"].params
        assert isinstance(imp, models.IntegerIndexParams) and imp.range is True and imp.lookup is True
        assert after.points_count == n
        assert schema["importance"].points == n  # the re-created index covers every point
        # the collection still answers filtered searches and ordered reads through the indexes
        got = await store.search("default", vecs[0], 5, StoreFilter(min_importance=7))
        assert got and all(h.record.importance >= 7 for h in got)
        top = await store.top("default", StoreFilter(), 3, "importance")
        assert [r.importance for r in top] == [10, 10, 10]
        # idempotent: nothing left to change, nothing logged
        caplog.clear()
        assert await store.reconcile_indexes("default") == []
    finally:
        await store.close()
    again = _store(qdrant_server, prefix)
    with caplog.at_level(logging.INFO, logger="engram_server.adapters.storage.qdrant"):
        await again.open()
    await again.close()
    assert not [m for m in caplog.messages if "re-created" in m]
    assert (await client.get_collection(qname)).payload_schema == schema


async def test_opening_creates_a_missing_index_and_leaves_other_collections_alone(
    qdrant_server: QdrantNode, client: AsyncQdrantClient, prefix: str
) -> None:
    store = _store(qdrant_server, prefix)
    await store.open()
    try:
        await store.create_collection(_spec())
    finally:
        await store.close()
    qname = prefix + "default"
    await client.delete_payload_index(qname, "has_trigger", wait=True)
    # a collection that is not Engram's (no spec metadata) is never touched
    foreign = prefix + "foreign"
    await client.create_collection(
        foreign, vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE)
    )
    await client.create_payload_index(foreign, "importance", field_schema=models.PayloadSchemaType.INTEGER)
    store = _store(qdrant_server, prefix)
    await store.open()
    await store.close()
    schema = (await client.get_collection(qname)).payload_schema
    assert set(schema) == set(PAYLOAD_INDEXES)
    assert _linked(schema["has_trigger"]) is False
    other = (await client.get_collection(foreign)).payload_schema
    assert set(other) == {"importance"} and other["importance"].params is None
