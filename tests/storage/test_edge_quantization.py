"""int8 quantization of the embedded store's dense vectors (``ENGRAM_EDGE_QUANTIZATION``): new
collections get it, existing ones keep their layout, and searches of a quantized index return
exact scores (rescored with the original vectors) and the true nearest points."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engram_server.adapters.storage.edge import EdgeStore
from engram_server.domain.model import CollectionSpec, MemoryRecord, StoredPoint, StoreFilter

DIM = 32
NOW = 1_800_000_000.0


def _spec(name: str = "default") -> CollectionSpec:
    return CollectionSpec(name=name, embedding_model="test/random", dimension=DIM, created_at=1.0)


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _quantization(data: Path, name: str = "default") -> Any:
    config = json.loads((data / "collections" / name / "shard" / "edge_config.json").read_text())
    return config.get("quantization_config")


def _points(vecs: np.ndarray) -> list[StoredPoint]:
    return [
        StoredPoint(MemoryRecord(str(uuid.uuid4()), "default", f"m{i}", valid_until=NOW + 1e6), v)
        for i, v in enumerate(vecs)
    ]


async def test_new_collections_are_quantized_and_existing_ones_keep_their_layout(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path)  # the default: int8
    await store.open()
    await store.create_collection(_spec("a"))
    await store.close()
    plain = EdgeStore(tmp_path, quantization="none")
    await plain.open()
    await plain.create_collection(_spec("b"))
    await plain.close()
    assert _quantization(tmp_path, "a") == {"scalar": {"type": "int8", "quantile": 0.99, "always_ram": True}}
    assert _quantization(tmp_path, "b") is None
    for setting in ("int8", "none"):  # reopened under either setting: unchanged
        again = EdgeStore(tmp_path, quantization=setting)
        await again.open()
        await again.close()
        assert _quantization(tmp_path, "a") is not None and _quantization(tmp_path, "b") is None
    with pytest.raises(ValueError, match="quantization"):
        EdgeStore(tmp_path, quantization="binary")


async def test_a_quantized_index_returns_exact_scores_and_the_nearest_points(tmp_path: Path) -> None:
    rng = np.random.default_rng(21)
    store = EdgeStore(tmp_path, hnsw_threshold=200, background_hnsw=True)
    await store.open()
    try:
        await store.create_collection(_spec())
        vecs = _unit(rng, 1200)
        points = _points(vecs)
        for i in range(0, len(points), 100):
            await store.upsert("default", points[i : i + 100])
        await store.wait_optimized()
        shard = store._cols["default"].shard  # white box
        assert shard.info().indexed_vectors_count >= 1000  # searched through the quantized index
        ids = [p.record.id for p in points]
        overlap = []
        for q in _unit(rng, 30):
            exact = vecs @ q
            truth = [ids[i] for i in np.argsort(-exact)[:20]]
            for _ in range(2):  # fresh, then from the kept nearest list
                found = await store.candidates("default", q, 20, StoreFilter(live_at=NOW))
                cos = dict(zip(found.ids, found.cosine.tolist(), strict=True))
                for pid, score in cos.items():  # rescored: the original vectors' cosine
                    assert score == pytest.approx(float(exact[ids.index(pid)]), abs=1e-5)
                overlap.append(len(set(truth) & set(found.ids[:20])) / 20)
            # a point written right beside the question is patched in with its exact score
            near = q + 0.02 * rng.normal(size=DIM).astype(np.float32)
            near /= np.linalg.norm(near)
            (new,) = _points(near[None, :])
            await store.upsert("default", [new])
            found = await store.candidates("default", q, 20, StoreFilter(live_at=NOW))
            assert found.ids[0] == new.record.id
            assert float(found.cosine[0]) == pytest.approx(float(near @ q), abs=1e-5)
            vecs = np.vstack([vecs, near[None, :]])
            ids.append(new.record.id)
        assert float(np.mean(overlap)) >= 0.97, overlap
    finally:
        await store.close()


async def test_compact_quantizes_a_collection_made_without_it(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    old = EdgeStore(tmp_path, hnsw_threshold=200, background_hnsw=True, quantization="none")
    await old.open()
    await old.create_collection(_spec())
    vecs = _unit(rng, 600)
    points = _points(vecs)
    await old.upsert("default", points)
    await old.wait_optimized()
    assert (await old.compact("default")).quantized is False  # its setting: none
    await old.close()
    assert _quantization(tmp_path) is None

    store = EdgeStore(tmp_path, hnsw_threshold=200)
    await store.open()
    try:
        report = await store.compact("default")
        assert report.quantized and report.points == 600 and report.indexed_vectors >= 600
        assert _quantization(tmp_path) == {"scalar": {"type": "int8", "quantile": 0.99, "always_ram": True}}
        for k in (0, 299, 599):  # every point still there, scores exact
            found = await store.candidates("default", vecs[k], 5, StoreFilter(live_at=NOW))
            assert found.ids[0] == points[k].record.id
            assert float(found.cosine[0]) == pytest.approx(1.0, abs=1e-5)
        assert (await store.compact("default")).quantized is False  # already
    finally:
        await store.close()
