"""What both storage adapters share: the MemoryRecord <-> Qdrant payload codec, the payload
indexes every collection gets, the StoreFilter semantics (as backend-neutral conditions
each adapter translates), and the CollectionSpec JSON form.

Keeping these in one place is what makes the embedded (qdrant-edge) and the server
(qdrant-client) adapters behave identically; ``tests/storage`` proves it.

Payload layout (one point per memory; the point id is the memory's UUID string)::

    content: str            type: str (MemoryType value)      importance: int
    tags: [str]             source: str                       source_type: str
    source_type_history: [str]                                metadata: {str: str}
    created_at / updated_at / valid_until: float unix seconds (valid_until = NEVER if it never expires)
    version: int            access_count: int
    superseded_by: str      (absent for current memories)
    last_accessed_at / reflected_at: float (absent when unset)
    request_id / request_hash: str (absent when unset)
    near_duplicates: [[id, similarity], ...]
    derived_from: [str]     (reflection insights only)
    draft: "true"           (reflection drafts only; a keyword so its index serves the filter)
    trashed_at: float       (only while the memory is in the trash: when it was deleted)
    session_id / agent_id: str (absent when unset)
    has_trigger: "true"     (derived: the memory has a trigger:<action> tag; absent otherwise)

The collection name is not stored: a point lives in exactly one Qdrant collection.
"""

from __future__ import annotations

import json
import re
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Final, Literal, TypeVar

import numpy as np

from engram_server.domain.errors import InvalidArgument, StorageUnavailable
from engram_server.domain.model import (
    NEVER,
    STORAGE_FORMAT,
    Candidates,
    CollectionSpec,
    MemoryRecord,
    MemoryType,
    Source,
    SourceType,
    StoredPoint,
    StoreFilter,
    Vector,
    has_trigger_tag,
)
from engram_server.domain.ranking import RescoreCue, rescore_cue
from engram_server.domain.text import script_tag

__all__ = [
    "ACCESS_FIELDS",
    "ORDERABLE",
    "PAYLOAD_INDEXES",
    "Condition",
    "FilterPlan",
    "IsEmpty",
    "MatchAny",
    "MatchValue",
    "Range",
    "access_hits",
    "access_update",
    "as_vector",
    "candidate_columns",
    "canonical_ids",
    "canonical_offset",
    "encode_fields",
    "encode_updates",
    "filter_plan",
    "is_live",
    "point_id",
    "point_vectors",
    "rank_key",
    "record_from_payload",
    "record_to_payload",
    "spec_from_json",
    "spec_to_json",
    "split_live",
    "validate_collection_name",
    "validate_state_key",
]

IndexKind = Literal["keyword", "float", "integer"]

#: The payload indexes each collection is created with (field -> index kind).
PAYLOAD_INDEXES: Final[Mapping[str, IndexKind]] = {
    "type": "keyword",
    "tags": "keyword",
    "source_type": "keyword",
    "superseded_by": "keyword",
    "request_id": "keyword",
    "created_at": "float",
    "valid_until": "float",
    "importance": "integer",
    # Filters test these with is-empty conditions; without an index each test reads the point's
    # payload (measured: 24 ms instead of 1 ms for a filtered top-30 at 5k points).
    "draft": "keyword",
    "reflected_at": "float",
    # Since format 2: every filter but the trash's own tests it is empty.
    "trashed_at": "float",
    # Sessions (GetContext, filters by session and agent, the per-session cap) and triggers.
    "session_id": "keyword",
    "agent_id": "keyword",
    "updated_at": "float",
    "has_trigger": "keyword",
    # The write gate's second query: the nearest memories in the other script (translations).
    "script": "keyword",
}

#: The fields ``Store.top`` may order by (they have range indexes).
ORDERABLE: Final[frozenset[str]] = frozenset({"updated_at", "importance"})

_COLLECTION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


_STATE_KEY = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}$")


def validate_state_key(key: str) -> None:
    if not _STATE_KEY.match(key):
        raise ValueError(f"invalid state key {key!r}")


def validate_collection_name(name: str) -> None:
    """Collection names become directory names (edge) and Qdrant collection names (server):
    1-64 characters of ``[A-Za-z0-9_-]``, starting with a letter or digit."""
    if not _COLLECTION_NAME.match(name):
        raise InvalidArgument.of(
            "collection", "must be 1-64 characters of A-Z a-z 0-9 _ -, starting with a letter or digit"
        )


