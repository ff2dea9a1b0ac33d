"""Engine access: the store's shared state, the io thread every shard call runs on, shard
configuration, filters and ids in the engine's terms, and the generations of written points."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import itertools
import json
import logging
import math
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import qdrant_edge as qe

from engram_server.adapters.storage.access import AccessLedger
from engram_server.adapters.storage.diskguard import (
    DiskGuard,
    allocate,
    sparse_files,
)
from engram_server.adapters.storage.mapguard import MapGuard
from engram_server.adapters.storage.nearest import NearestBudget, NearestLists
from engram_server.adapters.storage.payload import (
    LEXICAL_VECTOR,
    Condition,
    FilterPlan,
    IsEmpty,
    MatchAny,
    MatchValue,
    Range,
    RankFields,
    rank_key,
)
from engram_server.domain.errors import CollectionNotFound, EngramError, StorageUnavailable
from engram_server.domain.model import (
    CollectionSpec,
)
from engram_server.domain.ranking import RescoreCue

log = logging.getLogger(__name__)

T = TypeVar("T")
_SHARD_DIR = "shard"
_SCROLL_BATCH = 1024


#: Sparse vector chunks are looked for at most this often while a collection is written.
_SETTLE_SECONDS = 5.0

#: Generations are unique across collections and their re-creations (see ``EdgeStore.generation``).
_GENERATIONS = itertools.count(1)

#: Generations whose written points each collection remembers (``EdgeStore.changed_since``).
_HISTORY = 512


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
    #: What rescoring reads of each point's text (its lead label, its question share), by the same
    #: key, computed when the point is written or loaded (``EdgeStore.rescore_cues``): a search
    #: rescores its best candidates without reading their text. Dropped with the ranking fields
    #: and whenever the text is set; a missing one is read from the engine when next asked.
    cues: dict[int, RescoreCue] = field(default_factory=dict)
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


# ---------------------------------------------------------------------- helpers


def _settle_reads(done: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    """On the loop: the answers of a batch of queued reads (``EdgeEngine._run_reads``)."""
    for fut, value, exc in done:
        if fut.cancelled():
            continue
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(value)


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


def _engine_key(pid: qe.PointId) -> int:
    """:func:`rank_key` of an id as the engine returns it (a ``uuid.UUID`` for every Engram point)."""
    return pid.int if isinstance(pid, uuid.UUID) else rank_key(str(pid))


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


class EdgeEngine:
    """Engine access: the store's state, its io thread, shard configuration and opening,
    durability, and the generations searches are cached by."""

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
        map_guard: MapGuard | None = None,
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
        #: Refuses a new collection when the process is near the kernel's limit of memory maps
        #: (see ``mapguard``: past it no shard can be created or opened, for any tenant).
        self.maps = map_guard or MapGuard()
        self._hnsw_threshold = hnsw_threshold
        self._sync_writes = sync_writes
        self._background_hnsw = background_hnsw
        self._cols: dict[str, _Collection] = {}
        self._io: concurrent.futures.ThreadPoolExecutor | None = None
        #: Held by whoever runs shard work: the io thread's jobs, or a read run on the event loop
        #: while the io thread is idle (``_read``). The io thread's jobs other than reads queued or
        #: running (``_queued``, under ``_queued_lock``): a read runs on the loop only when there
        #: are none (reads may overtake reads, never a write queued before them).
        self._busy = threading.Lock()
        self._queued = 0
        self._queued_lock = threading.Lock()
        #: Reads waiting for the io thread (``_read_queued``): one io job runs all that are waiting
        #: when it starts, and hands their answers back to the loop in one call.
        self._reads: list[tuple[Callable[[], Any], asyncio.Future[Any]]] = []
        self._reads_lock = threading.Lock()
        self._opt: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock_file: IO[bytes] | None = None

    # ------------------------------------------------------------------ plumbing

    async def _run(self, fn: Callable[[], T], *, read: bool = False) -> T:
        if self._io is None:
            raise StorageUnavailable("the edge store is not open")
        try:
            return await asyncio.wrap_future(self._submit(fn, read=read))
        except EngramError:
            raise
        except Exception as exc:
            raise StorageUnavailable(f"embedded storage failed: {exc}") from exc

    async def _read(self, fn: Callable[[], T]) -> T:
        """A short read of a search (candidates, the winners' records, a gate's neighbours): run
        here, on the event loop, when the io thread is idle and no write (any other job) is
        queued — no thread hop there and back (the engine holds the GIL while it works, so the
        loop could not run meanwhile anyway) — otherwise queued behind that work (``_run``)."""
        if self._io is None:
            raise StorageUnavailable("the edge store is not open")
        if self._queued or not self._busy.acquire(blocking=False):
            return await self._read_queued(fn)
        try:
            return fn()
        except EngramError:
            raise
        except Exception as exc:
            raise StorageUnavailable(f"embedded storage failed: {exc}") from exc
        finally:
            self._busy.release()

    async def _read_queued(self, fn: Callable[[], T]) -> T:
        """``fn`` on the io thread, with the other reads waiting there: concurrent searches share
        one hop there and back (``_run_reads``)."""
        if self._io is None:
            raise StorageUnavailable("the edge store is not open")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        with self._reads_lock:
            self._reads.append((fn, fut))
            first = len(self._reads) == 1
        if first:
            self._submit(self._run_reads, loop, read=True)
        try:
            return await fut
        except EngramError:
            raise
        except Exception as exc:
            raise StorageUnavailable(f"embedded storage failed: {exc}") from exc

    def _run_reads(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the io thread: every read waiting now, one after the other; their answers go back
        to the loop in one call."""
        with self._reads_lock:
            batch, self._reads = self._reads, []
        done: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
        for fn, fut in batch:
            try:
                done.append((fut, fn(), None))
            except BaseException as exc:  # (answered, never lost: the caller awaits it)
                done.append((fut, None, exc))
        loop.call_soon_threadsafe(_settle_reads, done)

    def _submit(self, fn: Callable[..., T], *args: Any, read: bool = False) -> concurrent.futures.Future[T]:
        """Queue ``fn(*args)`` on the io thread (counted in ``_queued`` until it has run, unless
        it is a ``read``)."""
        assert self._io is not None
        if read:
            return self._io.submit(self._read_job, fn, *args)
        with self._queued_lock:
            self._queued += 1
        try:
            return self._io.submit(self._job, fn, *args)
        except BaseException:
            with self._queued_lock:
                self._queued -= 1
            raise

    def _job(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            with self._busy:
                return fn(*args)
        finally:
            with self._queued_lock:
                self._queued -= 1

    def _read_job(self, fn: Callable[..., T], *args: Any) -> T:
        with self._busy:
            return fn(*args)

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
