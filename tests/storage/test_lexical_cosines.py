"""The lexical-only candidates of a search carry their exact cosine, and their vector when vectors
are asked for. (Getting the cosines in the dense + BM25 batch itself, the BM25 query again as a
prefetch rescored with the dense vector, was tried twice: it lost the vectors, and with them kept
it cost more engine CPU per search than the query by ids after the batch: 3.47 vs 3.09 ms of
``service.search`` at 20k, ``bench/cpu_inprocess.py``, 2026-12-03.)"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import numpy as np

from engram_server.adapters.lexical import LEXICAL_ENCODER_ID, Bm25Encoder
from engram_server.adapters.storage.edge import EdgeStore
from engram_server.domain.model import CollectionSpec, MemoryRecord, MemoryType, StoredPoint, StoreFilter

DIM = 16
NOW = 1_800_000_000.0
WORDS = ["alpha", "berlin", "coffee", "report", "garden", "piano", "python", "quarterly", "river", "tennis"]


def _unit(v: np.ndarray) -> np.ndarray:
    return np.asarray(v / np.linalg.norm(v), dtype=np.float32)


async def _filled_store(
    tmp_path: Path, rng: np.random.Generator, n: int, *, typed: bool
) -> tuple[EdgeStore, dict[str, np.ndarray]]:
    """An open store whose "default" collection holds ``n`` memories of four random words with
    random unit vectors (by id); a tenth of them expired (the store drops dead ones itself).
    ``typed``: alternate events and insights, random importance."""
    store = EdgeStore(tmp_path, nearest_lists=0)
    await store.open()
    await store.create_collection(
        CollectionSpec(
            name="default",
            embedding_model="test/random",
            dimension=DIM,
            created_at=1.0,
            lexical=LEXICAL_ENCODER_ID,
        )
    )
    enc = Bm25Encoder()
    vectors: dict[str, np.ndarray] = {}
    points = []
    for i in range(n):
        content = " ".join(str(w) for w in rng.choice(WORDS, size=4))
        rec = MemoryRecord(
            id=str(uuid.uuid4()),
            collection="default",
            content=content,
            created_at=float(i + 1),
            valid_until=NOW - 1 if i % 10 == 0 else NOW + 1e6,
        )
        if typed:
            kind = MemoryType.EVENT if i % 2 else MemoryType.INSIGHT
            rec = dataclasses.replace(rec, type=kind, importance=int(rng.integers(1, 11)))
        vectors[rec.id] = _unit(rng.normal(size=DIM))
        points.append(StoredPoint(rec, vectors[rec.id], enc.encode_document(rec.content)))
    await store.upsert("default", points)
    return store, vectors


async def test_lexical_only_candidates_have_their_exact_cosine(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    enc = Bm25Encoder()
    store, vectors = await _filled_store(tmp_path, rng, 400, typed=True)
    try:
        lexical_only = 0
        for probe in range(12):
            q = _unit(rng.normal(size=DIM))
            text = " ".join(str(w) for w in rng.choice(WORDS, size=2))
            for flt in (StoreFilter(live_at=NOW), StoreFilter(live_at=NOW, types=(MemoryType.EVENT,))):
                found = await store.candidates(
                    "default", q, 20, flt, sparse=enc.encode_query(text), lexical_limit=40
                )
                lexical_only += int(np.count_nonzero(found.lexical > 0))
                for mid, cosine in zip(found.ids, found.cosine.tolist(), strict=True):
                    assert abs(cosine - float(vectors[mid] @ q)) < 1e-5, (probe, mid)
                assert len(set(found.ids)) == len(found.ids)
        assert lexical_only > 0
    finally:
        await store.close()


async def test_lexical_only_candidates_keep_their_vectors_when_asked(tmp_path: Path) -> None:
    """With vectors asked for (a diversified search), every candidate carries its own vector, the
    lexical-only ones too (what reverted the single-batch cosines once: those came without)."""
    rng = np.random.default_rng(5)
    enc = Bm25Encoder()
    store, vectors = await _filled_store(tmp_path, rng, 300, typed=False)
    try:
        lexical_only = 0
        for _ in range(8):
            q = _unit(rng.normal(size=DIM))
            text = " ".join(str(w) for w in rng.choice(WORDS, size=2))
            found = await store.candidates(
                "default",
                q,
                10,
                StoreFilter(live_at=NOW),
                sparse=enc.encode_query(text),
                lexical_limit=40,
                with_vectors=True,
            )
            assert found.vectors is not None
            assert len(found.vectors) == len(found.ids)
            for mid, cosine, vec in zip(found.ids, found.cosine.tolist(), found.vectors, strict=True):
                assert vec is not None
                np.testing.assert_allclose(np.asarray(vec, dtype=np.float32), vectors[mid], atol=1e-6)
                assert abs(cosine - float(vectors[mid] @ q)) < 1e-5
            lexical_only += len(found.ids) - 10
        assert lexical_only > 0
    finally:
        await store.close()
