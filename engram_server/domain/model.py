"""The memory model shared by the domain, the ports and the adapters."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]

#: Stored valid_until meaning "never expires" (9999-12-31T23:59:59Z). A number rather than
#: a missing field, so "not expired" is one indexed range condition on every backend.
NEVER: float = 253402300799.0

DEFAULT_COLLECTION = "default"

#: The storage format this release writes, recorded in every collection's spec. 1: the first
#: release; 2: adds the trash (``trashed_at`` on points and specs, with a payload index); 3: adds
#: sessions and triggers (``session_id``, ``agent_id``, ``updated_at`` and ``has_trigger`` payload
#: indexes; ``has_trigger`` written on the memories whose tags name a trigger). A server migrates
#: an older collection (``engram migrate``, or at start-up) and refuses a newer one.
STORAGE_FORMAT = 3

#: Tags of this prefix name the action a memory is to be recalled before (``trigger:deploy``).
TRIGGER_TAG_PREFIX = "trigger:"


def has_trigger_tag(tags: tuple[str, ...] | list[str]) -> bool:
    return any(t.startswith(TRIGGER_TAG_PREFIX) for t in tags)


class MemoryType(StrEnum):
    IDENTITY = "identity"
    DIRECTIVE = "directive"
    INSIGHT = "insight"
    EVENT = "event"


#: identity and directive may only be deleted with force.
PROTECTED_TYPES = frozenset({MemoryType.IDENTITY, MemoryType.DIRECTIVE})


class Source(StrEnum):
    USER = "user"
    AGENT = "agent"
    SYSTEM = "system"


class SourceType(StrEnum):
    """Provenance, declared in trust order: earlier is more trusted."""

    USER_INPUT = "user_input"
    TOOL_OUTPUT = "tool_output"
    WEB_SEARCH = "web_search"
    DOCUMENT = "document"
    CALENDAR = "calendar"
    REFLECTION = "reflection"
    UNKNOWN = "unknown"

    @property
    def trust_rank(self) -> int:
        """0 is the most trusted."""
        return _TRUST_ORDER.index(self)


_TRUST_ORDER: list[SourceType] = list(SourceType)


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One stored memory: a current memory or a history version of one.

    Times are unix seconds (float). ``valid_until`` is :data:`NEVER` for memories that never
    expire. History versions have ``superseded_by`` set to the id of the current memory.
    """

    id: str
    collection: str
    content: str
    type: MemoryType = MemoryType.EVENT
    importance: int = 5
    tags: tuple[str, ...] = ()
    source: Source = Source.AGENT
    source_type: SourceType = SourceType.UNKNOWN
    source_type_history: tuple[SourceType, ...] = ()
    metadata: Mapping[str, str] = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0
    valid_until: float = NEVER
    version: int = 1
    superseded_by: str | None = None
    access_count: int = 0
    last_accessed_at: float | None = None
    reflected_at: float | None = None
    # Idempotency: the request_id that created this memory, a hash of that request, and the
    # near-duplicates reported then (id, calibrated similarity), so a replay answers the same.
    request_id: str | None = None
    request_hash: str | None = None
    near_duplicates: tuple[tuple[str, float], ...] = ()
    # Reflection: the memories an insight was derived from, and whether it is a low-confidence
    # draft (retrievable by id and listing, never searched, never a gate match).
    derived_from: tuple[str, ...] = ()
    draft: bool = False
    # The trash: when the memory (or history version) was deleted; None while it is not in the
    # trash. A trashed memory is never searched, listed or a gate match; it can be restored until
    # the trash retention passes (then the sweeper purges it).
    trashed_at: float | None = None
    #: The agent session and the agent that wrote the memory (None when not given). Kept by updates.
    session_id: str | None = None
    agent_id: str | None = None

    @property
    def is_current(self) -> bool:
        return self.superseded_by is None

    def expired(self, now: float) -> bool:
        return self.valid_until <= now


@dataclass(frozen=True, slots=True)
class SparseVector:
    """A lexical (BM25) sparse vector: sorted term indices and their weights."""

    indices: tuple[int, ...]
    values: tuple[float, ...]

    def __bool__(self) -> bool:
        return bool(self.indices)


@dataclass(frozen=True, slots=True)
class StoredPoint:
    """A record with its embedding (and lexical vector), as written to and read from storage."""

    record: MemoryRecord
    vector: Vector | None = None
    sparse: SparseVector | None = None