# --------------------------------------------------------------------------- records


def record_to_payload(record: MemoryRecord) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "content": record.content,
        "script": script_tag(record.content),  # derived, for cross-lingual calibration at search
        "type": record.type.value,
        "importance": int(record.importance),
        "tags": list(record.tags),
        "source": record.source.value,
        "source_type": record.source_type.value,
        "source_type_history": [s.value for s in record.source_type_history],
        "metadata": dict(record.metadata),
        "created_at": float(record.created_at),
        "updated_at": float(record.updated_at),
        "valid_until": float(record.valid_until),
        "version": int(record.version),
        "access_count": int(record.access_count),
        "near_duplicates": [[i, float(s)] for i, s in record.near_duplicates],
    }
    if record.derived_from:
        payload["derived_from"] = list(record.derived_from)
    if record.draft:
        payload["draft"] = "true"  # a keyword, so the index serves the is-empty filter
    if flag := trigger_flag(record.tags):
        payload["has_trigger"] = flag
    optional: dict[str, Any] = {
        "superseded_by": record.superseded_by,
        "last_accessed_at": None if record.last_accessed_at is None else float(record.last_accessed_at),
        "reflected_at": None if record.reflected_at is None else float(record.reflected_at),
        "trashed_at": None if record.trashed_at is None else float(record.trashed_at),
        "request_id": record.request_id,
        "request_hash": record.request_hash,
        "session_id": record.session_id,
        "agent_id": record.agent_id,
    }
    payload.update({k: v for k, v in optional.items() if v is not None})
    return payload


_E = TypeVar("_E")


def _enum_of(table: Mapping[str, _E], kind: Callable[[Any], _E], value: Any) -> _E:
    """``kind(value)`` through a table of its values (an enum call costs ≈ 1 µs); a value not in
    the table goes to ``kind`` itself (which raises ValueError for a value it does not know)."""
    got = table.get(value) if isinstance(value, str) else None
    return got if got is not None else kind(value)


_SOURCE_OF: Final[dict[str, Source]] = {s.value: s for s in Source}
_SOURCE_TYPE_OF: Final[dict[str, SourceType]] = {s.value: s for s in SourceType}
_MEMORY_TYPE_OF: Final[dict[str, MemoryType]] = {t.value: t for t in MemoryType}


