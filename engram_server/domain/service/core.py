"""What every use case shares: the service's state, collection specs and locks, embedding,
writing points, filters and background tasks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections import Counter, OrderedDict
from collections.abc import Coroutine, Sequence
from dataclasses import replace
from typing import Any, Protocol

from opentelemetry import metrics, trace
from opentelemetry.trace import Span

from engram_server import telemetry
from engram_server.domain.calibration import CROSS_SCRIPT_OFFSET, Calibration
from engram_server.domain.clock import Clock
from engram_server.domain.context import TopicEntry, slot_state_key
from engram_server.domain.deadline import ensure_time_left
from engram_server.domain.errors import (
    CollectionInTrash,
    CollectionLimit,
    EmbeddingMismatch,
    EngramError,
)
from engram_server.domain.model import (
    CollectionSpec,
    MemoryRecord,
    ScoredPoint,
    SparseVector,
    StoredPoint,
    StoreFilter,
    Vector,
)
from engram_server.domain.service.commands import Policy, SearchFilter, _Pool
from engram_server.domain.sessions import SessionLedger
from engram_server.domain.topics import topic_state_key
from engram_server.domain.validation import (
    Violations,
    check_collection,
    check_session_id,
    valid_collection_name,
)
from engram_server.ports import Embedder, LexicalEncoder, Llm, Reranker, Store, Tokenizer


class TopicSource(Protocol):
    """What the context pack needs of the topic index: its topics over some collections."""

    async def context_topics(self, collections: Sequence[str]) -> list[TopicEntry]:
        """The topics of these collections, largest first (ties: by id)."""
        ...

    def forget(self, collection: str) -> None:
        """Drop what is held in memory for a collection that was dropped."""
        ...


log = logging.getLogger(__name__)

_trash_gave_way = metrics.get_meter("engram_server.domain").create_counter(
    "engram.collections.purged_for_room",
    unit="{collection}",
    description="Trashed collections purged for good before their retention passed, to make room "
    "for a new collection under ENGRAM_MAX_COLLECTIONS.",
)

# Telemetry through the OpenTelemetry API only: no-op objects unless the server installed an SDK.
_tracer = trace.get_tracer("engram_server.domain")


def _query_span(collection: str, limit: int, *, lexical: bool) -> contextlib.AbstractContextManager[Span]:
    """The ``engram.storage.query`` client span of one storage query."""
    return telemetry.span(
        _tracer,
        "engram.storage.query",
        kind=trace.SpanKind.CLIENT,
        attributes={
            "db.system.name": "qdrant",
            "db.operation.name": "query",
            "db.collection.name": collection,
            "engram.candidates": limit,
            "engram.lexical": lexical,
        },
    )


def stored_point(record: MemoryRecord, vector: Vector | None) -> StoredPoint:
    """The point a record is written as: the one place every write path (add, update,
    reflection) builds the vectors stored with a memory."""
    return StoredPoint(record, vector)


class ServiceCore:
    """The state and helpers every use case shares."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        clock: Clock,
        calibration: Calibration,
        policy: Policy | None = None,
        *,
        lexical: LexicalEncoder | None = None,
        tokenizer: Tokenizer | None = None,
        reranker: Reranker | None = None,
    ) -> None:
        self._store = store
        self._embedder = embedder
        self._lexical = lexical
        self._cross_script_offset = CROSS_SCRIPT_OFFSET.get(embedder.model_id, {})
        # (collection, query, limit, filter, lexical, vectors) -> (generation, fetched at,
        # expires at, candidates); see _candidates.
        self._candidate_cache: OrderedDict[tuple[Any, ...], tuple[int, float, float, _Pool]] = OrderedDict()
        self._clock = clock
        self._cal = calibration
        self.policy = policy or Policy()
        self._specs: dict[str, CollectionSpec] = {}
        #: The per-collection write locks, held only while in use (a weak map: a lock nobody
        #: holds or waits for goes, so names that never became collections leave nothing behind).
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        #: Serialises creating collections, so that the limit (``Policy.max_collections``) holds.
        self._create_lock = asyncio.Lock()
        self._background: set[asyncio.Task[None]] = set()
        #: collection -> memory id -> [searches that returned it, latest time], not yet written.
        self._pending_access: dict[str, dict[str, list[float]]] = {}
        # Full records of recent search results: (collection, id) -> (generation, record). Valid
        # while the store does not report the point written since that generation and its access
        # counters were not written (the flush drops their entries). A read that overlaps a write
        # (a new generation or access epoch meanwhile) is not kept.
        self._record_cache: OrderedDict[tuple[str, str], tuple[int, MemoryRecord]] = OrderedDict()
        #: BM25 query vectors of recent query texts, LRU-bounded (``searching._Query.sparse``): a
        #: question asked again is not segmented and stemmed again (as its embedding is cached).
        self._sparse_cache: OrderedDict[str, SparseVector] = OrderedDict()
        self._access_epoch: dict[str, int] = {}
        self._access_flush_scheduled = False
        self._flush_now = asyncio.Event()
        #: collection -> time of the last write (add or update), for activity-driven reflection.
        self.last_write_at: dict[str, float] = {}
        #: The sessions each agent had (GetContext's "last session").
        self.sessions = SessionLedger(store)
        #: Counts tokens for the context pack and slots (set by the app; None: no pack).
        self.tokenizer: Tokenizer | None = tokenizer
        #: Reorders an English query's best results (set by the app; None: no reranking).
        self.reranker: Reranker | None = reranker
        #: Summarises overflowing slots when set (else they are truncated).
        self.llm: Llm | None = None
        #: The topic index the pack's topics section shows (set by the topic index; None: empty).
        self.topic_source: TopicSource | None = None
        #: Tokens a slot may hold.
        self.slot_capacity_tokens = 200
        #: collection -> (generation, valid until, trigger name counts) for the context pack.
        self._trigger_cache: dict[str, tuple[int, float, Counter[str]]] = {}
        #: The LLM that judges contradictions the rules cannot decide (None: rules only).
        self.contradiction_llm: Llm | None = None
        #: The LLM that judges restatements the write gate's rules leave undecided (None: rules only).
        self.gate_llm: Llm | None = None

    def now(self) -> float:
        return self._clock.now()

    # Accessors for sibling use-cases (reflection) that work on the same collections.
    @property
    def store(self) -> Store:
        return self._store

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    @property
    def calibration(self) -> Calibration:
        return self._cal

    def lock(self, collection: str) -> asyncio.Lock:
        """The per-collection write lock (gate + write, update, delete are atomic under it)."""
        return self._lock(collection)

    async def existing_spec(self, name: str) -> CollectionSpec | None:
        """The collection's spec if it exists (EmbeddingMismatch if built with another model)."""
        return await self._existing(name)

    async def ensure_collection(self, name: str) -> CollectionSpec:
        return await self._ensure(name)

    # ------------------------------------------------------------ collections

    def _lock(self, collection: str) -> asyncio.Lock:
        lock = self._locks.get(collection)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[collection] = lock
        return lock

    def _resolve(self, v: Violations, fieldname: str, collection: str) -> str:
        name = collection or self.policy.default_collection
        check_collection(v, fieldname, name)
        return name

    async def _resolve_held(self, v: Violations, fieldname: str, collection: str) -> str:
        """As :meth:`_resolve`, but a name today's rules refuse is accepted while the store holds
        that collection (an older release accepted ``"bob\\n"``): what a user has, they can delete,
        list in the trash, restore and purge."""
        name = collection or self.policy.default_collection
        if not valid_collection_name(name) and await self._store.get_collection(name) is not None:
            return name
        check_collection(v, fieldname, name)
        return name

    def _check_spec(self, spec: CollectionSpec) -> None:
        if spec.embedding_model != self._embedder.model_id or spec.dimension != self._embedder.dimension:
            raise EmbeddingMismatch(
                f"collection {spec.name!r} was built with {spec.embedding_model} ({spec.dimension} dims) "
                f"but the server is configured with {self._embedder.model_id} "
                f"({self._embedder.dimension} dims); refusing to mix embeddings",
                metadata={
                    "collection": spec.name,
                    "collection_model": spec.embedding_model,
                    "collection_dimension": str(spec.dimension),
                    "configured_model": self._embedder.model_id,
                    "configured_dimension": str(self._embedder.dimension),
                },
            )

    async def _existing(self, name: str) -> CollectionSpec | None:
        spec = self._specs.get(name)
        if spec is None:
            spec = await self._store.get_collection(name)
            if spec is None:
                return None
            self._specs[name] = spec
        if spec.trashed_at is not None:
            raise self._in_trash(spec)
        self._check_spec(spec)
        return spec

    def purge_at(self, trashed_at: float, valid_until: float | None = None) -> float:
        """When something trashed at ``trashed_at`` is purged for good (a memory's expiry can come
        first)."""
        at = trashed_at + self.policy.trash_retention_seconds
        return at if valid_until is None else min(at, valid_until)

    def _in_trash(self, spec: CollectionSpec) -> CollectionInTrash:
        assert spec.trashed_at is not None
        return CollectionInTrash(
            f"collection {spec.name!r} is in the trash: RestoreCollection puts it back, "
            "PurgeTrash with purge_collection deletes it for good",
            metadata={"collection": spec.name, "purge_at": f"{self.purge_at(spec.trashed_at):.0f}"},
        )

    async def _ensure(self, name: str) -> CollectionSpec:
        spec = await self._existing(name)
        if spec is not None:
            return spec
        async with self._lock(name):
            spec = await self._existing(name)
            if spec is None:
                async with self._create_lock:
                    await self._check_collection_room(name)
                    spec = CollectionSpec(
                        name=name,
                        embedding_model=self._embedder.model_id,
                        dimension=self._embedder.dimension,
                        created_at=self._clock.now(),
                        lexical=self._lexical.encoder_id if self._lexical is not None else None,
                    )
                    while True:
                        try:
                            await self._store.create_collection(spec)
                            break
                        except CollectionLimit:  # the store's own bound (the process's memory maps)
                            specs = await self._store.list_collections()
                            if not await self._purge_oldest_trashed(name, specs):
                                raise
                self._specs[name] = spec
            return spec

    async def _check_collection_room(self, name: str) -> None:
        """Make room for one more collection under ``Policy.max_collections`` (live and trashed
        collections count: each holds a shard until it is purged): the trash gives way
        (:meth:`_purge_oldest_trashed`); raise :class:`CollectionLimit` when the live collections
        alone fill the limit. (Called under ``_create_lock``.)"""
        limit = self.policy.max_collections
        if limit <= 0:
            return
        specs = await self._store.list_collections()
        while len(specs) >= limit and await self._purge_oldest_trashed(name, specs):
            specs = await self._store.list_collections()
        if len(specs) < limit:
            return
        trashed = sum(1 for s in specs if s.trashed_at is not None)
        raise CollectionLimit(
            f"collection {name!r} was not created: the server holds {len(specs)} collections, its "
            f"limit (ENGRAM_MAX_COLLECTIONS={limit}). Delete collections no longer needed "
            "(DeleteCollection; the trash gives way to new collections), or ask an operator to "
            "raise ENGRAM_MAX_COLLECTIONS",
            metadata={
                "collection": name,
                "limit": str(limit),
                "count": str(len(specs)),
                "trashed": str(trashed),
            },
        )

    async def _purge_oldest_trashed(self, name: str, specs: list[CollectionSpec]) -> bool:
        """Purge for good the collection longest in the trash among ``specs``, to make room for
        new collection ``name``: False when the trash is empty. A trashed collection is a
        deletion's grace period, not a reservation: it gives way before a new collection is
        refused. (Called under ``_create_lock``.)"""
        trash = sorted((s for s in specs if s.trashed_at is not None), key=lambda s: (s.trashed_at, s.name))
        for oldest in trash:
            async with self._lock(oldest.name):
                current = await self._store.get_collection(oldest.name)
                if current is None or current.trashed_at is None:  # (purged or restored meanwhile)
                    continue
                count = await self._drop_for_good(oldest.name)
            _trash_gave_way.add(1)
            log.warning(
                "collection %r was purged from the trash (trashed at %.0f, %d memories) to make room "
                "for new collection %r",
                oldest.name,
                current.trashed_at,
                count,
                name,
            )
            return True
        return False

    async def _drop_for_good(self, name: str) -> int:
        """Drop collection ``name`` and what is kept beside it (under its lock): how many memories
        it held."""
        count = await self._store.drop_collection(name)
        self._forget_collection(name)
        await self._forget_collection_state(name)
        return count

    async def _forget_collection_state(self, name: str) -> None:
        """Empty what is kept beside a dropped collection's points — its slots and its topic
        index's ids and names — so that a new collection of the same name starts without them.
        (A collection in the trash keeps both: RestoreCollection brings them back with it.)"""
        if self.topic_source is not None:
            self.topic_source.forget(name)
        for key in (slot_state_key(name), topic_state_key(name)):
            try:
                if await self._store.get_state(key) is not None:
                    await self._store.put_state(key, {})
            except EngramError as exc:  # (logged; the next drop of that name tries again)
                log.warning("could not clear the state %s of the dropped collection %s: %s", key, name, exc)

    def _forget_collection(self, name: str) -> None:
        """Drop what the service keeps in memory for a collection that was dropped for good."""
        self._specs.pop(name, None)
        self.last_write_at.pop(name, None)
        self._trigger_cache.pop(name, None)

    async def _embed(self, texts: list[str], *, query: bool = False) -> Vector:
        """Embed through the port inside an ``engram.embed`` span (the batcher adds the batch size)."""
        with telemetry.span(
            _tracer,
            "engram.embed",
            attributes={
                "gen_ai.request.model": self._embedder.model_id,
                "engram.embedding.kind": "query" if query else "document",
                "engram.embedding.texts": len(texts),
            },
        ):
            if query:
                return await self._embedder.embed_queries(texts)
            return await self._embedder.embed_documents(texts)

    async def _query(
        self,
        collection: str,
        vector: Vector,
        limit: int,
        flt: StoreFilter,
    ) -> list[ScoredPoint]:
        with _query_span(collection, limit, lexical=False) as span:
            hits = await self._store.search(collection, vector, limit, flt)
            span.set_attribute("db.response.returned_rows", len(hits))
            return hits

    async def _upsert(self, collection: str, points: Sequence[StoredPoint]) -> None:
        with _tracer.start_as_current_span(
            "engram.storage.upsert",
            kind=trace.SpanKind.CLIENT,
            attributes={
                "db.system.name": "qdrant",
                "db.operation.name": "upsert",
                "db.collection.name": collection,
                "db.operation.batch.size": len(points),
            },
        ):
            spec = self._specs.get(collection) or await self._store.get_collection(collection)
            lexical = self._lexical
            if lexical is not None and self._uses_lexical(spec):
                points = [
                    p
                    if p.sparse is not None
                    else replace(p, sparse=lexical.encode_document(p.record.content))
                    for p in points
                ]
            ensure_time_left()
            await self._store.upsert(collection, points)

    async def write_points(self, collection: str, points: Sequence[StoredPoint]) -> None:
        """Write points as the use-cases do (lexical vectors added, traced, deadline checked).

        For sibling use-cases (reflection); the caller holds the collection's lock.
        """
        await self._upsert(collection, points)

    def _uses_lexical(self, spec: CollectionSpec | None) -> bool:
        """Whether a collection is searched (and written) with lexical vectors by this server."""
        return spec is not None and self._lexical is not None and spec.lexical == self._lexical.encoder_id

    def _check_filter(self, v: Violations, prefix: str, f: SearchFilter) -> StoreFilter:
        if f.min_importance and not 1 <= f.min_importance <= 10:
            v.add(f"{prefix}.min_importance", "must be 0 (no minimum) or between 1 and 10")
        if (
            f.created_after is not None
            and f.created_before is not None
            and f.created_after >= f.created_before
        ):
            v.add(f"{prefix}.created_before", "must be after created_after")
        for i, tag in enumerate(f.tags_any):
            if not tag.strip():
                v.add(f"{prefix}.tags_any[{i}]", "tags must not be empty")
        for name, values in (("session_ids", f.session_ids), ("agent_ids", f.agent_ids)):
            for i, value in enumerate(values):
                if not value:
                    v.add(f"{prefix}.{name}[{i}]", "must not be empty")
                else:
                    check_session_id(v, f"{prefix}.{name}[{i}]", value)
        return StoreFilter(
            types=tuple(dict.fromkeys(f.types)),
            tags_any=tuple(dict.fromkeys(t.strip() for t in f.tags_any)),
            created_after=f.created_after,
            created_before=f.created_before,
            min_importance=f.min_importance or None,
            source_types=tuple(dict.fromkeys(f.source_types)),
            session_ids=tuple(dict.fromkeys(f.session_ids)),
            agent_ids=tuple(dict.fromkeys(f.agent_ids)),
        )

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("background task failed: %s", task.exception())

    async def drain(self) -> None:
        """Finish background work now (pending access counters are written at once)."""
        self._flush_now.set()
        try:
            while self._background:
                await asyncio.gather(*list(self._background), return_exceptions=True)
        finally:
            self._flush_now.clear()