@dataclass(frozen=True, slots=True)
class ScoredPoint:
    """A search hit: the record, its raw cosine similarity, and (if asked) its vector.

    ``lexical`` is the raw BM25 score when the search had a lexical query and the memory was among
    the lexical candidates (0 otherwise).
    """

    record: MemoryRecord
    score: float
    vector: Vector | None = None
    lexical: float = 0.0
    #: The script of the memory's text as stored ("cjk", "latin"; "" if unknown).
    script: str = ""


@dataclass(frozen=True, slots=True, eq=False)
class Candidates:
    """One collection's search candidates, column by column: what ranking needs and no more.

    Built once per query by the store (no record object per candidate); the winners are read in
    full afterwards. Row ``i`` of every column describes the memory ``ids[i]``. ``cosine`` is the raw
    cosine similarity to the query; ``lexical`` the raw BM25 score (0 where the memory was not a
    lexical candidate); ``scripts`` the script tag of the stored text ("cjk", "latin", "cjk+latin",
    "latin+cjk"; "" if unknown; see :func:`engram_server.domain.text.script_tag`);
    ``vectors`` the dense vectors (rows aligned) when asked for.
    """

    collection: str
    ids: list[str]
    types: list[MemoryType]
    importance: npt.NDArray[np.float64]
    created_at: npt.NDArray[np.float64]
    cosine: npt.NDArray[np.float64]
    lexical: npt.NDArray[np.float64]
    scripts: list[str]
    valid_until: npt.NDArray[np.float64]
    vectors: npt.NDArray[np.float32] | None = None

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True, slots=True)
class CollectionSpec:
    """What a collection was built with. A server configured differently must refuse it."""

    name: str
    embedding_model: str
    dimension: int
    created_at: float
    #: The lexical encoder (e.g. "bm25-v1") whose sparse vectors the collection holds; None for a
    #: collection created without lexical retrieval (searched dense-only).
    lexical: str | None = None
    #: The storage format version the collection was written with (see
    #: ``engram_server.adapters.storage.payload.SPEC_FORMAT``); an older one is migrated.
    format: int = STORAGE_FORMAT
    #: When the collection was deleted (moved to the trash); None while it is not in the trash.
    trashed_at: float | None = None


@dataclass(frozen=True, slots=True)
class StoreFilter:
    """Conditions a storage query applies. Empty fields do not restrict.

    By default history versions (superseded_by set), reflection drafts and trashed memories
    (trashed_at set) are excluded; expired
    memories are excluded when ``live_at`` is given (valid_until > live_at).
    """

    types: tuple[MemoryType, ...] = ()
    tags_any: tuple[str, ...] = ()
    created_after: float | None = None  # created_at >= created_after
    created_before: float | None = None  # created_at < created_before
    min_importance: int | None = None  # importance >= min_importance
    source_types: tuple[SourceType, ...] = ()
    live_at: float | None = None  # valid_until > live_at
    expired_at: float | None = None  # valid_until <= expired_at (the sweeper)
    include_history: bool = False  # also match history versions
    only_history_of: str | None = None  # only history versions of this current id
    request_id: str | None = None  # only the memory created with this request_id
    request_ids: tuple[str, ...] = ()  # only memories created with one of these request_ids
    include_drafts: bool = False  # also match reflection drafts (excluded by default)
    unreflected: bool = False  # only memories never used as a reflection source (reflected_at unset)
    include_trashed: bool = False  # also match memories in the trash (excluded by default)
    only_trashed: bool = False  # only memories in the trash
    trashed_before: float | None = None  # only memories trashed at or before this time (purge)
    session_ids: tuple[str, ...] = ()  # only memories written in one of these sessions
    agent_ids: tuple[str, ...] = ()  # only memories written by one of these agents
    updated_after: float | None = None  # updated_at >= updated_after
    with_trigger: bool = False  # only memories carrying a trigger:<action> tag
    scripts: tuple[str, ...] = ()  # only memories whose script tag is one of these (payload "script")


@dataclass(frozen=True, slots=True)
class BackupStats:
    """What a store's backup wrote: bytes, and points (history versions included) per collection."""

    bytes: int
    points: Mapping[str, int]


def cosine(a: Vector, b: Vector) -> float:
    """Cosine similarity of two dense vectors (0 when either is all zeros)."""
    x = np.asarray(a, dtype=np.float64).reshape(-1)
    y = np.asarray(b, dtype=np.float64).reshape(-1)
    denom = float(np.linalg.norm(x) * np.linalg.norm(y))
    return float(x @ y) / denom if denom > 0 else 0.0