def record_from_payload(point_id: object, collection: str, payload: Mapping[str, Any]) -> MemoryRecord:
    """Decode a stored payload. Unknown keys are ignored, so adding a field later does not
    break reading old points."""
    get = payload.get
    try:
        tags = get("tags")
        history = get("source_type_history")
        metadata = get("metadata")
        near = get("near_duplicates")
        derived = get("derived_from")
        # (fields in MemoryRecord's order, positionally, the optional ones inline: a search decodes
        # its winners on the event loop, and a helper call or keyword costs ≈ 0.1 µs a field)
        kind, source, source_type = payload["type"], payload["source"], payload["source_type"]
        return MemoryRecord(
            point_id if type(point_id) is str else str(point_id),
            collection,
            str(payload["content"]),
            (_MEMORY_TYPE_OF.get(kind) if type(kind) is str else None) or MemoryType(kind),
            int(payload["importance"]),
            tuple(map(str, tags)) if tags else (),
            (_SOURCE_OF.get(source) if type(source) is str else None) or Source(source),
            (_SOURCE_TYPE_OF.get(source_type) if type(source_type) is str else None)
            or SourceType(source_type),
            tuple(_enum_of(_SOURCE_TYPE_OF, SourceType, s) for s in history) if history else (),
            {str(k): str(v) for k, v in metadata.items()} if metadata else {},
            float(payload["created_at"]),
            float(payload["updated_at"]),
            float(payload["valid_until"]),
            int(payload["version"]),
            None if (superseded_by := get("superseded_by")) is None else str(superseded_by),
            int(get("access_count", 0)),
            None if (last_accessed_at := get("last_accessed_at")) is None else float(last_accessed_at),
            None if (reflected_at := get("reflected_at")) is None else float(reflected_at),
            None if (request_id := get("request_id")) is None else str(request_id),
            None if (request_hash := get("request_hash")) is None else str(request_hash),
            tuple((str(i), float(s)) for i, s in near) if near else (),
            tuple(map(str, derived)) if derived else (),
            get("draft") in (True, "true"),
            None if (trashed_at := get("trashed_at")) is None else float(trashed_at),
            None if (session_id := get("session_id")) is None else str(session_id),
            None if (agent_id := get("agent_id")) is None else str(agent_id),
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise StorageUnavailable(
            f"point {point_id} in collection {collection!r} has an unreadable payload: {exc!r}"
        ) from exc


#: The payload fields a ranking candidate needs (``Store.candidates`` fetches only these).
CANDIDATE_FIELDS: Final[tuple[str, ...]] = (
    "type",
    "importance",
    "created_at",
    "valid_until",
    "script",
    "superseded_by",
    "draft",
    "trashed_at",
)

_TYPE_OF: Final[dict[str, MemoryType]] = {t.value: t for t in MemoryType}

#: What ranking needs of a point, read from its payload: type, importance, created_at,
#: valid_until, script, and whether it is current (neither a history version, a draft nor in the
#: trash), so
#: that whether a point is live can be told without the engine (see :func:`rank_fields`); last,
#: the point's canonical id (a store may keep these by another key, see :func:`rank_key`).
RankFields = tuple[MemoryType, float, float, float, str, bool, str]


#: Shared objects for the few values importance and script take (rank fields are kept per point).
_IMPORTANCE: Final[dict[int, float]] = {i: float(i) for i in range(0, 11)}
_SCRIPTS: dict[str, str] = {}


def rank_fields(key: str, payload: Mapping[str, Any] | None, collection: str) -> RankFields:
    """The ranking fields (:data:`CANDIDATE_FIELDS`) of point ``key`` from its payload."""
    p = payload or {}
    try:
        importance = int(p["importance"])
        script = str(p.get("script") or "")
        return (
            _TYPE_OF[p["type"]],
            _IMPORTANCE.get(importance) or float(importance),
            float(p["created_at"]),
            float(p.get("valid_until", NEVER)),
            _SCRIPTS.setdefault(script, script) if len(_SCRIPTS) < 64 else script,
            _is_empty(p.get("superseded_by"))
            and _is_empty(p.get("draft"))
            and _is_empty(p.get("trashed_at")),
            key,
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise StorageUnavailable(
            f"point {key} in collection {collection!r} has an unreadable payload: {exc!r}"
        ) from exc


def payload_cue(payload: Mapping[str, Any] | None) -> RescoreCue:
    """The :class:`RescoreCue` of a point's text (``content``) from its payload (labels interned:
    a conversation's few speakers lead most memories)."""
    cue = rescore_cue(str((payload or {}).get("content") or ""))
    if cue.label is not None:
        cue = RescoreCue(sys.intern(cue.label), cue.question_share)
    return cue


def rank_key(point_id: str) -> int:
    """The 128-bit integer of a canonical point id: how the embedded store keys ranking fields
    (the engine hands ids back as ``uuid.UUID`` objects, whose ``.int`` costs nothing where
    ``str()`` costs more than a microsecond per hit)."""
    return uuid.UUID(point_id).int


#: The payload fields ``Store.add_access`` reads (the counters, and whether a point is current).
ACCESS_FIELDS: Final[tuple[str, ...]] = ("access_count", "last_accessed_at", "superseded_by")


def access_hits(hits: Mapping[str, tuple[int, float]]) -> dict[str, tuple[int, float]]:
    """``add_access`` input by canonical id (ids that are not UUIDs name no point: dropped; two
    spellings of one id add up)."""
    out: dict[str, tuple[int, float]] = {}
    for raw, (n, at) in hits.items():
        ids = canonical_ids([raw])
        if not ids:
            continue
        seen_n, seen_at = out.get(ids[0], (0, float(at)))
        out[ids[0]] = (seen_n + int(n), max(seen_at, float(at)))
    return out


def access_update(payload: Mapping[str, Any] | None, hits: int, at: float) -> dict[str, Any] | None:
    """The counters' new payload values (:data:`ACCESS_FIELDS` as stored) after ``hits`` more search
    hits, the last at ``at``; None for a history version (its counters stay as they were)."""
    p = payload or {}
    if not _is_empty(p.get("superseded_by")):
        return None
    last = p.get("last_accessed_at")
    return {
        "access_count": int(p.get("access_count") or 0) + int(hits),
        "last_accessed_at": float(at) if last is None else max(float(at), float(last)),
    }


def _is_empty(value: Any) -> bool:
    """What an is-empty condition (:class:`IsEmpty`) matches: absent, null or an empty list."""
    return value is None or value == []


def split_live(flt: StoreFilter) -> tuple[StoreFilter, float] | None:
    """``(user part, live_at)`` of a search filter whose liveness (:func:`is_live` at ``live_at``)
    the embedded store may decide from the ranking fields while the engine applies the rest: the
    user's conditions on type, tags, source type, creation time and importance, which change only
    when a point is written (the user part matches history and drafts too). None for any other
    filter (no ``live_at``, history, drafts, trash, request ids, reflection, expiry)."""
    live_at = flt.live_at
    if (
        live_at is None
        or flt.include_history
        or flt.include_drafts
        or flt.include_trashed
        or flt.only_trashed
        or flt.trashed_before is not None
        or flt.only_history_of is not None
        or flt.request_id is not None
        or flt.request_ids
        or flt.unreflected
        or flt.expired_at is not None
    ):
        return None
    # The ranking fields' live flag covers history, drafts and the trash (rank_fields).
    return replace(
        flt, live_at=None, include_history=True, include_drafts=True, include_trashed=True
    ), live_at


def is_live(rank: RankFields, live_at: float) -> bool:
    """Whether a point with these ranking fields matches ``StoreFilter(live_at=live_at)``."""
    return rank[5] and rank[3] > live_at


class CandidateBuilder:
    """Accumulates one collection's candidates (dense hits first, then lexical-only ones) into
    :class:`Candidates` columns, without a record object per hit."""

    __slots__ = (
        "_collection",
        "_row",
        "cos",
        "created",
        "ids",
        "imp",
        "lex",
        "scripts",
        "types",
        "until",
        "vecs",
    )

    def __init__(self, collection: str, *, with_vectors: bool) -> None:
        self._collection = collection
        self._row: dict[str, int] = {}
        self.ids: list[str] = []
        self.types: list[MemoryType] = []
        self.imp: list[float] = []
        self.created: list[float] = []
        self.cos: list[float] = []
        self.lex: list[float] = []
        self.scripts: list[str] = []
        self.until: list[float] = []
        self.vecs: list[Vector] | None = [] if with_vectors else None

    def __contains__(self, point_id: str) -> bool:
        return point_id in self._row

    def add(
        self,
        point_id: object,
        payload: Mapping[str, Any] | None,
        cosine: float,
        *,
        lexical: float = 0.0,
        vector: object = None,
    ) -> None:
        key = str(point_id)
        if key in self._row:
            return
        self.add_row(key, rank_fields(key, payload, self._collection), cosine, lexical=lexical, vector=vector)

    def add_row(
        self, key: str, rank: RankFields, cosine: float, *, lexical: float = 0.0, vector: object = None
    ) -> None:
        """Add a candidate whose ranking fields are known (no-op if ``key`` is already one)."""
        if key in self._row:
            return
        kind, importance, created, until, script, _, _ = rank
        self._row[key] = len(self.ids)
        self.ids.append(key)
        self.types.append(kind)
        self.imp.append(importance)
        self.created.append(created)
        self.cos.append(float(cosine))
        self.lex.append(float(lexical))
        self.scripts.append(script)
        self.until.append(until)
        if self.vecs is not None:
            if vector is None:
                raise StorageUnavailable(
                    f"point {key} in collection {self._collection!r} came back without its vector"
                )
            self.vecs.append(as_vector(vector))

    def set_lexical(self, point_id: str, score: float) -> bool:
        """Record the BM25 score of a candidate already added; False if it is not one."""
        row = self._row.get(point_id)
        if row is None:
            return False
        self.lex[row] = float(score)
        return True

    def build(self) -> Candidates:
        vectors = None
        if self.vecs is not None:
            vectors = np.vstack(self.vecs).astype(np.float32) if self.vecs else np.zeros((0, 0), np.float32)
        return Candidates(
            collection=self._collection,
            ids=self.ids,
            types=self.types,
            importance=np.asarray(self.imp, dtype=np.float64),
            created_at=np.asarray(self.created, dtype=np.float64),
            cosine=np.asarray(self.cos, dtype=np.float64),
            lexical=np.asarray(self.lex, dtype=np.float64),
            scripts=self.scripts,
            valid_until=np.asarray(self.until, dtype=np.float64),
            vectors=vectors,
        )


_SETTABLE: Final[frozenset[str]] = frozenset(f.name for f in fields(MemoryRecord)) - {"id", "collection"}


def candidate_columns(
    collection: str,
    keys: Sequence[str],
    ranks: Sequence[RankFields],
    cosine: Sequence[float],
    lexical: Sequence[float],
    *,
    vectors: Sequence[object] | None = None,
) -> Candidates:
    """:class:`Candidates` from rows already unique and in order (row ``i``: point ``keys[i]``, its
    ranking fields, scores and, when asked for, vector), column by column in one pass each (what
    :class:`CandidateBuilder` does row by row, several times cheaper for a search's hundreds)."""
    if not keys:
        return CandidateBuilder(collection, with_vectors=vectors is not None).build()
    types, importance, created, until, scripts, _, _ = zip(*ranks, strict=True)
    return candidates_from_columns(
        collection,
        keys,
        types=types,
        importance=importance,
        created_at=created,
        valid_until=until,
        scripts=scripts,
        cosine=cosine,
        lexical=lexical,
        vectors=vectors,
    )


def candidates_from_columns(
    collection: str,
    keys: Sequence[str],
    *,
    types: Sequence[MemoryType],
    importance: Sequence[float],
    created_at: Sequence[float],
    valid_until: Sequence[float],
    scripts: Sequence[str],
    cosine: Sequence[float],
    lexical: Sequence[float],
    vectors: Sequence[object] | None = None,
) -> Candidates:
    """:class:`Candidates` from its columns (row ``i`` is point ``keys[i]``), the dense vectors
    stacked when asked for (a missing one is :class:`StorageUnavailable`)."""
    stacked = None
    if vectors is not None:
        for key, v in zip(keys, vectors, strict=True):
            if v is None:
                raise StorageUnavailable(
                    f"point {key} in collection {collection!r} came back without its vector"
                )
        stacked = np.vstack([as_vector(v) for v in vectors]).astype(np.float32)
    return Candidates(
        collection=collection,
        ids=list(keys),
        types=list(types),
        importance=np.array(importance, dtype=np.float64),
        created_at=np.array(created_at, dtype=np.float64),
        cosine=np.array(cosine, dtype=np.float64),
        lexical=np.array(lexical, dtype=np.float64),
        scripts=list(scripts),
        valid_until=np.array(valid_until, dtype=np.float64),
        vectors=stacked,
    )


def _encode_value(name: str, value: Any) -> Any:
    """Encode one MemoryRecord field value the way :func:`record_to_payload` does."""
    if value is None:
        return None
    if name in ("type", "source", "source_type"):
        return str(value.value if hasattr(value, "value") else value)
    if name == "tags":
        return [str(t) for t in value]
    if name == "source_type_history":
        return [str(s.value if hasattr(s, "value") else s) for s in value]
    if name == "metadata":
        return {str(k): str(v) for k, v in value.items()}
    if name == "near_duplicates":
        return [[str(i), float(s)] for i, s in value]
    if name == "derived_from":
        return [str(i) for i in value]
    if name == "draft":
        return "true" if value else None
    if name in ("created_at", "updated_at", "valid_until", "last_accessed_at", "reflected_at", "trashed_at"):
        return float(value)
    if name in ("importance", "version", "access_count"):
        return int(value)
    return str(value)


def trigger_flag(tags: Any) -> str | None:
    """The derived ``has_trigger`` payload value of these tags, so "has a trigger tag" is one
    indexed match: ``"true"``, or None (absent) without a ``trigger:<action>`` tag."""
    return "true" if has_trigger_tag(list(tags)) else None


def encode_fields(updates: Mapping[str, Any]) -> dict[str, Any]:
    """``{field: value}`` of MemoryRecord field names -> payload values (for set_fields).
    ``None`` clears an optional field (stored as null, which filters treat as absent)."""
    unknown = set(updates) - _SETTABLE
    if unknown:
        raise ValueError(f"cannot set unknown or immutable memory fields: {sorted(unknown)}")
    out = {name: _encode_value(name, value) for name, value in updates.items()}
    if "tags" in updates:  # has_trigger is derived from the tags: kept in step with them
        out["has_trigger"] = trigger_flag(updates["tags"] or ())
    return out


def point_id(raw: str) -> str:
    """The canonical UUID form of a memory id that is about to be written."""
    try:
        return str(uuid.UUID(str(raw)))
    except ValueError as exc:
        raise InvalidArgument.of("id", f"memory id {raw!r} is not a UUID") from exc


def encode_updates(updates: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """set_fields input -> ``{canonical id: payload}``; ids that are not UUIDs are dropped
    (they cannot name a stored point), unknown field names raise ValueError."""
    out: dict[str, dict[str, Any]] = {}
    for raw, fields_ in updates.items():
        payload = encode_fields(fields_)
        ids = canonical_ids([raw])
        if ids and payload:
            out.setdefault(ids[0], {}).update(payload)
    return out


def canonical_offset(offset: str | None) -> str | None:
    if offset is None:
        return None
    ids = canonical_ids([offset])
    if not ids:
        raise InvalidArgument.of("offset", f"bad scroll offset {offset!r}")
    return ids[0]


def canonical_ids(ids: Iterable[str]) -> list[str]:
    """Ids in canonical UUID form, de-duplicated, in order; strings that are not UUIDs
    cannot name a stored point and are dropped (callers treat them as missing)."""
    out: dict[str, None] = {}
    canonical = _CANONICAL_UUID.fullmatch
    for raw in ids:
        if isinstance(raw, str) and canonical(raw):
            out[raw] = None  # (already canonical: parsing and printing it would give it back)
            continue
        try:
            out[str(uuid.UUID(str(raw)))] = None
        except ValueError:
            continue
    return list(out)


#: A UUID in its canonical text form (lower-case hex, hyphenated), as ``str(uuid.UUID(...))`` writes it.
_CANONICAL_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


# --------------------------------------------------------------------------- filters


@dataclass(frozen=True, slots=True)
class MatchValue:
    key: str
    value: str


@dataclass(frozen=True, slots=True)
class MatchAny:
    key: str
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Range:
    key: str
    gte: float | None = None
    gt: float | None = None
    lte: float | None = None
    lt: float | None = None


@dataclass(frozen=True, slots=True)
class IsEmpty:
    """The field is absent, null or an empty list."""

    key: str


Condition = MatchValue | MatchAny | Range | IsEmpty


@dataclass(frozen=True, slots=True)
class FilterPlan:
    """A conjunction of conditions (every one must hold). Empty = match everything."""

    must: tuple[Condition, ...]


def filter_plan(flt: StoreFilter) -> FilterPlan:
    """The single definition of StoreFilter semantics; adapters only translate the result."""
    must: list[Condition] = []
    if flt.only_history_of is not None:
        must.append(MatchValue("superseded_by", flt.only_history_of))
    elif not flt.include_history:
        must.append(IsEmpty("superseded_by"))
    if not flt.include_drafts:
        must.append(IsEmpty("draft"))
    if flt.only_trashed or flt.trashed_before is not None:
        must.append(
            Range(
                "trashed_at", gte=0.0, lte=None if flt.trashed_before is None else float(flt.trashed_before)
            )
        )
    elif not flt.include_trashed:
        must.append(IsEmpty("trashed_at"))
    if flt.unreflected:
        must.append(IsEmpty("reflected_at"))
    if flt.types:
        must.append(MatchAny("type", tuple(t.value for t in flt.types)))
    if flt.tags_any:
        must.append(MatchAny("tags", tuple(flt.tags_any)))
    if flt.source_types:
        must.append(MatchAny("source_type", tuple(s.value for s in flt.source_types)))
    if flt.session_ids:
        must.append(MatchAny("session_id", tuple(flt.session_ids)))
    if flt.agent_ids:
        must.append(MatchAny("agent_id", tuple(flt.agent_ids)))
    if flt.with_trigger:
        must.append(MatchValue("has_trigger", "true"))
    if flt.scripts:
        must.append(MatchAny("script", tuple(flt.scripts)))
    if flt.updated_after is not None:
        must.append(Range("updated_at", gte=float(flt.updated_after)))
    if flt.request_id is not None:
        must.append(MatchValue("request_id", flt.request_id))
    if flt.request_ids:
        must.append(MatchAny("request_id", tuple(flt.request_ids)))
    if flt.created_after is not None or flt.created_before is not None:
        must.append(
            Range(
                "created_at",
                gte=None if flt.created_after is None else float(flt.created_after),
                lt=None if flt.created_before is None else float(flt.created_before),
            )
        )
    if flt.live_at is not None or flt.expired_at is not None:
        must.append(
            Range(
                "valid_until",
                gt=None if flt.live_at is None else float(flt.live_at),
                lte=None if flt.expired_at is None else float(flt.expired_at),
            )
        )
    if flt.min_importance is not None:
        must.append(Range("importance", gte=float(flt.min_importance)))
    return FilterPlan(tuple(must))


# --------------------------------------------------------------------------- specs


def spec_to_json(spec: CollectionSpec) -> dict[str, Any]:
    out: dict[str, Any] = {
        "format": spec.format,
        "name": spec.name,
        "embedding_model": spec.embedding_model,
        "dimension": spec.dimension,
        "created_at": spec.created_at,
        "lexical": spec.lexical,
    }
    if spec.trashed_at is not None:
        out["trashed_at"] = spec.trashed_at
    return out


def spec_from_json(data: object, *, where: str) -> CollectionSpec:
    """Parse a stored spec; anything malformed is a clear StorageUnavailable naming ``where``.

    A spec of an older format (``format`` below :data:`STORAGE_FORMAT`) is read as is, its
    ``format`` telling the caller to migrate it; a newer one is refused (a newer release wrote it).
    """
    try:
        if isinstance(data, (str, bytes)):
            data = json.loads(data)
        if not isinstance(data, Mapping):
            raise TypeError(f"expected an object, got {type(data).__name__}")
        fmt = data.get("format")
        if isinstance(fmt, int) and not isinstance(fmt, bool) and fmt > STORAGE_FORMAT:
            raise StorageUnavailable(
                f"the collection at {where} has storage format {fmt}, written by a newer Engram release; "
                f"this server reads formats 1 to {STORAGE_FORMAT}: upgrade Engram"
            )
        if not isinstance(fmt, int) or isinstance(fmt, bool) or fmt < 1:
            raise ValueError(f"unsupported spec format {fmt!r}")
        dimension = data["dimension"]
        if not isinstance(dimension, int) or isinstance(dimension, bool) or dimension <= 0:
            raise ValueError(f"bad dimension {dimension!r}")
        trashed_at = data.get("trashed_at")
        return CollectionSpec(
            name=str(data["name"]),
            embedding_model=str(data["embedding_model"]),
            dimension=dimension,
            created_at=float(data["created_at"]),
            lexical=_optional_str(data.get("lexical")),
            format=fmt,
            trashed_at=None if trashed_at is None else float(trashed_at),
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise StorageUnavailable(f"corrupt collection spec at {where}: {exc}") from exc


def _optional_str(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"bad lexical encoder {value!r}")
    return value


#: The name of the lexical sparse vector in collections that have one (the dense one is unnamed).
LEXICAL_VECTOR = "lexical"


def point_vectors(spec: CollectionSpec, points: Sequence[StoredPoint]) -> list[list[float]]:
    """The points' vectors as float lists; every point must carry one of the spec's dimension."""
    out: list[list[float]] = []
    for p in points:
        if p.vector is None:
            raise InvalidArgument.of("vector", f"memory {p.record.id} has no vector; upsert needs one")
        vec = np.asarray(p.vector, dtype=np.float32).reshape(-1)
        if vec.shape[0] != spec.dimension:
            raise InvalidArgument.of(
                "vector",
                f"memory {p.record.id} has dimension {vec.shape[0]}, "
                f"collection {spec.name!r} expects {spec.dimension}",
            )
        out.append(vec.tolist())
    return out


def as_vector(values: object) -> Vector:
    """A backend's returned (dense) vector as a float32 numpy array.

    A collection with a lexical vector returns named vectors; the dense one is named "".
    """
    if isinstance(values, Mapping):
        values = values[""]
    return np.asarray(values, dtype=np.float32)
