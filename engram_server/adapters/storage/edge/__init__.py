"""The embedded default Store: one qdrant-edge shard per collection, in-process.

Layout::

    <data_dir>/.lock                      flock held while a store has the dir open
    <data_dir>/collections/<name>/spec.json   the CollectionSpec (written atomically)
    <data_dir>/collections/<name>/shard/      the EdgeShard (WAL, segments, edge_config.json)
    <data_dir>/collections/<name>/access.log  access counters written since each point's last
                                              upsert (``access``: never rewrites a point)

Threads. EdgeShard calls are synchronous, and most hold the GIL while they run: ``optimize()``
and a query batch with a sparse (BM25) request do; a dense ``query`` alone releases it (measured
with qdrant-edge-py 0.9.0: splitting the candidates' batch into two calls to release it gained
nothing under load, 49.2 vs 48.2 searches/s). Several threads would buy contention rather than
parallelism, so every shard call of a
store runs on ONE worker thread ("engram-edge-io"); that also makes each Store method
atomic with respect to the others (e.g. delete_where's count and delete). The event loop only
awaits futures.

Durability. ``EdgeShard.update`` appends the operation to the shard's write-ahead log (a
memory-mapped file) before applying it, so once it returns the operation survives a crash of
this process (the kernel owns the dirty pages; proven by the kill -9 test). It is not fsynced:
with ``sync_writes=True`` every write is followed by ``flush()`` (WAL and segments to disk),
which also survives power loss, at a measured ~11 ms per single-point upsert instead of
~0.4 ms (5,000 points of 384 dimensions, p50, 2 cores).

Disk. The engine writes through memory-mapped files, which SIGBUS the process when a full
volume cannot back a page. ``disk`` (a :class:`DiskGuard`) refuses every write below the
configured free-space headroom before it reaches the engine (StorageFull), puts off index builds
until there is room to rewrite the collection, skips access counters, gives the sparse vector
chunks their space while there is room (a load would fill them in), and keeps a reserve file that
a start-up below the headroom releases so the engine can open and serve reads.

HNSW. Segments are searched brute force until a collection's unindexed points reach
``hnsw_threshold``; then ``optimize()`` builds the HNSW index on a second thread
("engram-optimize"), one collection at a time. NOTE: qdrant-edge-py 0.9.0 holds the GIL for
the whole of ``optimize()`` (measured: a ticking Python thread got no time during a 3-14 s
build), so while an index is built the process's Python code, event loop included, does not
run. So by default (``background_hnsw=False``) due indexes are built only in ``open()``, before
the server takes traffic; ``background_hnsw=True`` also builds them while serving, after writes
(a pause of seconds, once per ``hnsw_threshold`` new points). ``hnsw_threshold=0`` disables HNSW.

Modules. :class:`EdgeStore` is composed from one mixin per concern, so a reader finds each in
one file: :mod:`.engine` (engine access: state, the io thread, shard configuration, filters and
ids in the engine's terms, generations), :mod:`.indexes` (HNSW builds, compaction),
:mod:`.lifecycle` (open, close, collections), :mod:`.candidates` (the storage queries: search
candidates with their ranking columns and nearest lists, the gate's neighbours) and
:mod:`.points` (writes, reads, deletes, fields, access counters, state).
"""

from __future__ import annotations

import contextlib

from engram_server.adapters.storage.edge.candidates import EdgeCandidates
from engram_server.adapters.storage.edge.engine import (
    DENSE_SEARCH_PARAMS,
    EDGE_QUANTIZATIONS,
    QUANTIZED,
    _edge_filter,
)
from engram_server.adapters.storage.edge.indexes import CompactionReport, _dense_unindexed
from engram_server.adapters.storage.edge.lifecycle import EdgeLifecycle
from engram_server.adapters.storage.edge.points import EdgePoints

__all__ = [
    "DENSE_SEARCH_PARAMS",
    "EDGE_QUANTIZATIONS",
    "QUANTIZED",
    "CompactionReport",
    "EdgeStore",
    "_dense_unindexed",
    "_edge_filter",
]


class EdgeStore(EdgePoints, EdgeCandidates, EdgeLifecycle):
    """:class:`engram_server.ports.Store` on qdrant-edge shards under ``data_dir``."""

    def write_lease(self, collection: str) -> contextlib.AbstractAsyncContextManager[None]:
        """A no-op: one process owns the data dir, so the service's per-process lock suffices."""
        return contextlib.nullcontext()
