"""What only a real Qdrant server shows: int8 quantization with oversampling and rescoring, and the
write lease that keeps the gate exclusive across Engram replicas (conditional upserts).

Runs on the session's real server node (``qdrant_server`` in tests/conftest.py); skips without one.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import numpy as np
import pytest
from qdrant_client import AsyncQdrantClient, models

from engram_server.adapters.storage.qdrant import QdrantStore
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


async def test_without_quantization_no_search_params_are_sent(
    qdrant_server: QdrantNode, client: AsyncQdrantClient, prefix: str
) -> None:
    store = _store(qdrant_server, prefix)
    await store.open()
    try:
        await store.create_collection(_spec())
        info = await client.get_collection(prefix + "default")
        assert info.config.quantization_config is None
        assert store._search_params is None
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
