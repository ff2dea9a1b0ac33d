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
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import faulthandler
import fcntl
import hashlib
import itertools
import json
import logging
import math
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import numpy as np
import qdrant_edge as qe
from opentelemetry import metrics

from engram_server.adapters.storage.access import ACCESS_LOG, AccessLedger
from engram_server.adapters.storage.diskguard import (
    NEW_COLLECTION_BYTES,
    DiskGuard,
    allocate,
    disk_usage,
    sparse_files,
)
from engram_server.adapters.storage.nearest import NearestBudget, NearestList, NearestLists, Row, patch
from engram_server.adapters.storage.payload import (
    ACCESS_FIELDS,
    CANDIDATE_FIELDS,
    LEXICAL_VECTOR,
    PAYLOAD_INDEXES,
    CandidateBuilder,
    Condition,
    FilterPlan,
    IsEmpty,
    MatchAny,
    MatchValue,
    Range,
    RankFields,
    access_hits,
    access_update,
    as_vector,
    candidate_columns,
    canonical_ids,
    canonical_offset,
    encode_updates,
    filter_plan,
    is_live,
    point_id,
    point_vectors,
    rank_fields,
    rank_key,
    record_from_payload,
    record_to_payload,
    spec_from_json,
    spec_to_json,
    split_live,
    validate_collection_name,
    validate_state_key,
)
from engram_server.domain.errors import CollectionNotFound, EngramError, StorageUnavailable
from engram_server.domain.model import (
    Candidates,
    CollectionSpec,
    MemoryRecord,
    ScoredPoint,
    SparseVector,
    StoredPoint,
    StoreFilter,
    Vector,
)
from engram_server.threads import OPTIMIZER_THREAD, STORAGE_THREAD, worker

__all__ = ["EdgeStore"]

log = logging.getLogger(__name__)

_nearest_lists = metrics.get_meter("engram_server.storage").create_counter(
    "engram.storage.nearest_lists",
    unit="{search}",
    description="Candidate fetches by how their nearest list was had: reused as kept, patched with the "
    "points written since, or searched in the graph.",
)

T = TypeVar("T")

_SPEC_FILE = "spec.json"
_STATE_DIR = "state"
_SHARD_DIR = "shard"
_INDEX_SCHEMA: Mapping[str, qe.PayloadSchemaType] = {
    "keyword": qe.PayloadSchemaType.Keyword,
    "float": qe.PayloadSchemaType.Float,
    "integer": qe.PayloadSchemaType.Integer,
}
_SCROLL_BATCH = 1024
#: A search without user filters asks the engine, unfiltered, for this many (at least; a quarter
#: of the limit for large limits) more nearest points than it needs and drops the dead ones itself.
_LIVENESS_MARGIN = 16
#: A deletion by filter of at most this many points deletes them by id and logs them (kept nearest
#: lists and cached records survive it); a larger one drops them all.
_LOGGED_DELETE_MAX = 4096


#: Sparse vector chunks are looked for at most this often while a collection is written.
_SETTLE_SECONDS = 5.0

#: Generations are unique across collections and their re-creations (see ``EdgeStore.generation``).
_GENERATIONS = itertools.count(1)

#: Generations whose written points each collection remembers (``EdgeStore.changed_since``).
_HISTORY = 512

#: Payload fields whose update cannot change what ``candidates`` returns (no generation change).
_UNRANKED_FIELDS: frozenset[str] = frozenset({"access_count", "last_accessed_at"})


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


@dataclass
class _Collection:
    spec: CollectionSpec
    path: Path
    shard: qe.EdgeShard
    #: Access counters written since each point's last upsert (beside the engine: see ``access``).
    access: AccessLedger
    optimizing: concurrent.futures.Future[None] | None = field(default=None)
    generation: int = field(default_factory=lambda: next(_GENERATIONS))
    #: Ranking fields of points by :func:`rank_key` of their id, so that candidate queries fetch
    #: ids and scores only (see ``EdgeStore.candidates``). Filled by writes and by candidate
    #: queries that miss; an entry is dropped when its point is deleted or a ranking field is set.
    #: Entries of points deleted by filter may linger: they are never read (the engine never
    #: returns those ids) and an upsert of the same id replaces them.
    ranks: dict[int, RankFields] = field(default_factory=dict)
    #: True once the ranking fields of every point were loaded (in the background after open).
    warm: bool = False
    #: An upper bound of the points whose dense vector is not in an HNSW index: the exact count
    #: when last made plus every point written since (a write leaves at most one more point
    #: unindexed: a new point, or one moved out of an indexed segment by copy-on-write). The exact
    #: count is a filtered count over the whole collection, so it is made only once this bound
    #: reaches the threshold. None: count at the next check (after open, after an index build).
    unindexed_bound: int | None = None
    #: Whether the warning that searches scan many unindexed points was logged (background builds off).
    unindexed_warned: bool = False
    opened_at: float = field(default_factory=time.monotonic)
    #: When the sparse files a load would fill in were last looked for (``EdgeStore._settle``).
    settled_at: float = 0.0
    #: Nearest lists of recent search vectors, patched with the points written since.
    nearest: NearestLists = field(default_factory=lambda: NearestLists(NearestBudget(0)))

    #: (generation, ids of the points it wrote; None: unknown) of recent generations, oldest
    #: first; every generation after ``history_floor`` is in it (``EdgeStore.changed_since``).
    history: collections.deque[tuple[int, frozenset[str] | None]] = field(
        default_factory=lambda: collections.deque(maxlen=_HISTORY)
    )
    history_floor: int = 0
    #: Guards ``history`` and ``history_floor`` (written by the io and index-builder threads,
    #: read by the event loop).
    history_lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.history_floor = self.generation

    def counters(self, pid: Any, payload: dict[str, Any] | None) -> dict[str, Any]:
        """A point's payload as read from the engine, with its current access counters."""
        return self.access.overlay(_engine_key(pid), payload or {})

    def touch(self, ids: Iterable[str] | None) -> None:
        """Called before any change that can alter search results (on the io thread, or the
        index builder's): ``ids`` are the points it writes (None: not known)."""
        written = None if ids is None else frozenset(ids)
        with self.history_lock:
            self.generation = next(_GENERATIONS)
            if len(self.history) == self.history.maxlen:
                self.history_floor = self.history[0][0]
            self.history.append((self.generation, written))

    def wrote(self, points: int) -> None:
        """Called after a write of ``points`` points (on the io thread)."""
        if self.unindexed_bound is not None:
            self.unindexed_bound += points


