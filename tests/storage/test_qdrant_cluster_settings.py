"""Cluster settings (ENGRAM_QDRANT_SHARD_NUMBER, _REPLICATION_FACTOR, _WRITE_CONSISTENCY_FACTOR,
_ON_DISK, _QUANTIZATION) reach ``create_collection`` on the qdrant-client code path.

No Qdrant server runs here, so the store runs on qdrant-client's local mode. Local mode accepts
these arguments and drops all but the vectors' ``on_disk`` flag (it has no shards, replicas or
quantization; ``test_what_local_mode_keeps`` pins that down). So the arguments themselves are
checked by spying on ``AsyncQdrantClient.create_collection``: what the spy records is exactly what
qdrant-client would send to a server.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import numpy as np
import pytest
from qdrant_client import AsyncQdrantClient, models

from engram_server.adapters.storage.qdrant import QdrantStore
from engram_server.app import build_store
from engram_server.config import load_settings
from engram_server.domain.model import CollectionSpec, MemoryRecord, MemoryType, StoredPoint, StoreFilter

CLUSTER_ENV = {
    "ENGRAM_QDRANT_URL": ":memory:",
    "ENGRAM_QDRANT_SHARD_NUMBER": "6",
    "ENGRAM_QDRANT_REPLICATION_FACTOR": "3",
    "ENGRAM_QDRANT_WRITE_CONSISTENCY_FACTOR": "2",
    "ENGRAM_QDRANT_ON_DISK": "true",
    "ENGRAM_QDRANT_QUANTIZATION": "int8",
}


def spec(name: str, dimension: int = 8) -> CollectionSpec:
    return CollectionSpec(name=name, embedding_model="test/random", dimension=dimension, created_at=2.0)


@pytest.fixture
def create_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """Every AsyncQdrantClient.create_collection call: its keyword arguments, then the real call."""
    calls: list[dict[str, Any]] = []
    real: Callable[..., Awaitable[bool]] = AsyncQdrantClient.create_collection

    async def spy(self: AsyncQdrantClient, collection_name: str, **kwargs: Any) -> bool:
        calls.append({"collection_name": collection_name, **kwargs})
        return await real(self, collection_name, **kwargs)

    monkeypatch.setattr(AsyncQdrantClient, "create_collection", spy)
    yield calls


async def test_settings_reach_create_collection(create_calls: list[dict[str, Any]]) -> None:
    store = build_store(load_settings(CLUSTER_ENV))
    assert isinstance(store, QdrantStore)
    await store.open()
    try:
        await store.create_collection(spec("notes"))
        await store.put_state("reflection.notes", {"runs": [1.0]})
    finally:
        await store.close()

    memories, state = create_calls
    assert memories["collection_name"] == "notes"
    assert (
        memories["shard_number"],
        memories["replication_factor"],
        memories["write_consistency_factor"],
    ) == (6, 3, 2)
    vectors = memories["vectors_config"]
    assert isinstance(vectors, models.VectorParams)
    assert (vectors.size, vectors.distance, vectors.on_disk) == (8, models.Distance.COSINE, True)
    quantization = memories["quantization_config"]
    assert isinstance(quantization, models.ScalarQuantization)
    assert quantization.scalar.type == models.ScalarType.INT8
    assert quantization.scalar.always_ram is True

    # The reflection throttle state shared by every replica gets the same spread and availability.
    assert state["collection_name"] == "_engram_state"
    assert (state["shard_number"], state["replication_factor"], state["write_consistency_factor"]) == (
        6,
        3,
        2,
    )


async def test_defaults_leave_everything_to_the_server(create_calls: list[dict[str, Any]]) -> None:
    store = build_store(load_settings({"ENGRAM_QDRANT_URL": ":memory:"}))
    await store.open()
    try:
        await store.create_collection(spec("notes"))
    finally:
        await store.close()
    (call,) = create_calls
    assert (call["shard_number"], call["replication_factor"], call["write_consistency_factor"]) == (
        None,
        None,
        None,
    )
    assert call["quantization_config"] is None
    assert call["vectors_config"].on_disk is None  # the server's default (vectors in RAM)


async def test_a_store_with_cluster_settings_works_end_to_end() -> None:
    """Local mode ignores the cluster arguments, but the whole code path runs with them set."""
    store = build_store(load_settings(CLUSTER_ENV))
    await store.open()
    try:
        await store.create_collection(spec("notes", dimension=4))
        record = MemoryRecord(
            id="00000000-0000-4000-8000-000000000001",
            collection="notes",
            content="The user is allergic to peanuts.",
            type=MemoryType.IDENTITY,
            importance=9,
            created_at=10.0,
            updated_at=10.0,
        )
        vector = np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32)
        await store.upsert("notes", [StoredPoint(record, vector)])
        hits = await store.search("notes", vector, 5, StoreFilter())
        assert [h.record.content for h in hits] == ["The user is allergic to peanuts."]
        await store.put_state("k", {"v": 1})
        assert await store.get_state("k") == {"v": 1}
    finally:
        await store.close()


async def test_what_local_mode_keeps() -> None:
    """Local mode keeps the vectors' on_disk flag and silently drops shards, replication, write
    consistency and quantization: only a real cluster can show those took effect."""
    store = build_store(load_settings(CLUSTER_ENV))
    assert isinstance(store, QdrantStore)
    await store.open()
    try:
        await store.create_collection(spec("notes"))
        info = await store._c.get_collection("notes")
    finally:
        await store.close()
    params = info.config.params
    assert isinstance(params.vectors, models.VectorParams) and params.vectors.on_disk is True
    assert (params.shard_number, params.replication_factor, params.write_consistency_factor) == (
        None,
        None,
        None,
    )
    assert info.config.quantization_config is None


async def test_a_collection_created_by_another_replica_meanwhile_is_not_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two replicas may both see "no such collection" and both create it; the loser's create
    fails on the server, and that must not fail its AddMemory."""
    store = QdrantStore(":memory:")
    await store.open()
    try:
        other = QdrantStore(":memory:")
        other._client = store._c  # the "other replica" shares the same Qdrant
        await other.create_collection(spec("notes"))
        real_exists = store._c.collection_exists
        stale = [True]  # our check ran before the other replica's create
        create_calls: list[str] = []
        real_create = store._c.create_collection

        async def stale_exists(name: str) -> bool:
            if stale and stale.pop():
                return False
            return await real_exists(name)

        async def counted_create(name: str, **kwargs: Any) -> bool:
            create_calls.append(name)
            return await real_create(name, **kwargs)

        monkeypatch.setattr(store._c, "collection_exists", stale_exists)
        monkeypatch.setattr(store._c, "create_collection", counted_create)
        await store.create_collection(spec("notes"))  # its create fails: "already exists"
        assert create_calls == ["notes"]
        assert await store.get_collection("notes") == spec("notes")
    finally:
        await store.close()


