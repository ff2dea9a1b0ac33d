"""Index management: HNSW index builds (due at open, or in the background) and compaction."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import qdrant_edge as qe

from engram_server.adapters.storage.diskguard import (
    disk_usage,
)
from engram_server.adapters.storage.edge.engine import (
    _SCROLL_BATCH,
    _SHARD_DIR,
    EdgeEngine,
    _Collection,
    _engine_key,
)
from engram_server.adapters.storage.payload import (
    LEXICAL_VECTOR,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CompactionReport:
    """What ``EdgeStore.compact`` did to one collection."""

    collection: str
    segments_before: int
    segments_after: int
    points: int
    indexed_vectors: int  # dense and BM25 vectors in indexed segments
    optimizer_rounds: int  # optimizer passes that changed something
    seconds: float
    access_folded: int = 0  # access counters moved from the ledger into the engine's payload
    quantized: bool = False  # int8 quantization added to the collection's dense vectors


def _quantized(path: Path) -> bool:
    """Whether the collection at ``path`` quantizes its dense vectors (the engine's own record of
    its configuration; unreadable: False, and a compaction opens it with the setting again)."""
    try:
        config = json.loads((path / _SHARD_DIR / "edge_config.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(isinstance(config, dict) and config.get("quantization_config"))


def _dense_unindexed(col: _Collection) -> int:
    """Points whose dense vector is not in an HNSW index yet.

    ``indexed_vectors_count`` counts every indexed vector, and lexical sparse vectors are always
    indexed: subtract the points that carry one (empty ones are never written), or a hybrid
    collection would look fully indexed and never get its HNSW index.
    """
    info = col.shard.info()
    indexed = info.indexed_vectors_count
    if col.spec.lexical is not None:
        with_sparse = col.shard.count(
            qe.CountRequest(exact=True, filter=qe.Filter(must=[qe.HasVectorCondition(LEXICAL_VECTOR)]))
        )
        indexed -= with_sparse
    return max(0, info.points_count - indexed)


class EdgeIndexes(EdgeEngine):
    """Index management: HNSW builds (due, background) and compaction."""

    def _maybe_optimize(self, col: _Collection) -> None:
        """Runs on the io thread after writes: schedule an index build when due."""
        if self._hnsw_threshold <= 0 or self._opt is None:
            return
        if col.optimizing is not None and not col.optimizing.done():
            return
        if col.unindexed_bound is not None and col.unindexed_bound < self._hnsw_threshold:
            return  # fewer than the threshold, without counting
        col.unindexed_bound = _dense_unindexed(col)
        if col.unindexed_bound >= self._hnsw_threshold:
            if not self.disk.room(disk_usage(col.path), what=f"index build of collection {col.spec.name}"):
                return  # rewriting the segments needs about their size: tried again after a write
            col.unindexed_bound = None  # the build changes it: count again afterwards
            col.optimizing = self._opt.submit(self._optimize, col)

    def _note_unindexed(self, col: _Collection) -> None:
        """Runs on the io thread after writes when indexes are built at start-up only: say once
        that a collection grew past the threshold without an index (every search and write-gate
        query scans those points until the next start-up builds it)."""
        if self._hnsw_threshold <= 0 or col.unindexed_warned:
            return
        if col.unindexed_bound is not None and col.unindexed_bound < self._hnsw_threshold:
            return  # fewer than the threshold, without counting
        col.unindexed_bound = _dense_unindexed(col)
        if col.unindexed_bound >= self._hnsw_threshold:
            col.unindexed_warned = True
            log.warning(
                "collection %s holds %d points without an HNSW index (ENGRAM_HNSW_THRESHOLD=%d): "
                "searches and the write gate scan them until the index is built at the next start-up; "
                "set ENGRAM_HNSW_BACKGROUND=true to build it while serving (pauses of seconds)",
                col.spec.name,
                col.unindexed_bound,
                self._hnsw_threshold,
            )

    @staticmethod
    def _optimize(col: _Collection) -> None:
        try:
            started = time.perf_counter()
            changed = col.shard.optimize()
            col.touch(())  # approximate (HNSW) results may differ from brute force ones; no record changed
            col.nearest.invalidate()
            info = col.shard.info()
            log.info(
                "collection %s optimized in %.1f s (changed=%s): %d points, %d indexed, %d segments",
                col.spec.name,
                time.perf_counter() - started,
                changed,
                info.points_count,
                info.indexed_vectors_count,
                info.segments_count,
            )
        except Exception:
            log.exception("optimizing collection %s failed", col.spec.name)

    async def wait_optimized(self) -> None:
        """Wait for any background index build to finish (tests, shutdown, benchmarks)."""
        for col in list(self._cols.values()):
            fut = col.optimizing
            if fut is not None:
                await asyncio.wrap_future(fut)

    async def compact(self, collection: str, *, max_rounds: int = 8) -> CompactionReport:
        """Run the engine's optimizer on ``collection`` now, until it has nothing left to do: merge
        its segments down to what this store is configured with (``segments``; 0 = the engine's
        choice) and build every due HNSW index; with int8 quantization on (the default), add it to
        a collection made without it. Maintenance, for a store that serves no traffic (``engram
        compact``): the optimizer holds the GIL throughout (seconds to many minutes). Typical use:
        after an import done with many segments (``ENGRAM_EDGE_SEGMENTS=8``)."""
        await self.wait_optimized()

        def work() -> CompactionReport:
            col = self._col(collection)
            self.disk.check(disk_usage(col.path), what=f"compaction of collection {collection}")
            before = col.shard.info()
            started = time.perf_counter()
            folded = self._fold_access(col)
            quantize = self._quantization == "int8" and not _quantized(col.path)
            if quantize:  # opened again with the setting: the optimizer rebuilds the segments with it
                col.shard.close()
                col.shard = self._open_shard(col.path, col.spec, create=False, quantize=True)
            rounds = 0
            while rounds < max_rounds and col.shard.optimize():
                rounds += 1
            col.touch(())  # results may differ (other graphs): no cached list survives; no record changed
            col.nearest.reset()
            col.unindexed_bound = None
            after = col.shard.info()
            return CompactionReport(
                collection=collection,
                segments_before=before.segments_count,
                segments_after=after.segments_count,
                points=after.points_count,
                indexed_vectors=after.indexed_vectors_count,
                optimizer_rounds=rounds,
                seconds=time.perf_counter() - started,
                access_folded=folded,
                quantized=quantize,
            )

        return await self._run(work)

    def _fold_access(self, col: _Collection) -> int:
        """Write the access ledger's counters into the engine's payloads and empty the ledger
        (compaction rebuilds the segments anyway, so the points they move cost nothing later).
        Payloads first: a crash in between leaves both saying the same."""
        entries = col.access.entries()
        keys = list(entries)
        written = 0
        for i in range(0, len(keys), _SCROLL_BATCH):
            ids: list[int | uuid.UUID | str] = [uuid.UUID(int=k) for k in keys[i : i + _SCROLL_BATCH]]
            for r in col.shard.retrieve(ids, False, False):  # those that still exist
                n, at = entries[_engine_key(r.id)]
                col.shard.update(
                    qe.UpdateOperation.set_payload([r.id], {"access_count": n, "last_accessed_at": at})
                )
                written += 1
        if entries:
            col.shard.flush()
            col.access.clear()
        return written