class EdgeStore:
    """:class:`engram_server.ports.Store` on qdrant-edge shards under ``data_dir``."""

    def __init__(
        self,
        data_dir: Path,
        *,
        hnsw_threshold: int = 20_000,
        sync_writes: bool = False,
        background_hnsw: bool = False,
        segments: int = 0,
        neighbour_ef: int = 0,
        nearest_lists: int = 4096,
        quantization: str = "int8",
        disk_headroom_bytes: int = 0,
        disk_guard: DiskGuard | None = None,
    ) -> None:
        if quantization not in EDGE_QUANTIZATIONS:
            raise ValueError(
                f"unknown quantization {quantization!r} (one of {', '.join(EDGE_QUANTIZATIONS)})"
            )
        if hnsw_threshold < 0:
            raise ValueError("hnsw_threshold must be >= 0 (0 disables HNSW building)")
        if segments < 0:
            raise ValueError("segments must be >= 0 (0 = the engine's choice)")
        if neighbour_ef < 0:
            raise ValueError("neighbour_ef must be >= 0 (0 = the engine's default)")
        if nearest_lists < 0:
            raise ValueError("nearest_lists must be >= 0 (0 = off)")
        #: Nearest lists kept, over all collections (``candidates``); 0 = every search asks the graph.
        self._nearest = NearestBudget(nearest_lists)
        self._segments = segments
        #: HNSW beam width of ``search`` / ``search_batch`` (the gate's neighbour lookups).
        self._neighbour_ef = neighbour_ef
        #: Of the dense vectors of collections created from now on (see ``QUANTIZED``).
        self._quantization = quantization
        self._data_dir = Path(data_dir)
        self._root = self._data_dir / "collections"
        #: Refuses writes before they touch the engine while the volume is below its headroom
        #: (see ``diskguard``: the engine's memory-mapped files SIGBUS on a full volume).
        self.disk = disk_guard or DiskGuard(self._data_dir, disk_headroom_bytes)
        self._hnsw_threshold = hnsw_threshold
        self._sync_writes = sync_writes
        self._background_hnsw = background_hnsw
        self._cols: dict[str, _Collection] = {}
        self._io: concurrent.futures.ThreadPoolExecutor | None = None
        self._opt: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock_file: IO[bytes] | None = None

    # ------------------------------------------------------------------ plumbing

    async def _run(self, fn: Callable[[], T]) -> T:
        if self._io is None:
            raise StorageUnavailable("the edge store is not open")
        try:
            return await asyncio.wrap_future(self._io.submit(fn))
        except EngramError:
            raise
        except Exception as exc:
            raise StorageUnavailable(f"embedded storage failed: {exc}") from exc

    def _col(self, name: str) -> _Collection:
        col = self._cols.get(name)
        if col is None:
            raise CollectionNotFound(f"collection {name!r} does not exist", metadata={"collection": name})
        return col

    def _edge_config(self, spec: CollectionSpec, *, create: bool, quantize: bool = False) -> qe.EdgeConfig:
        dimension = spec.dimension
        kwargs: dict[str, Any] = {}
        if (create or quantize) and self._quantization == "int8":
            # (when an existing shard is opened, its own setting stays: None keeps it)
            kwargs["quantization_config"] = qe.ScalarQuantizationConfig(
                qe.ScalarType.Int8, quantile=0.99, always_ram=True
            )
        if spec.lexical is not None:
            kwargs["sparse_vectors"] = {LEXICAL_VECTOR: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)}
        if self._hnsw_threshold > 0:
            # The optimizer indexes a segment once its vectors take more than this many KB,
            # i.e. once it holds about hnsw_threshold points; below it search is brute force.
            kb = max(1, math.ceil(self._hnsw_threshold * dimension * 4 / 1024))
            kwargs["optimizers"] = qe.EdgeOptimizersConfig(
                indexing_threshold=kb, default_segment_number=self._segments or None
            )
            kwargs["hnsw_config"] = qe.HnswIndexConfig(m=16, ef_construct=100, full_scan_threshold=kb)
        else:
            kwargs["optimizers"] = qe.EdgeOptimizersConfig(  # indexing_threshold 0 = never index
                indexing_threshold=0, default_segment_number=self._segments or None
            )
        return qe.EdgeConfig(
            vectors=qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine),
            wal_enabled=True,
            **kwargs,
        )

    def _open_shard(
        self, path: Path, spec: CollectionSpec, *, create: bool, quantize: bool = False
    ) -> qe.EdgeShard:
        shard_path = str(path / _SHARD_DIR)
        try:
            if create:
                shard = qe.EdgeShard.create(shard_path, self._edge_config(spec, create=True))
            else:
                shard = qe.EdgeShard.load(
                    shard_path, self._edge_config(spec, create=False, quantize=quantize)
                )
        except Exception as exc:
            msg = str(exc)
            if "WouldBlock" in msg or "lock" in msg.lower():
                raise StorageUnavailable(
                    f"collection {spec.name!r} at {path} is in use by another process "
                    "(only one Engram server may open a data directory)"
                ) from exc
            raise StorageUnavailable(f"cannot open collection {spec.name!r} at {path}: {msg}") from exc
        return shard

    def _neighbour_params(self) -> qe.SearchParams:
        if self._neighbour_ef > 0:
            return qe.SearchParams(hnsw_ef=self._neighbour_ef, quantization=QUANTIZED)
        return DENSE_SEARCH_PARAMS

    def _durable(self, shard: qe.EdgeShard) -> None:
        if self._sync_writes:
            shard.flush()

    def _settle(self, col: _Collection, *, now: bool = False) -> None:
        """On the io thread, after writes (at most every :data:`_SETTLE_SECONDS`): give the
        collection's sparse vector chunks their real space now, while the guard sees room for it,
        rather than at the next start-up, when the engine fills them in unasked and a full volume
        would SIGBUS the process (see ``diskguard``)."""
        at = time.monotonic()
        if not self.disk.enabled or not self.disk.memory_backed:
            return  # on a disk filesystem a load reads holes without allocating them
        if not now and at - col.settled_at < _SETTLE_SECONDS:
            return
        col.settled_at = at
        for path, missing in sparse_files(col.path):
            if not self.disk.room(
                missing, what=f"allocating {missing // 1024} kB of collection {col.spec.name}"
            ):
                return
            try:
                allocate(path)
            except OSError as exc:
                log.warning("could not allocate %s: %s", path, exc)
                return

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

    def generation(self, collection: str) -> int | None:
        col = self._cols.get(collection)
        return None if col is None else col.generation

    def changed_since(self, collection: str, generation: int) -> frozenset[str] | None:
        col = self._cols.get(collection)
        if col is None:
            return None
        with col.history_lock:
            if generation < col.history_floor:
                return None
            history = list(col.history)
        out: set[str] = set()
        for gen, ids in reversed(history):
            if gen <= generation:
                break
            if ids is None:
                return None
            out |= ids
        return frozenset(out)

    # ------------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        if self._io is not None:
            return
        if not faulthandler.is_enabled():
            # The engine's memory-mapped files raise SIGBUS if the volume fills despite the disk
            # guard (e.g. another process took the last bytes between its check and a write):
            # at least the fault is reported, with the threads' stacks, on stderr.
            faulthandler.enable()
        self._io = worker(STORAGE_THREAD)
        self._opt = worker(OPTIMIZER_THREAD)
        try:
            await self._run(self._open_sync)
        except BaseException:
            await self._shutdown_executors()
            raise
        if not self._background_hnsw:
            # Build due indexes now, before the server takes traffic (the build holds the GIL).
            await self.wait_optimized()

    def _open_sync(self) -> None:
        self._root.mkdir(parents=True, exist_ok=True)
        lock_file = (self._data_dir / ".lock").open("a+b")
        try:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            lock_file.close()
            raise StorageUnavailable(
                f"data directory {self._data_dir} is in use by another process "
                "(only one Engram server may open a data directory)"
            ) from exc
        self._lock_file = lock_file
        # On a volume below the headroom, the engine's start-up writes (a new log segment, the
        # log's replay) would SIGBUS: the reserve file makes room for them (see ``diskguard``).
        self.disk.release_reserve_if_low()
        try:
            for path in sorted(p for p in self._root.iterdir() if p.is_dir()):
                if path.name.startswith("."):
                    continue  # a half-dropped or half-created collection
                spec_path = path / _SPEC_FILE
                try:
                    raw = spec_path.read_text(encoding="utf-8")
                except FileNotFoundError as exc:
                    raise StorageUnavailable(f"collection directory {path} has no {_SPEC_FILE}") from exc
                spec = spec_from_json(raw, where=str(spec_path))
                if spec.name != path.name:
                    raise StorageUnavailable(
                        f"corrupt collection spec at {spec_path}: names collection {spec.name!r}"
                    )
                col = _Collection(
                    spec,
                    path,
                    self._open_shard(path, spec, create=False),
                    nearest=NearestLists(self._nearest),
                    access=AccessLedger(path / ACCESS_LOG, sync=self._sync_writes),
                )
                self._cols[spec.name] = col
                self._maybe_optimize(col)
                self._io_submit(self._warm, col, None)
            if self.disk.room(what="start-up"):  # logs the state; makes the reserve when there is room
                for col in self._cols.values():
                    self._settle(col, now=True)
        except BaseException:
            self._close_sync()
            raise

    def _io_submit(self, fn: Callable[..., None], *args: Any) -> None:
        """Queue background work on the io thread (dropped when the store is closing)."""
        if self._io is not None:
            with contextlib.suppress(RuntimeError):  # (the executor is shutting down)
                self._io.submit(fn, *args)

    def _warm(self, col: _Collection, offset: Any) -> None:
        """On the io thread, after open: read one page of ranking fields into ``col.ranks`` and
        queue the next page, so searches never wait for more than a page (the fields of every
        point are known once done; until then, candidates read missing ones from the engine)."""
        if self._cols.get(col.spec.name) is not col:
            return  # closed or dropped meanwhile
        try:
            records, next_offset = col.shard.scroll(
                qe.ScrollRequest(
                    offset=offset,
                    limit=_SCROLL_BATCH,
                    filter=None,
                    with_payload=list(CANDIDATE_FIELDS),
                    with_vector=False,
                )
            )
            ranks = col.ranks
            for r in records:
                ranks[_engine_key(r.id)] = rank_fields(str(r.id), r.payload, col.spec.name)
        except Exception:
            log.exception("loading the ranking fields of collection %s failed", col.spec.name)
            return
        if next_offset is not None:
            self._io_submit(self._warm, col, next_offset)
        else:
            col.warm = True
            log.info(
                "ranking fields of collection %s loaded: %d points in %.1f s",
                col.spec.name,
                len(col.ranks),
                time.monotonic() - col.opened_at,
            )

    def _close_sync(self) -> None:
        for col in self._cols.values():
            try:
                col.shard.close()
            except Exception:
                log.exception("closing collection %s failed", col.spec.name)
            col.access.close()
        self._cols.clear()
        if self._lock_file is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None

    async def _shutdown_executors(self) -> None:
        for ex in (self._opt, self._io):
            if ex is not None:
                await asyncio.to_thread(ex.shutdown, wait=True)
        self._io = self._opt = None

    async def close(self) -> None:
        if self._io is None:
            return
        await self.wait_optimized()
        await self._run(self._close_sync)
        await self._shutdown_executors()

    # ------------------------------------------------------------------ collections

    async def create_collection(self, spec: CollectionSpec) -> None:
        validate_collection_name(spec.name)
        await self._run(lambda: self._create_sync(spec))

    def _create_sync(self, spec: CollectionSpec) -> None:
        if spec.name in self._cols:
            return
        self.disk.check(NEW_COLLECTION_BYTES if self.disk.memory_backed else 0, what="new collection")
        final = self._root / spec.name
        if final.exists():  # left behind by a crash between mkdir and rename; never loaded
            raise StorageUnavailable(f"{final} exists but holds no loadable collection; remove it")
        tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}.", dir=self._root))
        try:
            shard = self._open_shard(tmp, spec, create=True)
            try:
                for name, kind in PAYLOAD_INDEXES.items():
                    shard.update(qe.UpdateOperation.create_field_index(name, _INDEX_SCHEMA[kind]))
                shard.flush()
            finally:
                shard.close()
            _write_json_atomic(tmp / _SPEC_FILE, spec_to_json(spec))
            os.rename(tmp, final)
            _fsync_dir(self._root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._cols[spec.name] = _Collection(
            spec,
            final,
            self._open_shard(final, spec, create=False),
            warm=True,
            nearest=NearestLists(self._nearest),
            access=AccessLedger(final / ACCESS_LOG, sync=self._sync_writes),
        )

    async def get_collection(self, name: str) -> CollectionSpec | None:
        col = self._cols.get(name)
        return None if col is None else col.spec

    async def list_collections(self) -> list[CollectionSpec]:
        return sorted((c.spec for c in self._cols.values()), key=lambda s: s.name)

    async def drop_collection(self, name: str) -> int:
        col = self._cols.get(name)
        if col is None:
            return 0
        if col.optimizing is not None:
            await asyncio.wrap_future(col.optimizing)
        return await self._run(lambda: self._drop_sync(name))

    def _drop_sync(self, name: str) -> int:
        col = self._cols.pop(name, None)
        if col is None:
            return 0
        col.nearest.reset()
        count = col.shard.count(qe.CountRequest(exact=True))
        col.shard.close()
        col.access.close()
        # Rename first so a crash mid-delete never leaves a half collection that open() loads.
        trash = self._root / f".dropped.{name}.{os.getpid()}.{id(col)}"
        os.rename(col.path, trash)
        _fsync_dir(self._root)
        shutil.rmtree(trash, ignore_errors=True)
        return count

    # ------------------------------------------------------------------ points

    async def upsert(self, collection: str, points: Sequence[StoredPoint]) -> None:
        if not points:
            return

        def work() -> None:
            col = self._col(collection)
            self.disk.check()
            vectors = point_vectors(col.spec, points)
            ids = [point_id(p.record.id) for p in points]
            col.touch(ids)
            payloads = [record_to_payload(p.record) for p in points]
            ops = [
                qe.Point(pid, _edge_vector(col.spec, p, vec), payload)
                for pid, p, vec, payload in zip(ids, points, vectors, payloads, strict=True)
            ]
            written = False
            try:
                col.shard.update(qe.UpdateOperation.upsert_points(ops))
                written = True
            finally:  # (a failed update may have written some: forget rather than guess)
                for pid in ids:
                    col.ranks.pop(rank_key(pid), None)
                col.wrote(len(ops))
                col.nearest.changed(_changed(ids), [p.vector for p in points] if written else None)
            for pid, payload in zip(ids, payloads, strict=True):
                col.ranks[rank_key(pid)] = rank_fields(pid, payload, collection)
            col.access.forget(rank_key(pid) for pid in ids)  # the counters are the payload's now
            self._durable(col.shard)
            self._settle(col)
            if self._background_hnsw:
                self._maybe_optimize(col)
            else:
                self._note_unindexed(col)

        await self._run(work)

    async def retrieve(
        self, collection: str, ids: Sequence[str], *, with_vectors: bool = False
    ) -> list[StoredPoint]:
        def work() -> list[StoredPoint]:
            col = self._col(collection)
            wanted = canonical_ids(ids)
            if not wanted:
                return []
            records = col.shard.retrieve(list(wanted), True, with_vectors)
            return [
                StoredPoint(
                    record_from_payload(r.id, collection, col.counters(r.id, r.payload)),
                    as_vector(r.vector) if with_vectors and r.vector is not None else None,
                )
                for r in records
            ]

        return await self._run(work)

    async def search(
        self,
        collection: str,
        vector: Vector,
        limit: int,
        flt: StoreFilter,
        *,
        with_vectors: bool = False,
    ) -> list[ScoredPoint]:
        if limit <= 0:
            return []
        query: list[float] = vector.reshape(-1).tolist()
        return await self._run(
            lambda: self._nearest_records(self._col(collection), [query], limit, flt, with_vectors)[0]
        )

    async def search_batch(
        self, collection: str, vectors: Vector, limit: int, flt: StoreFilter
    ) -> list[list[ScoredPoint]]:
        rows: list[list[float]] = np.asarray(vectors, dtype=np.float64).tolist()
        if limit <= 0 or not rows:
            return [[] for _ in rows]
        return await self._run(lambda: self._nearest_records(self._col(collection), rows, limit, flt, False))

    def _nearest_records(
        self, col: _Collection, rows: list[list[float]], limit: int, flt: StoreFilter, with_vectors: bool
    ) -> list[list[ScoredPoint]]:
        """The nearest ``limit`` points matching ``flt`` to each query row, read in full (the write
        gate, locating a memory, reflection's copy check), as one planned batch.

        As for ``candidates``, liveness is decided from the ranking fields kept beside the engine
        rather than by the engine at every graph node it visits: it is asked for the ids and scores
        of a margin more nearest points under the user's part of the filter, the first ``limit``
        live ones are read in full (one read for the batch), and a row with too few live ones among
        them is asked again with the whole filter (measured at 100k, the gate's 8 nearest: 1.12 vs
        1.67 ms for one vector, 61.5 vs 83.0 ms for 64)."""
        params = self._neighbour_params()
        want_vector: list[str] | bool = [""] if with_vectors else False

        def whole(some: list[list[float]]) -> list[list[ScoredPoint]]:
            where = _edge_filter(filter_plan(flt))
            found = col.shard.query_batch(
                qe.QueryBatchRequest(
                    [
                        qe.QueryRequest(
                            limit=limit,
                            query=qe.Query.Nearest(row),
                            filter=where,
                            with_payload=True,
                            with_vector=want_vector,
                            params=params,
                        )
                        for row in some
                    ]
                )
            )
            return [_scored(col, hits, with_vectors=with_vectors) for hits in found]

        split = split_live(flt)
        if split is None:
            return whole(rows)
        user, live_at = split
        where = _edge_filter(filter_plan(user))
        asked = limit + max(_LIVENESS_MARGIN, limit // 4)
        found = col.shard.query_batch(
            qe.QueryBatchRequest(
                [
                    qe.QueryRequest(
                        limit=asked,
                        query=qe.Query.Nearest(row),
                        filter=where,
                        with_payload=False,
                        with_vector=False,
                        params=params,
                    )
                    for row in rows
                ]
            )
        )
        ranks = col.ranks
        engine_ids: dict[int, Any] = {}
        answers: list[list[tuple[int, float]]] = []
        for hits in found:
            pairs = []
            for h in hits:
                key = _engine_key(h.id)
                engine_ids[key] = h.id
                pairs.append((key, h.score))
            answers.append(pairs)
        _know_ranks(col, engine_ids)
        chosen: list[list[tuple[int, float]] | None] = []
        wanted: dict[int, Any] = {}
        for pairs in answers:
            live = [(key, score) for key, score in pairs if is_live(ranks[key], live_at)]
            if len(live) < limit and len(pairs) >= asked:
                chosen.append(None)  # more dead than the margin among the nearest: the engine filters
                continue
            chosen.append(live[:limit])
            wanted.update((key, engine_ids[key]) for key, _ in live[:limit])
        read = col.shard.retrieve(list(wanted.values()), True, with_vectors) if wanted else []
        records = {_engine_key(r.id): r for r in read}
        redo = [i for i, pairs in enumerate(chosen) if pairs is None]
        redone = dict(zip(redo, whole([rows[i] for i in redo]), strict=True)) if redo else {}
        out: list[list[ScoredPoint]] = []
        for i, kept in enumerate(chosen):
            if kept is None:
                out.append(redone[i])
                continue
            if any(key not in records for key, _ in kept):  # cannot happen (one thread)
                raise StorageUnavailable(f"a point in collection {col.spec.name!r} vanished during a query")
            out.append(
                _scored(col, [_Hit(records[key], score) for key, score in kept], with_vectors=with_vectors)
            )
        return out

    async def candidates(
        self,
        collection: str,
        vector: Vector,
        limit: int,
        flt: StoreFilter,
        *,
        sparse: SparseVector | None = None,
        lexical_limit: int | None = None,
        with_vectors: bool = False,
    ) -> Candidates:
        query: list[float] = vector.reshape(-1).tolist()
        want_vector: list[str] | bool = [""] if with_vectors else False

        def work() -> Candidates:
            col = self._col(collection)
            if limit <= 0:
                return CandidateBuilder(collection, with_vectors=with_vectors).build()
            edge_filter = _edge_filter(filter_plan(flt))
            # A search wants the live current points only (and those its user filters match).
            # The engine pays for a filter at every graph node it visits (measured at 100k:
            # top-100 2.3 ms with the liveness filter, 1.3 ms for an unfiltered top-125), while
            # the ranking fields kept beside it (``col.ranks``) tell liveness for free: ask for a
            # margin more nearest points under the user's filter alone (none, mostly), and keep
            # the first ``limit`` live ones. Exact whenever that many are live among them (every
            # other live point is farther); otherwise the whole filter runs in the engine.
            split = split_live(flt)
            post = split is not None
            live_at = split[1] if split is not None else None
            user_filter = split[0] if split is not None else flt
            where = _edge_filter(filter_plan(user_filter)) if split is not None else edge_filter
            dense_limit = limit + max(_LIVENESS_MARGIN, limit // 4) if post else limit

            def dense_request(n: int, where: qe.Filter | None) -> qe.QueryRequest:
                # Ids and scores only (each attribute read of an engine hit converts it anew:
                # read each once); the ranking fields come from ``col.ranks``.
                return qe.QueryRequest(
                    limit=n,
                    query=qe.Query.Nearest(query),
                    filter=where,
                    with_payload=False,
                    with_vector=want_vector,
                    params=DENSE_SEARCH_PARAMS,
                )

            # The nearest list of this vector (under this user filter) kept from an earlier search,
            # if any: patched with the points written since instead of searching the graph again
            # (see ``nearest``).
            nearest = col.nearest if post and not with_vectors and col.nearest.enabled else None
            # (a 128-bit digest of the vector: 16 bytes kept instead of its 1.5 kB)
            list_key = (hashlib.blake2b(vector.tobytes(), digest_size=16).digest(), dense_limit, user_filter)
            kept_list = nearest.get(list_key) if nearest is not None else None
            # The changed points that may enter the list (and those whose vector is not known).
            changed_ids = kept_list.to_ask(vector) if kept_list is not None else []
            requests = [] if kept_list is not None else [dense_request(dense_limit, where)]
            lexical_n = limit if lexical_limit is None else lexical_limit
            lexical = bool(sparse) and col.spec.lexical is not None and lexical_n > 0
            # The BM25 side the same way: the user filter only, a margin, dead ones dropped here.
            lexical_limit_asked = lexical_n + max(_LIVENESS_MARGIN, lexical_n // 4) if post else lexical_n

            def sparse_request(n: int, where: qe.Filter | None) -> qe.QueryRequest:
                assert sparse is not None
                return qe.QueryRequest(
                    limit=n,
                    query=qe.Query.Nearest(
                        qe.SparseVector(list(sparse.indices), list(sparse.values)), using=LEXICAL_VECTOR
                    ),
                    filter=where,
                    with_payload=False,
                    with_vector=False,
                )

            def by_ids_request(
                ids: list[Any], also: qe.Filter | None = None, above: float | None = None
            ) -> qe.QueryRequest:
                # The exact cosine of these points (those that exist, match ``also`` and score at
                # least ``above``).
                must: list[Any] = [qe.HasIdCondition(set(ids))]
                if also is not None:
                    must.extend(also.must or ())
                return qe.QueryRequest(
                    limit=len(ids),
                    query=qe.Query.Nearest(query),
                    filter=qe.Filter(must=must),
                    with_payload=False,
                    with_vector=want_vector,
                    score_threshold=above,
                    params=_EXACT_PARAMS,  # (a few points: their original vectors, not int8 codes)
                )

            if lexical:
                requests.append(sparse_request(lexical_limit_asked, where))
            if kept_list is not None and changed_ids:
                # Those that still match the user filter and may enter the list (score above its
                # floor: the engine drops the rest, however many points were written).
                floor = kept_list.entry.floor
                requests.append(by_ids_request(changed_ids, where, None if floor == -math.inf else floor))
            # One planned batch: the engine runs the dense and the sparse query together.
            results = iter(col.shard.query_batch(qe.QueryBatchRequest(requests)) if requests else [])
            dense_found = next(results) if kept_list is None else None
            lexical_found = next(results) if lexical else None
            changed_found = next(results) if changed_ids else None
            ranks = col.ranks

            def known(rows: list[Row]) -> list[Row]:
                """``rows``, once the ranking fields of each are in ``ranks``."""
                missing = [
                    uuid.UUID(int=k) if pid is None else pid for k, _, _, pid in rows if k not in ranks
                ]
                if missing:
                    for r in col.shard.retrieve(missing, list(CANDIDATE_FIELDS), False):
                        ranks[_engine_key(r.id)] = rank_fields(str(r.id), r.payload, collection)
                    for k, _, _, _ in rows:
                        if k not in ranks:  # deleted under us cannot happen (one thread)
                            raise StorageUnavailable(
                                f"a point in collection {collection!r} vanished during a query"
                            )
                return rows

            def hits(found: Sequence[Any]) -> list[Row]:
                """(rank key, score, vector, engine id) of each hit; its ranking fields are then in
                ``ranks``.
                Ids are read as ``.int`` (``str()`` of the engine's ``uuid.UUID`` costs more than
                a microsecond a hit); the canonical text id is the ranking fields' last one."""
                rows = []
                for h in found:
                    pid = h.id
                    rows.append((pid.int, h.score, h.vector if with_vectors else None, pid))
                return known(rows)

            def live_first(
                rows: list[Row], n: int, asked: int, keep: Callable[[int], bool]
            ) -> list[Row] | None:
                """The first ``n`` live rows of an unfiltered answer to ``asked`` (and any later
                live ones ``keep`` wants); None when the margin held too few live ones (more dead
                than the margin among the nearest: the engine must filter)."""
                assert live_at is not None
                live = [row for row in rows if is_live(ranks[row[0]], live_at)]
                if len(live) < n and len(rows) >= asked:
                    return None
                return [row for i, row in enumerate(live) if i < n or keep(row[0])]

            lexical_score: dict[int, float] = {}
            lexical_id: dict[int, Any] = {}  # the engine's id objects (cheaper to send back than text)
            if lexical:
                assert lexical_found is not None
                found_lexical = hits(lexical_found)
                if post:
                    kept = live_first(found_lexical, lexical_n, lexical_limit_asked, lambda _: False)
                    if kept is None:
                        kept = hits(col.shard.query(sparse_request(lexical_n, edge_filter)))
                    found_lexical = kept
                for k, score, _, pid in found_lexical:
                    if score > 0:
                        lexical_score[k] = score
                        lexical_id[k] = pid
            entry: NearestList | None = None
            how = "searched"
            if kept_list is not None:
                assert nearest is not None
                entry = kept_list.entry
                patched = (
                    patch(entry, dense_limit, kept_list.changed, hits(changed_found or []))
                    if kept_list.changed
                    else entry.rows()
                )
                if patched is None:
                    entry = None  # too few left (deletions): search anew
                    dense = hits(col.shard.query(dense_request(dense_limit, where)))
                else:
                    entry.seq = nearest.seq
                    dense = known(patched)
                    how = "patched" if kept_list.changed else "reused"
            else:
                assert dense_found is not None
                dense = hits(dense_found)
            if nearest is not None:
                _nearest_lists.add(1, {"engram.collection": collection, "engram.nearest_list": how})
                if entry is None:
                    entry = nearest.new(dense, dense_limit)
                    nearest.put(list_key, entry)
            if post:
                # (nearest live ones past the first ``limit`` stay when BM25 found them too:
                # their cosine is known)
                kept = live_first(dense, limit, dense_limit, lexical_score.__contains__)
                dense = kept if kept is not None else hits(col.shard.query(dense_request(limit, edge_filter)))
            if lexical:
                in_dense = {k for k, _, _, _ in dense}
                only_lexical = [k for k in lexical_score if k not in in_dense]
                if only_lexical:
                    # Their cosine, exactly, from the engine: a dense query restricted to these
                    # ids (cheaper than shipping their vectors to Python); all found: nothing
                    # writes between the queries (one thread). Kept with the nearest list: a
                    # point's cosine to this vector changes only when its vector does.
                    others = entry.others() if entry is not None else {}
                    extra = known([(k, others[k], None, None) for k in only_lexical if k in others])
                    ask = [lexical_id[k] for k in only_lexical if k not in others]
                    if ask:
                        fresh = hits(col.shard.query(by_ids_request(ask)))
                        if entry is not None:
                            if len(others) > 2 * lexical_limit_asked:
                                others.clear()
                            others.update((row[0], row[1]) for row in fresh)
                            entry.set_others(others)
                        extra += fresh
                    extra.sort(key=lambda row: -row[1])
                    dense = dense + extra
            fields = [ranks[k] for k, _, _, _ in dense]
            return candidate_columns(
                collection,
                [f[6] for f in fields],
                fields,
                [cosine for _, cosine, _, _ in dense],
                [lexical_score.get(k, 0.0) for k, _, _, _ in dense],
                vectors=[vec for _, _, vec, _ in dense] if with_vectors else None,
            )

        return await self._run(work)

    async def scroll(
        self, collection: str, flt: StoreFilter, limit: int, offset: str | None = None
    ) -> tuple[list[MemoryRecord], str | None]:
        if limit <= 0:
            raise ValueError("scroll limit must be positive")

        def work() -> tuple[list[MemoryRecord], str | None]:
            col = self._col(collection)
            start = canonical_offset(offset)
            records, next_offset = col.shard.scroll(
                qe.ScrollRequest(
                    offset=start,
                    limit=limit,
                    filter=_edge_filter(filter_plan(flt)),
                    with_payload=True,
                    with_vector=False,
                )
            )
            out = [record_from_payload(r.id, collection, col.counters(r.id, r.payload)) for r in records]
            return out, None if next_offset is None else str(next_offset)

        return await self._run(work)

    async def count(self, collection: str, flt: StoreFilter) -> int:
        def work() -> int:
            col = self._col(collection)
            return col.shard.count(qe.CountRequest(exact=True, filter=_edge_filter(filter_plan(flt))))

        return await self._run(work)

    async def delete(self, collection: str, ids: Sequence[str]) -> None:
        def work() -> None:
            col = self._col(collection)
            wanted = canonical_ids(ids)
            if wanted:
                self.disk.check(what="deletion")
                col.touch(wanted)
                for pid in wanted:
                    col.ranks.pop(rank_key(pid), None)
                deleted = False
                try:
                    col.shard.update(qe.UpdateOperation.delete_points(list(wanted)))
                    deleted = True
                finally:
                    col.nearest.changed(_changed(wanted), gone=deleted)
                col.access.forget(rank_key(pid) for pid in wanted)
                self._durable(col.shard)

        await self._run(work)

    async def delete_where(self, collection: str, flt: StoreFilter) -> int:
        def work() -> int:
            # Atomic: nothing else runs on the io thread between the count and the delete.
            col = self._col(collection)
            edge_filter = _edge_filter(filter_plan(flt))
            n = col.shard.count(qe.CountRequest(exact=True, filter=edge_filter))
            if not n:
                return 0
            self.disk.check(what="deletion")
            if n <= _LOGGED_DELETE_MAX:
                # By id, so that the change logs name the points that went: kept nearest lists
                # and cached records survive (the sweeper deletes a few expired memories at a time).
                gone = _ids_where(col.shard, edge_filter)
                col.touch([str(u) for u in gone])
                for u in gone:
                    col.ranks.pop(u.int, None)
                deleted = False
                try:
                    col.shard.update(qe.UpdateOperation.delete_points(list(gone)))
                    deleted = True
                finally:
                    col.nearest.changed([(u.int, u) for u in gone], gone=deleted)
                col.access.forget(u.int for u in gone)
                n = len(gone)
            else:
                col.touch(None)
                col.nearest.reset()  # (which points went is not known here)
                col.shard.update(
                    qe.UpdateOperation.delete_points_by_filter(edge_filter or qe.Filter(must=[]))
                )
            self._durable(col.shard)
            return n

        return await self._run(work)

    async def get_state(self, key: str) -> dict[str, Any] | None:
        validate_state_key(key)

        def work() -> dict[str, Any] | None:
            path = self._data_dir / _STATE_DIR / f"{key}.json"
            try:
                raw = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                return None
            try:
                data = json.loads(raw)
            except ValueError as exc:
                raise StorageUnavailable(f"corrupt state file {path}: {exc}") from exc
            if not isinstance(data, dict):
                raise StorageUnavailable(f"corrupt state file {path}: not an object")
            return data

        return await self._run(work)

    async def put_state(self, key: str, value: Mapping[str, Any]) -> None:
        validate_state_key(key)

        def work() -> None:
            self.disk.check()
            folder = self._data_dir / _STATE_DIR
            folder.mkdir(parents=True, exist_ok=True)
            _write_json_atomic(folder / f"{key}.json", value)

        await self._run(work)

    async def set_fields(self, collection: str, updates: Mapping[str, Mapping[str, Any]]) -> None:
        encoded = encode_updates(updates)

        def work() -> None:
            col = self._col(collection)
            if not encoded:
                return
            self.disk.check()
            if any(set(payload) - _UNRANKED_FIELDS for payload in encoded.values()):
                col.touch(encoded)
            for pid, payload in encoded.items():
                if not _UNRANKED_FIELDS.issuperset(payload):
                    col.ranks.pop(rank_key(pid), None)  # re-read from the engine when next a candidate
            wanted: list[int | uuid.UUID | str] = list(encoded)
            existing = {str(r.id) for r in col.shard.retrieve(wanted, False, False)}
            try:
                for pid, payload in encoded.items():
                    if pid in existing:  # missing ids are skipped, as in retrieve
                        col.shard.update(qe.UpdateOperation.set_payload([pid], payload))
            finally:  # (a moved point may leave an indexed segment)
                col.wrote(len(existing))
                # A field a user filter reads (e.g. the source type) may have changed: kept nearest
                # lists of filtered searches must look at these points again.
                col.nearest.changed(
                    _changed(
                        [pid for pid, payload in encoded.items() if not _UNRANKED_FIELDS.issuperset(payload)]
                    )
                )
            self._durable(col.shard)

        await self._run(work)

    async def add_access(
        self, collection: str, hits: Mapping[str, tuple[int, float]]
    ) -> dict[str, tuple[int, float]]:
        wanted = access_hits(hits)

        def work() -> dict[str, tuple[int, float]]:
            col = self._col(collection)
            if not wanted or not self.disk.room(what="access counters"):
                return {}  # below the headroom the counts of these hits are not kept
            ids: list[int | uuid.UUID | str] = list(wanted)
            counters: dict[str, tuple[int, float]] = {}
            # Counters are not ranking fields: neither the generation nor ``ranks`` change. They
            # go to the collection's access ledger, not to the engine (see ``access``).
            written: dict[int, tuple[int, float]] = {}
            for r in col.shard.retrieve(ids, list(ACCESS_FIELDS), False):
                pid = str(r.id)
                payload = access_update(col.counters(r.id, r.payload), *wanted[pid])
                if payload is not None:
                    counters[pid] = written[_engine_key(r.id)] = (
                        payload["access_count"],
                        payload["last_accessed_at"],
                    )
            col.access.set(written)
            return counters

        return await self._run(work)


# ---------------------------------------------------------------------- helpers


#: Quantizations of the dense vectors of new embedded collections (``ENGRAM_EDGE_QUANTIZATION``).
EDGE_QUANTIZATIONS = ("int8", "none")

#: Dense searches of int8-quantized segments: the graph is walked on the int8 codes for 1.5 times
#: the points asked, which are then rescored with the original vectors (so every score returned is
#: exact). Measured at 100k (150 real questions, top 125 against an exact search, interleaved):
#: recall 0.988 in 1.33 ms, against 0.973 in 2.18 ms for the plain graph; oversampling 2: 0.994 in
#: 1.64 ms, 3: 0.999 in 2.24 ms, none: 0.960 in 1.13 ms. No effect on segments without
#: quantization (recent points, small collections, collections made with it off).
QUANTIZED = qe.QuantizationSearchParams(rescore=True, oversampling=1.5)
DENSE_SEARCH_PARAMS = qe.SearchParams(quantization=QUANTIZED)
#: Queries restricted to a few ids: the original vectors (a score threshold applies to exact scores).
_EXACT_PARAMS = qe.SearchParams(quantization=qe.QuantizationSearchParams(ignore=True))


def _quantized(path: Path) -> bool:
    """Whether the collection at ``path`` quantizes its dense vectors (the engine's own record of
    its configuration; unreadable: False, and a compaction opens it with the setting again)."""
    try:
        config = json.loads((path / _SHARD_DIR / "edge_config.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(isinstance(config, dict) and config.get("quantization_config"))


def _changed(ids: Sequence[str]) -> list[tuple[int, uuid.UUID]]:
    """(rank key, engine id) of canonical ids, for :meth:`NearestLists.changed`."""
    out = []
    for pid in ids:
        u = uuid.UUID(pid)
        out.append((u.int, u))
    return out


def _ids_where(shard: qe.EdgeShard, where: qe.Filter | None) -> list[uuid.UUID]:
    """Every point id matching ``where``, as the engine's id objects."""
    out: list[uuid.UUID] = []
    offset: Any = None
    while True:
        records, offset = shard.scroll(
            qe.ScrollRequest(
                offset=offset, limit=_SCROLL_BATCH, filter=where, with_payload=False, with_vector=False
            )
        )
        out.extend(r.id if isinstance(r.id, uuid.UUID) else uuid.UUID(str(r.id)) for r in records)
        if offset is None:
            return out


class _Hit:
    """A point read in full with the score a query gave it (what ``_scored`` reads)."""

    __slots__ = ("id", "payload", "score", "vector")

    def __init__(self, record: Any, score: float) -> None:
        self.id, self.payload, self.vector, self.score = record.id, record.payload, record.vector, score


def _know_ranks(col: _Collection, engine_ids: Mapping[int, Any]) -> None:
    """Read the ranking fields of the points (rank key → engine id) not yet in ``col.ranks``
    (they are loaded in the background after open)."""
    ranks = col.ranks
    missing = [pid for key, pid in engine_ids.items() if key not in ranks]
    if missing:
        for r in col.shard.retrieve(missing, list(CANDIDATE_FIELDS), False):
            ranks[_engine_key(r.id)] = rank_fields(str(r.id), r.payload, col.spec.name)
        if any(key not in ranks for key in engine_ids):  # cannot happen (one thread)
            raise StorageUnavailable(f"a point in collection {col.spec.name!r} vanished during a query")


def _engine_key(pid: qe.PointId) -> int:
    """:func:`rank_key` of an id as the engine returns it (a ``uuid.UUID`` for every Engram point)."""
    return pid.int if isinstance(pid, uuid.UUID) else rank_key(str(pid))


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


def _scored(col: _Collection, hits: Sequence[Any], *, with_vectors: bool) -> list[ScoredPoint]:
    out = []
    for h in hits:
        payload = col.counters(h.id, h.payload)
        vector = h.vector if with_vectors else None
        out.append(
            ScoredPoint(
                record_from_payload(h.id, col.spec.name, payload),
                float(h.score),
                as_vector(vector) if vector is not None else None,
                script=str(payload.get("script") or ""),
            )
        )
    return out


def _edge_vector(spec: CollectionSpec, p: StoredPoint, dense: list[float]) -> qe.Vector:
    if spec.lexical is None:
        return dense
    named: dict[str, qe.NamedVector] = {"": dense}
    if p.sparse:
        named[LEXICAL_VECTOR] = qe.SparseVector(list(p.sparse.indices), list(p.sparse.values))
    return named


def _edge_condition(c: Condition) -> qe.FieldCondition | qe.IsEmptyCondition:
    if isinstance(c, MatchValue):
        return qe.FieldCondition(c.key, match=qe.MatchValue(c.value))
    if isinstance(c, MatchAny):
        return qe.FieldCondition(c.key, match=qe.MatchAny(list(c.values)))
    if isinstance(c, Range):
        return qe.FieldCondition(c.key, range=qe.RangeFloat(gte=c.gte, gt=c.gt, lte=c.lte, lt=c.lt))
    if isinstance(c, IsEmpty):
        return qe.IsEmptyCondition(c.key)
    raise TypeError(f"unknown condition {c!r}")


def _edge_filter(plan: FilterPlan) -> qe.Filter | None:
    if not plan.must:
        return None
    return qe.Filter(must=[_edge_condition(c) for c in plan.must])


def _write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """temp file in the same directory, fsync, rename over, fsync the directory."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