async def test_a_collection_dropped_by_another_replica_is_forgotten() -> None:
    """The spec cache is per process: once the server says the collection is gone, the next call
    looks again instead of trusting the cache."""
    store = QdrantStore(":memory:")
    await store.open()
    try:
        await store.create_collection(spec("notes"))
        await store._c.delete_collection("notes")  # another replica's DeleteCollection
        with pytest.raises(Exception, match="does not exist"):
            await store.count("notes", StoreFilter())
        assert await store.get_collection("notes") is None
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"ENGRAM_QDRANT_URL": "http://qdrant.example:6333"}, 64),
        ({"ENGRAM_QDRANT_URL": "http://qdrant.example:6333", "ENGRAM_GATE_HNSW_EF": "24"}, 24),
        ({"ENGRAM_QDRANT_URL": "http://qdrant.example:6333", "ENGRAM_GATE_HNSW_EF": "0"}, None),
        ({"ENGRAM_QDRANT_URL": ":memory:"}, None),  # local mode searches exactly (and warns on params)
    ],
)
async def test_gate_beam_width_reaches_the_neighbour_queries(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: int | None
) -> None:
    """ENGRAM_GATE_HNSW_EF rides with the gate's lookups (query_points / query_batch_points) as the
    request's search params; 0 leaves them to the server. Spied as above, with the server's answers
    faked (none runs here): what qdrant-client is asked to send."""
    from qdrant_client.http.models import models as rest  # noqa: PLC0415 - the client's own response types

    sent: list[int | None] = []
    from engram_server.adapters.storage.payload import record_to_payload  # noqa: PLC0415

    stored = MemoryRecord(id="00000000-0000-4000-8000-000000000002", collection="notes", content="x")
    hit = rest.ScoredPoint(id=stored.id, version=1, score=0.9, payload=record_to_payload(stored))

    async def one(self: AsyncQdrantClient, collection_name: str, **kwargs: Any) -> Any:
        params = kwargs.get("search_params")
        sent.append(None if params is None else params.hnsw_ef)
        return rest.QueryResponse(points=[hit])

    async def batch(self: AsyncQdrantClient, collection_name: str, requests: Any, **kwargs: Any) -> Any:
        sent.extend(None if r.params is None else r.params.hnsw_ef for r in requests)
        return [rest.QueryResponse(points=[hit]) for _ in requests]

    monkeypatch.setattr(AsyncQdrantClient, "query_points", one)
    monkeypatch.setattr(AsyncQdrantClient, "query_batch_points", batch)
    store = build_store(load_settings(env))
    assert isinstance(store, QdrantStore)
    store._client = AsyncQdrantClient(location=":memory:")  # white box: no server to open against
    store._specs["notes"] = spec("notes", dimension=4)
    try:
        vector = np.array([0.0, 1.0, 0.0, 0.0], dtype=np.float32)
        hits = await store.search("notes", vector, 3, StoreFilter())
        batches = await store.search_batch("notes", np.stack([vector, vector]), 3, StoreFilter())
    finally:
        await store._client.close()
    assert [h.record.id for h in hits] == [hit.id]
    assert [[h.record.id for h in b] for b in batches] == [[hit.id], [hit.id]]
    assert sent == [expected] * 3
