"""The use-cases: add (with the write gate), search (fusion ranking), update (versioned),
delete (protected), get, list, collections, and the expiry sweep.

Pure orchestration over the ports: no gRPC, no storage engine, no model library.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
import math
import unicodedata
import uuid
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Final, TypeVar

import numpy as np
import numpy.typing as npt
from opentelemetry import metrics, trace
from opentelemetry.trace import Span

from engram_server.domain.calibration import CROSS_SCRIPT_OFFSET, Calibration
from engram_server.domain.clock import Clock
from engram_server.domain.deadline import ensure_time_left
from engram_server.domain.errors import (
    AmbiguousMatch,
    CollectionNotFound,
    EmbeddingMismatch,
    FieldViolation,
    IdempotencyConflict,
    InvalidArgument,
    MemoryNotFound,
    MemorySuperseded,
    NoMatch,
    ProtectedMemory,
    StorageFull,
    ThresholdTooLow,
)
from engram_server.domain.model import (
    DEFAULT_COLLECTION,
    NEVER,
    PROTECTED_TYPES,
    Candidates,
    CollectionSpec,
    MemoryRecord,
    MemoryType,
    ScoredPoint,
    Source,
    SourceType,
    SparseVector,
    StoredPoint,
    StoreFilter,
    Vector,
)
from engram_server.domain.ranking import (
    Evidence,
    HybridParams,
    Score,
    Weights,
    decay_array,
    evidence,
    fuse_array,
    mmr_order,
    recency_array,
)
from engram_server.domain.specifics import Conflict, conflicts, same_words
from engram_server.domain.text import cross_script, lexically_blind, script_of, word_scripts
from engram_server.domain.ttl import compute_valid_until
from engram_server.domain.validation import (
    Limits,
    Violations,
    check_collection,
    check_content,
    check_importance,
    check_metadata,
    check_request_id,
    check_unit_interval,
    is_blank,
    normalise_tags,
    valid_collection_name,
)
from engram_server.ports import Embedder, LexicalEncoder, Store

log = logging.getLogger(__name__)

# Telemetry through the OpenTelemetry API only: no-op objects unless the server installed an SDK.
_tracer = trace.get_tracer("engram_server.domain")
T = TypeVar("T")

_meter = metrics.get_meter("engram_server.domain")
_candidate_cache = _meter.create_counter(
    "engram.search.candidate_cache",
    unit="{lookup}",
    description="Search candidate lists reused (hit) or fetched (miss), per collection.",
)
_gate_outcomes = _meter.create_counter(
    "engram.gate.outcomes",
    unit="{memory}",
    description="Write-gate decisions, by collection and outcome (created, duplicate, near_duplicate, "
    "allowed_duplicate).",
)
_swept = _meter.create_counter(
    "engram.sweeper.deleted",
    unit="{memory}",
    description="Expired memories (and expired history versions) hard-deleted by the sweeper.",
)

MAX_PROVENANCE_HISTORY = 8
#: Most field violations one refused AddMemories lists (the rest are counted): the details
#: travel in the trailers, which gRPC caps at a few kilobytes.
MAX_LISTED_VIOLATIONS = 10


@dataclass(frozen=True, slots=True)
class Policy:
    """Tunable policy, on the calibrated similarity scale."""

    dedup_threshold: float = 0.92
    near_duplicate_threshold: float = 0.70
    #: Compare specifics (numbers, dates, ids, names, negation) before refusing a duplicate.
    check_specifics: bool = True
    #: With check_specifics: a pair at or above this calibrated similarity (the scale's
    #: "restatement" level) with the same content words and specifics is a duplicate too.
    restatement_threshold: float = 0.82
    locate_min_threshold: float = 0.85
    delete_single_min_threshold: float = 0.70
    gate_candidates: int = 8
    max_near_duplicates: int = 5
    weights: Weights = field(default_factory=Weights)
    mmr_lambda: float = 0.5
    candidate_factor: int = 3
    min_candidates: int = 100
    min_lexical_candidates: int = 50
    search_cache_entries: int = 256
    access_flush_seconds: float = 1.0
    hybrid: HybridParams = field(default_factory=HybridParams)
    ambiguity_margin: float = 0.02
    default_collection: str = DEFAULT_COLLECTION
    limits: Limits = field(default_factory=Limits)


# ---------------------------------------------------------------- commands and results


@dataclass(frozen=True, slots=True)
class AddCommand:
    content: str
    collection: str = ""
    type: MemoryType = MemoryType.EVENT
    importance: int | None = None
    tags: tuple[str, ...] = ()
    source: Source = Source.AGENT
    source_type: SourceType = SourceType.UNKNOWN
    metadata: Mapping[str, str] = field(default_factory=dict)
    created_at: float | None = None
    valid_until: float | None = None
    request_id: str = ""
    #: Write even when the gate finds a duplicate (the result names it among the near duplicates).
    allow_duplicate: bool = False


class AddOutcome(StrEnum):
    CREATED = "created"
    DUPLICATE = "duplicate"


class GateReason(StrEnum):
    """Why the write gate answered as it did when the similarity alone would have said otherwise."""

    NONE = ""
    #: Above the duplicate threshold, but the specifics (numbers, ids, dates, names, negation) differ:
    #: a different fact, written and reported as a near duplicate.
    CONFLICTING_SPECIFICS = "conflicting_specifics"
    #: A duplicate exists, but the caller asked to write anyway (``allow_duplicate``).
    ALLOW_DUPLICATE = "allow_duplicate"
    #: DUPLICATE below the duplicate threshold: at least a restatement (``restatement_threshold``),
    #: with the same content words and the same specifics (the same sentence reordered).
    SAME_WORDS = "same_words"


@dataclass(frozen=True, slots=True)
class Similar:
    record: MemoryRecord
    similarity: float
    #: For a memory above the duplicate threshold that was not treated as a duplicate: why.
    reason: GateReason = GateReason.NONE
    #: For CONFLICTING_SPECIFICS: the specifics that differ (existing = this memory's values).
    conflicts: tuple[Conflict, ...] = ()


@dataclass(frozen=True, slots=True)
class AddResult:
    memory: MemoryRecord
    outcome: AddOutcome
    duplicate_similarity: float = 0.0
    near_duplicates: tuple[Similar, ...] = ()
    replayed: bool = False
    #: For a DUPLICATE of a memory an earlier item of the same batch created: that item's index.
    duplicate_of: int | None = None
    #: CREATED although a memory was above the duplicate threshold: why (see :class:`GateReason`).
    reason: GateReason = GateReason.NONE


@dataclass(frozen=True, slots=True)
class _AddItem:
    """One validated add, with its defaults applied."""

    cmd: AddCommand
    importance: int
    tags: tuple[str, ...]
    created_at: float
    request_hash: str | None


@dataclass(frozen=True, slots=True)
class SearchFilter:
    types: tuple[MemoryType, ...] = ()
    tags_any: tuple[str, ...] = ()
    created_after: float | None = None
    created_before: float | None = None
    min_importance: int = 0
    source_types: tuple[SourceType, ...] = ()


@dataclass(frozen=True, slots=True)
class SearchQuery:
    query: str
    #: The collections to search; empty: every existing collection ``readable`` allows.
    collections: tuple[str, ...] = ()
    limit: int = 0
    filter: SearchFilter = field(default_factory=SearchFilter)
    weights: Weights | None = None
    diversify: bool = False
    mmr_lambda: float | None = None
    min_relevance: float = 0.0
    #: Which collections the caller may read, for a search that names none (None: all of them).
    readable: Callable[[str], bool] | None = None


@dataclass(frozen=True, slots=True)
class SearchHit:
    memory: MemoryRecord
    score: Score


class _Query:
    """A search's query: its text, script, and vectors — computed once, and only if a collection's
    candidates are not cached."""

    __slots__ = ("_dense", "_sparse", "_svc", "cached", "script", "text", "word_scripts")

    def __init__(self, svc: MemoryService, text: str) -> None:
        self._svc = svc
        self.text = text
        self.script = script_of(text)
        self.word_scripts = word_scripts(text)
        self.cached = 0  # collections whose candidates came from the cache
        self._dense: Vector | None = None
        self._sparse: tuple[SparseVector | None] | None = None

    async def dense(self) -> Vector:
        if self._dense is None:
            self._dense = (await self._svc._embed([self.text], query=True))[0]
        return self._dense

    def sparse(self) -> SparseVector | None:
        if self._sparse is None:
            lexical = self._svc._lexical
            self._sparse = (lexical.encode_query(self.text) if lexical is not None else None,)
        return self._sparse[0]


@dataclass(frozen=True, slots=True, eq=False)
class _Pool:
    """One collection's candidates for one query, with what ranking needs that does not depend on
    the time of the search (cached with the candidates)."""

    found: Candidates
    evidence: Evidence
    decay: npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class _Ranked:
    """A ranked search candidate: where it lives, its score, its vector (for MMR) if fetched."""

    collection: str
    id: str
    score: Score
    vector: Vector | None


@dataclass(frozen=True, slots=True)
class Locator:
    content: str
    threshold: float = 0.0


@dataclass(frozen=True, slots=True)
class UpdateCommand:
    collection: str = ""
    id: str | None = None
    locate: Locator | None = None
    content: str = ""
    type: MemoryType | None = None
    importance: int | None = None
    tags: tuple[str, ...] | None = None
    metadata: Mapping[str, str] | None = None
    valid_until: float | None = None
    dry_run: bool = False


@dataclass(frozen=True, slots=True)
class UpdateResult:
    memory: MemoryRecord
    previous: MemoryRecord
    similarity: float
    changed: bool
    dry_run: bool


@dataclass(frozen=True, slots=True)
class DeleteCommand:
    collection: str = ""
    id: str | None = None
    query: str | None = None
    threshold: float = 0.0
    limit: int = 0
    force: bool = False
    dry_run: bool = False


@dataclass(frozen=True, slots=True)
class DeleteResult:
    deleted: tuple[MemoryRecord, ...]
    dry_run: bool


@dataclass(frozen=True, slots=True)
class CollectionStats:
    spec: CollectionSpec
    memory_count: int


# ---------------------------------------------------------------- the service


class MemoryService:
    """Engram's memory lifecycle over a Store and an Embedder."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        clock: Clock,
        calibration: Calibration,
        policy: Policy | None = None,
        *,
        lexical: LexicalEncoder | None = None,
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
        self._locks: dict[str, asyncio.Lock] = {}
        self._background: set[asyncio.Task[None]] = set()
        #: collection -> memory id -> [searches that returned it, latest time], not yet written.
        self._pending_access: dict[str, dict[str, list[float]]] = {}
        # Full records of recent search results: (collection, id) -> (generation, record). Valid
        # while the store does not report the point written since that generation and its access
        # counters were not written (the flush drops their entries). A read that overlaps a write
        # (a new generation or access epoch meanwhile) is not kept.
        self._record_cache: OrderedDict[tuple[str, str], tuple[int, MemoryRecord]] = OrderedDict()
        self._access_epoch: dict[str, int] = {}
        self._access_flush_scheduled = False
        self._flush_now = asyncio.Event()
        #: collection -> time of the last write (add or update), for activity-driven reflection.
        self.last_write_at: dict[str, float] = {}

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
            lock = self._locks[collection] = asyncio.Lock()
        return lock

    def _resolve(self, v: Violations, fieldname: str, collection: str) -> str:
        name = collection or self.policy.default_collection
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
        self._check_spec(spec)
        return spec

    async def _ensure(self, name: str) -> CollectionSpec:
        spec = await self._existing(name)
        if spec is not None:
            return spec
        async with self._lock(name):
            spec = await self._existing(name)
            if spec is None:
                spec = CollectionSpec(
                    name=name,
                    embedding_model=self._embedder.model_id,
                    dimension=self._embedder.dimension,
                    created_at=self._clock.now(),
                    lexical=self._lexical.encoder_id if self._lexical is not None else None,
                )
                await self._store.create_collection(spec)
                self._specs[name] = spec
            return spec

    async def list_collections(self) -> list[CollectionStats]:
        now = self._clock.now()
        specs = await self._store.list_collections()
        counts = await asyncio.gather(*(self._store.count(s.name, StoreFilter(live_at=now)) for s in specs))
        return [
            CollectionStats(s, c) for s, c in sorted(zip(specs, counts, strict=True), key=lambda x: x[0].name)
        ]

    async def delete_collection(self, name: str) -> int:
        v = Violations()
        if not name:
            v.add("name", "must not be empty")
        elif not valid_collection_name(name) and await self._store.get_collection(name) is None:
            # A name the rules refuse today but an older release accepted (``"bob\n"``) can still
            # be deleted while it exists; anything else is refused as invalid.
            check_collection(v, "name", name)
        v.raise_if_any()
        async with self._lock(name):
            if await self._store.get_collection(name) is None:
                raise CollectionNotFound(f"collection {name!r} does not exist", metadata={"collection": name})
            count = await self._store.drop_collection(name)
            self._specs.pop(name, None)
            return count

    # ------------------------------------------------------------ add

    async def add(self, cmd: AddCommand) -> AddResult:
        v = Violations()
        collection = self._resolve(v, "collection", cmd.collection)
        item = self._check_add(v, "", cmd, collection, self._clock.now())
        v.raise_if_any()
        return (await self._add_items(collection, [item]))[0]

    async def add_many(self, collection: str, cmds: Sequence[AddCommand]) -> list[AddResult]:
        """Add several memories to one collection: one result per command, in order.

        Every command is validated first (a violation refuses the whole call, fields named
        ``memories[i].<field>``); then the batch goes through the same path as :meth:`add`: one
        embedding call, the write gate per item against the collection and the earlier items of
        the batch, one upsert. ``cmds[i].collection`` is ignored: ``collection`` applies to all.
        """
        self.check_batch_size(len(cmds))
        v = Violations()
        name = self._resolve(v, "collection", collection)
        now = self._clock.now()
        items: list[_AddItem] = []
        first_use: dict[str, int] = {}
        for i, cmd in enumerate(cmds):
            items.append(self._check_add(v, f"memories[{i}].", cmd, name, now))
            if cmd.request_id:
                first = first_use.setdefault(cmd.request_id, i)
                if first != i:
                    v.add(f"memories[{i}].request_id", f"repeats memories[{first}].request_id")
        v.raise_if_any(max_listed=MAX_LISTED_VIOLATIONS)
        return await self._add_items(name, items)

    def check_batch_size(self, count: int) -> None:
        """Refuse a batch of ``count`` memories unless 1 ≤ count ≤ the limit (InvalidArgument on
        ``memories``): checked before anything else, so an oversized batch is not examined."""
        limit = self.policy.limits.max_batch_items
        if count < 1:
            raise InvalidArgument.of("memories", "must hold at least one memory")
        if count > limit:
            raise InvalidArgument.of("memories", f"at most {limit} memories per call (got {count})")

    def _check_add(
        self, v: Violations, prefix: str, cmd: AddCommand, collection: str, now: float
    ) -> _AddItem:
        """Validate one add (fields named ``<prefix><field>``) and apply its defaults."""
        pol = self.policy
        check_content(v, f"{prefix}content", cmd.content, pol.limits)
        importance = 5 if cmd.importance is None else cmd.importance
        check_importance(v, f"{prefix}importance", importance)
        tags = normalise_tags(v, f"{prefix}tags", cmd.tags, pol.limits)
        check_metadata(v, f"{prefix}metadata", cmd.metadata, pol.limits)
        check_request_id(v, f"{prefix}request_id", cmd.request_id, pol.limits)
        created_at = now if cmd.created_at is None else cmd.created_at
        if cmd.created_at is not None and cmd.created_at > now + pol.limits.future_skew_seconds:
            v.add(f"{prefix}created_at", "must not be in the future")
        elif cmd.created_at is not None and cmd.created_at < 0:
            v.add(f"{prefix}created_at", "must not be before 1970-01-01")
        if cmd.valid_until is not None:
            if cmd.valid_until > NEVER:
                v.add(f"{prefix}valid_until", "must not be after 9999-12-31")
            elif cmd.valid_until <= now:
                v.add(f"{prefix}valid_until", "must be in the future")
            elif cmd.valid_until <= created_at:
                v.add(f"{prefix}valid_until", "must be after created_at")
        request_hash = _request_hash(cmd, collection, importance, tags) if cmd.request_id else None
        return _AddItem(cmd, importance, tags, created_at, request_hash)

    async def _add_items(self, collection: str, items: Sequence[_AddItem]) -> list[AddResult]:
        """The write path of :meth:`add` and :meth:`add_many` (validated items, one collection).

        Embeds every content in one call (before taking the collection lock: the model is the slow
        part); then, under the lock, answers each item in order — a replay of its request_id, a
        duplicate of a live memory or of an earlier item of the batch, or a new memory — and
        writes once at the end: one upsert of the new memories, one update of the provenance of
        existing memories that duplicates promoted. Nothing is written past the caller's deadline.
        """
        pol = self.policy
        vectors = await self._embed([item.cmd.content for item in items])
        await self._ensure(collection)
        async with self._lock(collection):
            now = self._clock.now()
            # Two storage round trips for the whole batch (nothing is written until the end):
            # the earlier uses of its request_ids, then the gate's query for every other item.
            used = await self._used_request_ids(collection, [item.cmd.request_id for item in items])
            fresh = [i for i, item in enumerate(items) if item.cmd.request_id not in used]
            stored = await self._gate_hits(collection, vectors[fresh], now)
            gate_hits = dict(zip(fresh, stored, strict=True))
            results: list[AddResult] = []
            new: dict[str, tuple[int, MemoryRecord, Vector]] = {}  # id -> (item index, ...), in order
            promoted: dict[str, MemoryRecord] = {}  # existing memories whose provenance changed
            for index, (item, vector) in enumerate(zip(items, vectors, strict=True)):
                cmd = item.cmd
                if cmd.request_id in used:
                    results.append(await self._replay(collection, used[cmd.request_id], item.request_hash))
                    continue
                earlier = [(record, vec) for _, record, vec in new.values()]
                allow = cmd.allow_duplicate
                similar, top = self._gate(
                    collection, gate_hits[index], vector, cmd.content, earlier, allow_duplicate=allow
                )
                if top is not None and not allow:
                    near = tuple(
                        s for s in similar if s is not top and s.similarity >= pol.near_duplicate_threshold
                    )[: pol.max_near_duplicates]
                    in_batch = new.get(top.record.id)
                    if in_batch is not None:  # a copy of an earlier item: merge into its pending write
                        first, pending, vec = in_batch
                        existing = with_provenance(pending, cmd.source_type)
                        new[existing.id] = (first, existing, vec)
                    else:
                        base = promoted.get(top.record.id, top.record)
                        existing = with_provenance(base, cmd.source_type)
                        if existing is not base:
                            promoted[existing.id] = existing
                    results.append(
                        AddResult(
                            existing,
                            AddOutcome.DUPLICATE,
                            top.similarity,
                            near,
                            duplicate_of=None if in_batch is None else in_batch[0],
                            reason=top.reason,
                        )
                    )
                    continue
                near = tuple(s for s in similar if s.similarity >= pol.near_duplicate_threshold)[
                    : pol.max_near_duplicates
                ]
                record = self._new_record(collection, item, near, now)
                new[record.id] = (index, record, vector)
                if top is not None:
                    reason = GateReason.ALLOW_DUPLICATE
                elif similar and similar[0].similarity > pol.dedup_threshold:
                    reason = GateReason.CONFLICTING_SPECIFICS  # above the threshold, yet a different fact
                else:
                    reason = GateReason.NONE
                results.append(AddResult(record, AddOutcome.CREATED, 0.0, near, reason=reason))
            if promoted:
                ensure_time_left()
                await self._store.set_fields(
                    collection,
                    {
                        r.id: {
                            "source_type_history": [s.value for s in r.source_type_history],
                            "source_type": r.source_type.value,
                        }
                        for r in promoted.values()
                    },
                )
            if new:
                await self._upsert(collection, [stored_point(r, vec) for _, r, vec in new.values()])
                self.last_write_at[collection] = now
            return results

    def _new_record(
        self, collection: str, item: _AddItem, near: Sequence[Similar], now: float
    ) -> MemoryRecord:
        """The record a new memory is stored as (TTL from type, importance and tags)."""
        cmd = item.cmd
        return MemoryRecord(
            id=str(uuid.uuid4()),
            collection=collection,
            content=cmd.content,
            type=cmd.type,
            importance=item.importance,
            tags=item.tags,
            source=cmd.source,
            source_type=cmd.source_type,
            source_type_history=(cmd.source_type,),
            metadata=dict(cmd.metadata),
            created_at=item.created_at,
            updated_at=now,
            valid_until=compute_valid_until(
                cmd.type, item.importance, item.tags, item.created_at, cmd.valid_until
            ),
            request_id=cmd.request_id or None,
            request_hash=item.request_hash,
            near_duplicates=tuple((s.record.id, round(s.similarity, 6)) for s in near),
        )

    async def _gate_hits(self, collection: str, vectors: Vector, now: float) -> list[list[ScoredPoint]]:
        """The write gate's storage query for each row of ``vectors``: the nearest live memories
        (one round trip for a whole batch)."""
        if not len(vectors):
            return []
        limit = self.policy.gate_candidates
        with _query_span(collection, limit, lexical=False) as span:
            span.set_attribute("db.operation.batch.size", len(vectors))
            hits = await self._store.search_batch(collection, vectors, limit, StoreFilter(live_at=now))
            span.set_attribute("db.response.returned_rows", sum(len(h) for h in hits))
            return hits

    def _gate(
        self,
        collection: str,
        hits: Sequence[ScoredPoint],
        vector: Vector,
        content: str,
        earlier: Sequence[tuple[MemoryRecord, Vector]] = (),
        *,
        allow_duplicate: bool = False,
    ) -> tuple[list[Similar], Similar | None]:
        """The write gate's check: the nearest live memories, most similar first, calibrated, and the
        one ``content`` duplicates (None when it duplicates none).

        ``hits`` are the stored candidates (:meth:`_gate_hits`); ``earlier`` are the memories an
        earlier item of the same batch is about to write: they are candidates like the stored ones
        (compared by the cosine of their vectors).

        A candidate whose text equals ``content`` once normalised (Unicode NFKC, case, white space,
        surrounding punctuation) is an exact copy whatever the embedding says: similarity 1.0.

        A candidate above the duplicate threshold is a duplicate only if its specifics agree with
        ``content``'s (:func:`engram_server.domain.specifics.conflicts`: numbers, dates, ids, names,
        negation); one whose specifics conflict is a different fact, kept in the list with reason
        CONFLICTING_SPECIFICS and the conflicts. The most similar candidate without a conflict is the
        duplicate; with ``allow_duplicate`` it is kept in the list with reason ALLOW_DUPLICATE.
        Candidates in the near-duplicate zone get the same reason and conflicts when their specifics
        differ.
        """
        pol = self.policy
        key = normalise_text(content)
        with _tracer.start_as_current_span(
            "engram.gate", attributes={"engram.collection": collection}
        ) as span:
            scored = [(h.record, h.score) for h in hits]
            if earlier:  # unit vectors: the dot product is the cosine
                cosines = np.stack([vec for _, vec in earlier]) @ vector
                scored.extend((record, float(c)) for (record, _), c in zip(earlier, cosines, strict=True))
            similar = [
                Similar(record, 1.0 if normalise_text(record.content) == key else self._cal.similarity(raw))
                for record, raw in scored
            ]
            similar.sort(key=lambda s: s.similarity, reverse=True)
            top: Similar | None = None
            for i, s in enumerate(similar):
                if s.similarity <= pol.dedup_threshold:
                    break
                if s.similarity >= 1.0 or not pol.check_specifics:
                    found: tuple[Conflict, ...] = ()
                else:
                    found = tuple(conflicts(s.record.content, content))
                if found:
                    similar[i] = replace(s, reason=GateReason.CONFLICTING_SPECIFICS, conflicts=found)
                    continue
                if allow_duplicate:
                    similar[i] = replace(s, reason=GateReason.ALLOW_DUPLICATE)
                top = similar[i]
                break
            if top is None and pol.check_specifics:
                # Reworded, not changed: the same content words and specifics as a memory at the
                # restatement level ("For new services, the team uses X." / "The team uses X for
                # new services."), which the embedding may place just under the threshold.
                for i, s in enumerate(similar):
                    if s.similarity < pol.restatement_threshold:
                        break
                    if same_words(s.record.content, content) and not conflicts(s.record.content, content):
                        similar[i] = replace(
                            s, reason=GateReason.ALLOW_DUPLICATE if allow_duplicate else GateReason.SAME_WORDS
                        )
                        top = similar[i]
                        break
            # The near zone below the duplicate threshold: name the specifics that differ, so the
            # caller can tell "the same fact, changed" (update it) from "the same fact, reworded".
            for i, s in enumerate(similar):
                if s.similarity < pol.near_duplicate_threshold:
                    break
                if s.reason or s is top or s.similarity > pol.dedup_threshold or not pol.check_specifics:
                    continue
                found = tuple(conflicts(s.record.content, content))
                if found:
                    similar[i] = replace(s, reason=GateReason.CONFLICTING_SPECIFICS, conflicts=found)
            best = similar[0].similarity if similar else 0.0
            if top is not None:
                outcome = "allowed_duplicate" if allow_duplicate else "duplicate"
            elif best >= pol.near_duplicate_threshold:
                outcome = "near_duplicate"
            else:
                outcome = "created"
            span.set_attribute("engram.gate.similarity", best)
            span.set_attribute("engram.gate.outcome", outcome)
            _gate_outcomes.add(1, {"engram.collection": collection, "engram.gate.outcome": outcome})
            return similar, top

    async def _embed(self, texts: list[str], *, query: bool = False) -> Vector:
        """Embed through the port inside an ``engram.embed`` span (the batcher adds the batch size)."""
        with _tracer.start_as_current_span(
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

    async def _used_request_ids(
        self, collection: str, request_ids: Sequence[str | None]
    ) -> dict[str, MemoryRecord]:
        """The memories created earlier with any of ``request_ids``, by request_id (one query)."""
        wanted = tuple(dict.fromkeys(r for r in request_ids if r))
        if not wanted:
            return {}
        records, _ = await self._store.scroll(collection, StoreFilter(request_ids=wanted), limit=len(wanted))
        return {r.request_id: r for r in records if r.request_id}

    async def _replay(self, collection: str, first: MemoryRecord, request_hash: str | None) -> AddResult:
        """The answer to a repeated request_id: the memory it created (or a conflict if the
        request differs)."""
        if first.request_hash != request_hash:
            raise IdempotencyConflict(
                f"request_id {first.request_id!r} was already used for a different request",
                metadata={"request_id": first.request_id or "", "memory_id": first.id},
            )
        near_ids = [i for i, _ in first.near_duplicates]
        found = {p.record.id: p.record for p in await self._store.retrieve(collection, near_ids)}
        near = tuple(Similar(found[i], s) for i, s in first.near_duplicates if i in found)
        return AddResult(first, AddOutcome.CREATED, 0.0, near, replayed=True)

    # ------------------------------------------------------------ search

    async def search(self, q: SearchQuery) -> list[SearchHit]:
        pol = self.policy
        v = Violations()
        if is_blank(q.query):
            v.add("query", "must not be empty")
        elif len(q.query) > pol.limits.max_content_chars:
            v.add("query", f"at most {pol.limits.max_content_chars} characters")
        names = list(dict.fromkeys(q.collections))
        if len(names) > pol.limits.max_collections_per_search:
            v.add("collections", f"at most {pol.limits.max_collections_per_search} collections")
        for i, name in enumerate(names):
            check_collection(v, f"collections[{i}]", name)
        limit = q.limit or 5
        if not 1 <= limit <= pol.limits.max_search_limit:
            v.add("limit", f"must be between 1 and {pol.limits.max_search_limit} (got {q.limit})")
        flt = self._check_filter(v, "filter", q.filter)
        weights = q.weights or pol.weights
        for name, value in (
            ("relevance", weights.relevance),
            ("recency", weights.recency),
            ("importance", weights.importance),
        ):
            if not (value >= 0 and math.isfinite(value)):
                v.add(f"weights.{name}", "must be a finite number ≥ 0")
        lam = pol.mmr_lambda if q.mmr_lambda is None else q.mmr_lambda
        check_unit_interval(v, "mmr_lambda", lam)
        check_unit_interval(v, "min_relevance", q.min_relevance)
        v.raise_if_any()

        specs = await self._search_specs(names, q.readable)
        if not specs:
            return []
        query = _Query(self, q.query)
        if len(specs) > 1:
            await query.dense()  # once, before the collections are searched concurrently
        now = self._clock.now()
        asked, flt = flt, replace(flt, live_at=now)
        n_candidates = max(limit * pol.candidate_factor, pol.min_candidates)
        n_lexical = max(limit * pol.candidate_factor, pol.min_lexical_candidates)
        per_collection = await _gather(
            *(
                self._candidates(
                    s.name,
                    query,
                    limit=n_candidates,
                    lexical_limit=n_lexical,
                    flt=flt,
                    asked=asked,
                    lexical=self._uses_lexical(s),
                    with_vectors=q.diversify,
                )
                for s in specs
            )
        )
        n_found = sum(len(p.found) for p in per_collection)
        with _tracer.start_as_current_span(
            "engram.rank", attributes={"engram.candidates": n_found, "engram.candidates.cached": query.cached}
        ) as span:
            ranked = self._rank(
                per_collection, now, weights, q.min_relevance, keep=None if q.diversify else limit
            )
            if q.diversify and len(ranked) > 1:
                order = mmr_order(
                    [r.score.final for r in ranked],
                    [r.vector for r in ranked if r.vector is not None],
                    limit,
                    lam,
                    self._cal.similarity_array,
                )
                ranked = [ranked[i] for i in order]
            top = ranked[:limit]
            span.set_attribute("engram.returned", len(top))
        # Candidates carried only what ranking needs; read the winners in full (a memory deleted
        # or replaced since the query is dropped, as if the search had run a moment later).
        full = await self._full_records(top)
        results = [SearchHit(full[r.id], r.score) for r in top if r.id in full]
        self._note_access([r.memory for r in results], now)
        return results

    async def _search_specs(
        self, names: Sequence[str], readable: Callable[[str], bool] | None
    ) -> list[CollectionSpec]:
        """The collections a search looks in. Named ones must all exist: a name that does not
        (a typo) is NOT_FOUND, never an empty answer that reads as "no memories". With none named,
        every existing collection the caller may read (``readable``; all when None), as the
        reference design searches every collection."""
        if not names:
            found: list[CollectionSpec] = []
            for stored in await self._store.list_collections():
                if readable is not None and not readable(stored.name):
                    continue
                try:
                    spec = await self._existing(stored.name)
                except EmbeddingMismatch:
                    continue  # built with another model: this server cannot search it at all
                if spec is not None:
                    found.append(spec)
            return found
        specs = [await self._existing(n) for n in names]
        missing = [n for n, spec in zip(names, specs, strict=True) if spec is None]
        if missing:
            raise CollectionNotFound(
                f"collection {missing[0]!r} does not exist"
                + (f" (nor {', '.join(repr(m) for m in missing[1:])})" if len(missing) > 1 else ""),
                metadata={"collection": missing[0], "missing": ",".join(missing)},
            )
        return [spec for spec in specs if spec is not None]

    def _prepare(self, found: Candidates, query: _Query) -> _Pool:
        """Relevance of one collection's candidates (semantic, lexical and episode evidence; the
        lexical side is normalised by the collection's best BM25 score) and their decay factors."""
        n = len(found)
        raw = found.cosine
        off = self._cross_script_offset
        tags = set(found.scripts)  # script tags (see engram_server.domain.text.script_tag)
        if off and query.script and n:
            shift = {sc: off.get((query.script, cross_script(query.script, sc)), 0.0) for sc in tags}
            raw = raw + np.fromiter(map(shift.__getitem__, found.scripts), dtype=np.float64, count=n)
        blind = {sc: lexically_blind(query.word_scripts, sc) for sc in tags}
        parts = evidence(
            self._cal.relevance_array(raw),
            found.lexical,
            found.created_at,
            self.policy.hybrid,
            np.fromiter(map(_IS_EVENT.__getitem__, found.types), dtype=bool, count=n),
            blind=np.fromiter(map(blind.__getitem__, found.scripts), dtype=bool, count=n),
        )
        return _Pool(found, parts, decay_array(found.types))

    def _rank(
        self,
        pools: Sequence[_Pool],
        now: float,
        weights: Weights,
        min_relevance: float,
        *,
        keep: int | None = None,
    ) -> list[_Ranked]:
        """The best ``keep`` (all when None) candidates at or above ``min_relevance``, best first (equal
        scores: the newer first, then by id), with their scores. Recency and the fusion are computed
        for all candidates at once; a score object is made only for the candidates kept."""
        pools = [p for p in pools if len(p.found)]
        if not pools:
            return []
        if len(pools) == 1:
            (one,) = pools
            relevance, lexical, episode = one.evidence.relevance, one.evidence.lexical, one.evidence.episode
            decay, ids = one.decay, one.found.ids
            created, importance = one.found.created_at, one.found.importance
        else:
            relevance = np.concatenate([p.evidence.relevance for p in pools])
            lexical = np.concatenate([p.evidence.lexical for p in pools])
            episode = np.concatenate([p.evidence.episode for p in pools])
            decay = np.concatenate([p.decay for p in pools])
            ids = [i for p in pools for i in p.found.ids]
            created = np.concatenate([p.found.created_at for p in pools])
            importance = np.concatenate([p.found.importance for p in pools])
        rec = recency_array(decay, created, now)
        final = fuse_array(
            relevance + lexical + episode, rec, importance, weights, mode=self.policy.hybrid.fusion
        )
        chosen = np.flatnonzero(relevance >= min_relevance)
        if keep is not None and keep < len(chosen):
            # Only those at or above the keep-th best score can be kept (ties included).
            scores = final[chosen]
            cut = len(scores) - keep
            chosen = chosen[scores >= np.partition(scores, cut)[cut]]
        fl, cl = final.tolist(), created.tolist()
        # Best first; equal scores (e.g. equally relevant memories whose recency has decayed to 0):
        # the newer first, then by id, so the order never depends on the store's.
        order = sorted(chosen.tolist(), key=lambda k: (-fl[k], -cl[k], ids[k]))
        if keep is not None:
            order = order[:keep]
        starts = np.cumsum([0] + [len(p.found) for p in pools])
        ranked: list[_Ranked] = []
        for k in order:
            j = 0 if len(pools) == 1 else int(np.searchsorted(starts, k, side="right")) - 1
            c, i = pools[j].found, k - int(starts[j])
            ranked.append(
                _Ranked(
                    c.collection,
                    c.ids[i],
                    Score(
                        final=float(final[k]),
                        relevance=float(relevance[k]),
                        recency=float(rec[k]),
                        importance=float(importance[k]) / 10.0,
                        raw_similarity=float(c.cosine[i]),
                        lexical=float(lexical[k]),
                        episode=float(episode[k]),
                    ),
                    None if c.vectors is None else c.vectors[i],
                )
            )
        return ranked

    async def _candidates(
        self,
        collection: str,
        query: _Query,
        *,
        limit: int,
        lexical_limit: int,
        flt: StoreFilter,
        asked: StoreFilter,
        lexical: bool,
        with_vectors: bool,
    ) -> _Pool:
        """The collection's candidates for ``query`` under ``flt`` (``asked`` plus the live-at time):
        reused from a recent identical search while the store reports the collection unchanged (same
        generation) and none of them has expired since — exactly what the storage would return now —
        otherwise fetched (and kept, LRU-bounded)."""
        now = flt.live_at if flt.live_at is not None else self._clock.now()
        entries = self.policy.search_cache_entries
        generation = self._store.generation(collection) if entries > 0 else None
        key: tuple[Any, ...] | None = None
        if generation is not None:
            key = (collection, query.text, limit, lexical_limit, asked, lexical, with_vectors)
            hit = self._candidate_cache.get(key)
            if hit is not None:
                gen, fetched_at, expires_at, cached = hit
                # (Time going backwards could revive memories expired at fetch time: refetch.)
                if gen == generation and fetched_at <= now < expires_at:
                    self._candidate_cache.move_to_end(key)
                    _candidate_cache.add(1, {"engram.collection": collection, "engram.cache.result": "hit"})
                    query.cached += 1
                    return cached
                del self._candidate_cache[key]
        vector = await query.dense()
        sparse = query.sparse() if lexical else None
        with _query_span(collection, limit, lexical=bool(sparse)) as span:
            found = await self._store.candidates(
                collection,
                vector,
                limit,
                flt,
                sparse=sparse or None,
                lexical_limit=lexical_limit,
                with_vectors=with_vectors,
            )
            span.set_attribute("db.response.returned_rows", len(found))
        pool = self._prepare(found, query)
        if key is not None and generation is not None:
            _candidate_cache.add(1, {"engram.collection": collection, "engram.cache.result": "miss"})
            expires_at = float(found.valid_until.min()) if len(found) else math.inf
            self._candidate_cache[key] = (generation, now, expires_at, pool)
            while len(self._candidate_cache) > entries:
                self._candidate_cache.popitem(last=False)
        return pool

    async def _full_records(self, top: Sequence[_Ranked]) -> dict[str, MemoryRecord]:
        """The current records of the winners, by id (one read per collection; records of recent
        results are reused while their collection is unchanged, counters included)."""
        out: dict[str, MemoryRecord] = {}
        missing: dict[str, list[str]] = {}
        caching = self.policy.search_cache_entries > 0
        cache = self._record_cache
        changed: dict[tuple[str, int], frozenset[str] | None] = {}
        for r in top:
            generation = self._store.generation(r.collection) if caching else None
            if generation is not None:
                key = (r.collection, r.id)
                hit = cache.get(key)
                if hit is not None:
                    if hit[0] != generation:
                        # Written since? (other points' writes leave this record as it was)
                        since = (r.collection, hit[0])
                        if since not in changed:
                            changed[since] = self._store.changed_since(r.collection, hit[0])
                        written = changed[since]
                        if written is None or r.id in written:
                            missing.setdefault(r.collection, []).append(r.id)
                            continue
                        hit = (generation, hit[1])
                        cache[key] = hit
                    cache.move_to_end(key)
                    out[r.id] = hit[1]
                    continue
            missing.setdefault(r.collection, []).append(r.id)
        if not missing:
            return out
        before = {c: (self._store.generation(c), self._access_epoch.get(c, 0)) for c in missing}
        fetched = await _gather(*(self._store.retrieve(c, ids) for c, ids in missing.items()))
        bound = 16 * self.policy.search_cache_entries
        for collection, points in zip(missing, fetched, strict=True):
            generation, epoch = before[collection]
            keep = (
                caching
                and generation is not None
                and (generation, epoch)
                == (self._store.generation(collection), self._access_epoch.get(collection, 0))
            )
            for p in points:
                if not p.record.is_current:
                    continue
                out[p.record.id] = p.record
                if keep and generation is not None:
                    cache[(collection, p.record.id)] = (generation, p.record)
        while len(cache) > bound:
            cache.popitem(last=False)
        return out

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
        return StoreFilter(
            types=tuple(dict.fromkeys(f.types)),
            tags_any=tuple(dict.fromkeys(t.strip() for t in f.tags_any)),
            created_after=f.created_after,
            created_before=f.created_before,
            min_importance=f.min_importance or None,
            source_types=tuple(dict.fromkeys(f.source_types)),
        )

    def _note_access(self, records: Sequence[MemoryRecord], now: float) -> None:
        """Count the search hits; the counters are written in one batch per collection, at most
        ``access_flush_seconds`` later (and at drain/shutdown), off the search's path."""
        for record in records:
            entry = self._pending_access.setdefault(record.collection, {}).setdefault(record.id, [0, now])
            entry[0] += 1
            entry[1] = max(entry[1], now)
        if records and not self._access_flush_scheduled:
            self._access_flush_scheduled = True
            self._spawn(self._flush_access())

    async def _flush_access(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._flush_now.wait(), self.policy.access_flush_seconds)
        self._access_flush_scheduled = False
        pending, self._pending_access = self._pending_access, {}
        for collection, counts in pending.items():
            async with self._lock(collection):
                # The store adds to what is stored now (concurrent searches add up; a memory
                # updated or deleted since it was found is skipped: its history version keeps the
                # old counters). Records cached for search results carry the counters: they get
                # the new ones (a read racing with the write is not cached: the epoch).
                self._access_epoch[collection] = self._access_epoch.get(collection, 0) + 1
                written: dict[str, tuple[int, float]] = {}
                try:
                    written = await self._store.add_access(
                        collection, {mid: (int(n), float(at)) for mid, (n, at) in counts.items()}
                    )
                finally:
                    self._access_epoch[collection] += 1
                    self._recount_records(collection, counts, written)

    def _recount_records(
        self, collection: str, counted: Iterable[str], written: Mapping[str, tuple[int, float]]
    ) -> None:
        """Cached records of memories whose counters were just written get the new counters; the
        others counted (skipped by the store, or the write failed) are dropped."""
        cache = self._record_cache
        for mid in counted:
            hit = cache.get((collection, mid))
            if hit is None:
                continue
            new = written.get(mid)
            if new is None:
                del cache[(collection, mid)]
            else:
                cache[(collection, mid)] = (
                    hit[0],
                    replace(hit[1], access_count=new[0], last_accessed_at=new[1]),
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

    # ------------------------------------------------------------ locate

    async def _get_live(self, collection: str, memory_id: str, fieldname: str = "id") -> MemoryRecord:
        if not _is_uuid(memory_id):
            raise InvalidArgument.of(fieldname, "must be a memory id (UUID)")
        spec = await self._existing(collection)
        if spec is None and collection != self.policy.default_collection:
            raise CollectionNotFound(
                f"collection {collection!r} does not exist", metadata={"collection": collection}
            )
        if spec is None:
            raise MemoryNotFound(
                f"memory {memory_id} not found in collection {collection!r}",
                metadata={"id": memory_id, "collection": collection},
            )
        found = await self._store.retrieve(collection, [memory_id])
        if not found or found[0].record.expired(self._clock.now()):
            raise MemoryNotFound(
                f"memory {memory_id} not found in collection {collection!r}",
                metadata={"id": memory_id, "collection": collection},
            )
        return found[0].record

    async def _locate(self, collection: str, loc: Locator) -> tuple[MemoryRecord, float]:
        """The single current memory closest to ``loc.content``, at or above the threshold."""
        if await self._existing(collection) is None:
            raise NoMatch(f"collection {collection!r} has no memories", metadata={"collection": collection})
        vec = (await self._embed([loc.content]))[0]
        hits = await self._query(collection, vec, 3, StoreFilter(live_at=self._clock.now()))
        sims = sorted(((self._cal.similarity(h.score), h.record) for h in hits), key=lambda x: -x[0])
        threshold = loc.threshold
        if not sims or sims[0][0] < threshold:
            best = f"{sims[0][0]:.3f}" if sims else "none"
            raise NoMatch(
                f"no memory matches at similarity ≥ {threshold:.2f} (best: {best})",
                metadata={"threshold": f"{threshold:.4f}", "best_similarity": best},
            )
        if (
            len(sims) > 1
            and sims[1][0] >= threshold
            and sims[0][0] - sims[1][0] < self.policy.ambiguity_margin
        ):
            raise AmbiguousMatch(
                "more than one memory matches almost equally well; update by id instead",
                metadata={"candidates": ",".join(r.id for _, r in sims[:2])},
            )
        return sims[0][1], sims[0][0]

    def _locate_threshold(self, threshold: float, minimum: float, fieldname: str) -> float:
        if math.isnan(threshold) or threshold > 1.0:
            raise InvalidArgument.of(fieldname, "must be between 0 and 1")
        if threshold == 0.0:
            return self.policy.locate_min_threshold
        if threshold < minimum:
            message = f"{fieldname} {threshold:.2f} is below the minimum {minimum:.2f}"
            raise ThresholdTooLow(
                message,
                metadata={"min_threshold": f"{minimum:.2f}", "threshold": f"{threshold:.4f}"},
                violations=(FieldViolation(fieldname, f"must be at least {minimum:.2f}"),),
            )
        return threshold

    # ------------------------------------------------------------ update

    async def update(self, cmd: UpdateCommand) -> UpdateResult:
        pol = self.policy
        v = Violations()
        collection = self._resolve(v, "collection", cmd.collection)
        if cmd.id is None and cmd.locate is None:
            v.add("target", "give either id or locate")
        if cmd.locate is not None:
            check_content(v, "locate.content", cmd.locate.content, pol.limits)
        if cmd.content:
            check_content(v, "content", cmd.content, pol.limits)
        if cmd.importance is not None:
            check_importance(v, "importance", cmd.importance)
        tags = normalise_tags(v, "tags", cmd.tags, pol.limits) if cmd.tags is not None else None
        if cmd.metadata is not None:
            check_metadata(v, "metadata", cmd.metadata, pol.limits)
        if cmd.valid_until is not None and cmd.valid_until <= self._clock.now():
            v.add("valid_until", "must be in the future")
        elif cmd.valid_until is not None and cmd.valid_until > NEVER:
            v.add("valid_until", "must not be after 9999-12-31")
        v.raise_if_any()
        threshold = 0.0
        if cmd.locate is not None:
            threshold = self._locate_threshold(
                cmd.locate.threshold, pol.locate_min_threshold, "locate.threshold"
            )

        new_vec = (await self._embed([cmd.content]))[0] if cmd.content else None
        async with self._lock(collection):
            similarity = 0.0
            if cmd.id is not None:
                current = await self._get_live(collection, cmd.id)
                if current.superseded_by is not None:
                    raise MemorySuperseded(
                        f"memory {current.id} is a history version; update {current.superseded_by} instead",
                        metadata={"superseded_by": current.superseded_by},
                    )
            else:
                assert cmd.locate is not None
                current, similarity = await self._locate(collection, Locator(cmd.locate.content, threshold))
            now = self._clock.now()
            new_type = cmd.type if cmd.type is not None else current.type
            new_importance = cmd.importance if cmd.importance is not None else current.importance
            new_tags = tags if tags is not None else current.tags
            if cmd.valid_until is not None:
                valid_until = cmd.valid_until
            elif (new_type, new_importance, set(new_tags)) != (
                current.type,
                current.importance,
                set(current.tags),
            ):
                valid_until = compute_valid_until(new_type, new_importance, new_tags, current.created_at)
            else:
                valid_until = current.valid_until
            updated = replace(
                current,
                content=cmd.content or current.content,
                type=new_type,
                importance=new_importance,
                tags=new_tags,
                metadata=dict(cmd.metadata) if cmd.metadata is not None else current.metadata,
                valid_until=valid_until,
            )
            changed = updated != current
            if not changed or cmd.dry_run:
                return UpdateResult(updated, current, similarity, changed, cmd.dry_run)
            updated = replace(updated, version=current.version + 1, updated_at=now)
            old = (await self._store.retrieve(collection, [current.id], with_vectors=True))[0]
            history = replace(
                old.record,
                id=str(uuid.uuid4()),
                superseded_by=current.id,
                request_id=None,
                request_hash=None,
            )
            vector = new_vec if new_vec is not None else old.vector
            await self._upsert(collection, [stored_point(history, old.vector), stored_point(updated, vector)])
            self.last_write_at[collection] = now
            return UpdateResult(updated, history, similarity, True, False)

    # ------------------------------------------------------------ delete

    async def delete(self, cmd: DeleteCommand) -> DeleteResult:
        pol = self.policy
        v = Violations()
        collection = self._resolve(v, "collection", cmd.collection)
        if (cmd.id is None) == (cmd.query is None):
            v.add("target", "give either id or query")
        limit = cmd.limit or 1
        if cmd.query is not None:
            check_content(v, "query.query", cmd.query, pol.limits)
            if not 1 <= limit <= pol.limits.max_delete_limit:
                v.add("query.limit", f"must be between 1 and {pol.limits.max_delete_limit}")
        v.raise_if_any()

        if cmd.id is not None:
            async with self._lock(collection):
                target = await self._get_live(collection, cmd.id)
                return await self._delete_records(collection, [target], cmd)

        assert cmd.query is not None
        minimum = pol.locate_min_threshold if limit > 1 else pol.delete_single_min_threshold
        threshold = self._locate_threshold(cmd.threshold, minimum, "query.threshold")
        if await self._existing(collection) is None:
            raise NoMatch(f"collection {collection!r} has no memories", metadata={"collection": collection})
        vec = (await self._embed([cmd.query]))[0]
        async with self._lock(collection):
            hits = await self._query(collection, vec, limit, StoreFilter(live_at=self._clock.now()))
            matches = [h.record for h in hits if self._cal.similarity(h.score) >= threshold]
            if not matches:
                best = f"{self._cal.similarity(hits[0].score):.3f}" if hits else "none"
                raise NoMatch(
                    f"no memory matches at similarity ≥ {threshold:.2f} (best: {best})",
                    metadata={"threshold": f"{threshold:.4f}", "best_similarity": best},
                )
            return await self._delete_records(collection, matches, cmd)

    async def _delete_records(
        self, collection: str, targets: Sequence[MemoryRecord], cmd: DeleteCommand
    ) -> DeleteResult:
        protected = [t for t in targets if t.type in PROTECTED_TYPES and t.superseded_by is None]
        if protected and not cmd.force:
            raise ProtectedMemory(
                f"{len(protected)} of the targets are {protected[0].type.value} memories, which are "
                "protected; set force to delete them",
                metadata={"ids": ",".join(t.id for t in protected), "type": protected[0].type.value},
            )
        if cmd.dry_run:
            return DeleteResult(tuple(targets), True)
        ensure_time_left()
        await self._store.delete(collection, [t.id for t in targets])
        for t in targets:
            if t.superseded_by is None:
                await self._store.delete_where(collection, StoreFilter(only_history_of=t.id))
        return DeleteResult(tuple(targets), False)

    # ------------------------------------------------------------ read

    async def get(
        self, collection: str, memory_id: str, include_history: bool
    ) -> tuple[MemoryRecord, list[MemoryRecord]]:
        v = Violations()
        name = self._resolve(v, "collection", collection)
        if not memory_id:
            v.add("id", "must not be empty")
        v.raise_if_any()
        record = await self._get_live(name, memory_id)
        history: list[MemoryRecord] = []
        if include_history and record.superseded_by is None:
            history = await self._history(name, record.id)
        return record, history

    async def _history(self, collection: str, memory_id: str) -> list[MemoryRecord]:
        out: list[MemoryRecord] = []
        offset: str | None = None
        while True:
            page, offset = await self._store.scroll(
                collection, StoreFilter(only_history_of=memory_id), 256, offset
            )
            out.extend(page)
            if offset is None:
                break
        return sorted(out, key=lambda r: r.version, reverse=True)

    async def list(
        self,
        collection: str,
        flt: SearchFilter,
        page_size: int,
        page_token: str,
        include_history: bool,
    ) -> tuple[list[MemoryRecord], str]:
        v = Violations()
        name = self._resolve(v, "collection", collection)
        size = page_size or 100
        if not 1 <= size <= self.policy.limits.max_page_size:
            v.add("page_size", f"must be between 1 and {self.policy.limits.max_page_size}")
        store_flt = self._check_filter(v, "filter", flt)
        offset: str | None = None
        if page_token:
            offset = _decode_token(page_token, name)
            if offset is None:
                v.add("page_token", "not a page token of this collection")
        v.raise_if_any()
        if await self._existing(name) is None:
            if collection and collection != self.policy.default_collection:
                raise CollectionNotFound(f"collection {name!r} does not exist", metadata={"collection": name})
            return [], ""  # the default collection exists implicitly (created by the first write)
        store_flt = replace(
            store_flt, live_at=self._clock.now(), include_history=include_history, include_drafts=True
        )
        records, nxt = await self._store.scroll(name, store_flt, size, offset)
        return records, _encode_token(nxt, name) if nxt is not None else ""

    def page_token_at(self, record: MemoryRecord) -> str:
        """A ``list`` page token that continues with ``record`` (one of the page it returned: the
        listing is in storage order, by id, and a token names the first id of its page). The
        gRPC edge ends a page early with it when the whole page would not fit in one message."""
        return _encode_token(record.id, record.collection)

    # ------------------------------------------------------------ sweep

    async def sweep(self) -> dict[str, int]:
        """Hard-delete every expired memory (and expired history) in every collection."""
        now = self._clock.now()
        out: dict[str, int] = {}
        for spec in await self._store.list_collections():
            async with self._lock(spec.name):
                try:
                    n = await self._store.delete_where(
                        spec.name, StoreFilter(expired_at=now, include_history=True)
                    )
                except StorageFull:  # (the store logged it): the next sweep tries again
                    break
            if n:
                out[spec.name] = n
                _swept.add(n, {"engram.collection": spec.name})
        return out


def _query_span(collection: str, limit: int, *, lexical: bool) -> contextlib.AbstractContextManager[Span]:
    """The ``engram.storage.query`` client span of one storage query."""
    return _tracer.start_as_current_span(
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


async def _gather(*aws: Coroutine[Any, Any, T]) -> list[T]:
    """asyncio.gather, without wrapping a lone awaitable in a task (the usual one-collection case)."""
    if len(aws) == 1:
        return [await aws[0]]
    return list(await asyncio.gather(*aws))


def stored_point(record: MemoryRecord, vector: Vector | None) -> StoredPoint:
    """The point a record is written as: the one place every write path (add, update,
    reflection) builds the vectors stored with a memory."""
    return StoredPoint(record, vector)


def with_provenance(existing: MemoryRecord, source_type: SourceType) -> MemoryRecord:
    """A duplicate from another provenance is remembered, and the most trusted wins.
    Returns ``existing`` itself when the provenance is already known."""
    if source_type in existing.source_type_history:
        return existing
    history = (*existing.source_type_history, source_type)[-MAX_PROVENANCE_HISTORY:]
    primary = min((existing.source_type, source_type), key=lambda s: s.trust_rank)
    return replace(existing, source_type_history=history, source_type=primary)


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _request_hash(cmd: AddCommand, collection: str, importance: int, tags: tuple[str, ...]) -> str:
    body = json.dumps(
        [
            collection,
            cmd.content,
            cmd.type.value,
            importance,
            list(tags),
            cmd.source.value,
            cmd.source_type.value,
            sorted(cmd.metadata.items()),
            cmd.created_at,
            cmd.valid_until,
            *(["allow_duplicate"] if cmd.allow_duplicate else []),  # absent when False: old hashes hold
        ],
        ensure_ascii=False,
    )
    return hashlib.sha256(body.encode()).hexdigest()


def _encode_token(offset: str, collection: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([collection, offset]).encode()).decode()


def _decode_token(token: str, collection: str) -> str | None:
    try:
        name, offset = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, TypeError):
        return None
    if name != collection or not isinstance(offset, str):
        return None
    return offset


#: Which memory types take part in episode context (see :func:`hybrid_relevance`).
_IS_EVENT: Final[dict[MemoryType, bool]] = {t: t is MemoryType.EVENT for t in MemoryType}
_EDGE_PUNCTUATION = " \t\r\n.,;:!?…。，；：！？、\"'`“”‘’()[]{}（）【】-—~*_"


def normalise_text(text: str) -> str:
    """The form two texts share when they differ only in Unicode width, case, white space or
    surrounding punctuation ("I live in Berlin." == "i live in  berlin")."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(folded.split()).strip(_EDGE_PUNCTUATION)
