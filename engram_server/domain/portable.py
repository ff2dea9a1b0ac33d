"""Engram's export format: JSON Lines, versioned (docs/reference/export-format.md).

A file is one or more sections, one per collection. A section is a header line::

    {"engram_export": 1, "collection": "default", "embedding_model": "...", "dimension": 384, ...}

then one line per current memory: every field of the record, its history versions under
``"history"`` (newest first) and, when exported with vectors, ``"vector"`` (base64 of the
little-endian float32 embedding) on the memory and on each history version. Times are unix
seconds (JSON numbers, exact round trip); enums are their lower-case names.

Pure: no gRPC, no storage. Parsing raises :class:`LineError` naming what is wrong; the caller
adds the line number.
"""

from __future__ import annotations

import base64
import json
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from engram_server.domain.model import (
    NEVER,
    CollectionSpec,
    MemoryRecord,
    MemoryType,
    Source,
    SourceType,
    Vector,
)

__all__ = [
    "FORMAT_VERSION",
    "ExportHeader",
    "ExportedMemory",
    "LineError",
    "decode_vector",
    "encode_vector",
    "header_line",
    "memory_line",
    "parse_line",
]

#: The format version this server writes and reads (``"engram_export"`` in every header).
FORMAT_VERSION = 1


class LineError(ValueError):
    """A line that is not a valid header or memory line (the message says why)."""


@dataclass(frozen=True, slots=True)
class ExportHeader:
    """A section header: which collection, and what its vectors were made with."""

    collection: str
    embedding_model: str
    dimension: int
    created_at: float
    lexical: str | None
    exported_at: float
    vectors: bool
    memories: int
    version: int = FORMAT_VERSION

    @classmethod
    def of(cls, spec: CollectionSpec, *, exported_at: float, vectors: bool, memories: int) -> ExportHeader:
        return cls(
            spec.name, spec.embedding_model, spec.dimension, spec.created_at, spec.lexical,
            exported_at, vectors, memories,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class ExportedMemory:
    """A memory line: the current record, its history versions and their vectors (if any)."""

    record: MemoryRecord
    vector: Vector | None
    history: tuple[tuple[MemoryRecord, Vector | None], ...]


# --- writing ---------------------------------------------------------------------------------


def encode_vector(vector: Vector) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def _dumps(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode() + b"\n"


def header_line(h: ExportHeader) -> bytes:
    return _dumps(
        {
            "engram_export": h.version,
            "collection": h.collection,
            "embedding_model": h.embedding_model,
            "dimension": h.dimension,
            "created_at": h.created_at,
            "lexical": h.lexical,
            "exported_at": h.exported_at,
            "vectors": h.vectors,
            "memories": h.memories,
        }
    )


def _record_fields(r: MemoryRecord) -> dict[str, Any]:
    return {
        "id": r.id,
        "content": r.content,
        "type": r.type.value,
        "importance": r.importance,
        "tags": list(r.tags),
        "source": r.source.value,
        "source_type": r.source_type.value,
        "source_type_history": [x.value for x in r.source_type_history],
        "metadata": dict(r.metadata),
        "created_at": r.created_at,
        "updated_at": r.updated_at,
        "valid_until": None if r.valid_until >= NEVER else r.valid_until,
        "version": r.version,
        "superseded_by": r.superseded_by,
        "access_count": r.access_count,
        "last_accessed_at": r.last_accessed_at,
        "reflected_at": r.reflected_at,
        "request_id": r.request_id,
        "request_hash": r.request_hash,
        "near_duplicates": [[i, s] for i, s in r.near_duplicates],
        "derived_from": list(r.derived_from),
        "draft": r.draft,
        "session_id": r.session_id,
        "agent_id": r.agent_id,
    }


def memory_line(m: ExportedMemory) -> bytes:
    out = _record_fields(m.record)
    if m.vector is not None:
        out["vector"] = encode_vector(m.vector)
    history = []
    for record, vector in m.history:
        h = _record_fields(record)
        if vector is not None:
            h["vector"] = encode_vector(vector)
        history.append(h)
    out["history"] = history
    return _dumps(out)


# --- reading ---------------------------------------------------------------------------------


def decode_vector(raw: object, where: str) -> Vector:
    if not isinstance(raw, str):
        raise LineError(f"{where}: must be a base64 string")
    try:
        data = base64.b64decode(raw, validate=True)
    except ValueError as exc:
        raise LineError(f"{where}: not base64 ({exc})") from None
    if not data or len(data) % 4:
        raise LineError(f"{where}: {len(data)} bytes is not a float32 vector")
    vector = np.frombuffer(data, dtype="<f4").astype(np.float32)
    if not np.all(np.isfinite(vector)):
        raise LineError(f"{where}: holds a value that is not a finite number")
    return vector


def _get(
    obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str, default: Any = ...
) -> Any:
    if key not in obj or obj[key] is None:
        if default is ...:
            raise LineError(f"{where}{key}: missing")
        return default
    value = obj[key]
    if isinstance(value, bool) and kind is not bool and bool not in (kind if isinstance(kind, tuple) else ()):
        raise LineError(f"{where}{key}: must be a {_kind_name(kind)}, got a boolean")
    if not isinstance(value, kind):
        raise LineError(f"{where}{key}: must be a {_kind_name(kind)}, got {type(value).__name__}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    if isinstance(kind, tuple):
        return " or ".join(k.__name__ for k in kind)
    return {"str": "string", "int": "integer", "list": "list", "dict": "object"}.get(
        kind.__name__, kind.__name__
    )


def _time(obj: Mapping[str, Any], key: str, where: str, default: Any = ...) -> Any:
    value = _get(obj, key, (int, float), where, default)
    if value is not None and value is not default and (not math.isfinite(value) or value < 0):
        raise LineError(f"{where}{key}: must be a non-negative number of unix seconds")
    return float(value) if isinstance(value, int) else value


def _enum(obj: Mapping[str, Any], key: str, enum: Any, where: str, default: Any) -> Any:
    raw = _get(obj, key, str, where, None)
    if raw is None:
        return default
    try:
        return enum(raw)
    except ValueError:
        allowed = ", ".join(x.value for x in enum)
        raise LineError(f"{where}{key}: {raw!r} is not one of {allowed}") from None


def _strings(obj: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    values = _get(obj, key, list, where, [])
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise LineError(f"{where}{key}[{i}]: must be a string")
    return tuple(values)


def _record(obj: Any, collection: str, where: str) -> tuple[MemoryRecord, Vector | None]:
    if not isinstance(obj, dict):
        raise LineError(f"{where or 'line'}: must be a JSON object")
    memory_id = _get(obj, "id", str, where)
    try:
        uuid.UUID(memory_id)
    except ValueError:
        raise LineError(f"{where}id: {memory_id!r} is not a memory id (UUID)") from None
    metadata = _get(obj, "metadata", dict, where, {})
    for k, v in metadata.items():
        if not isinstance(v, str):
            raise LineError(f"{where}metadata.{k}: must be a string")
    near = _get(obj, "near_duplicates", list, where, [])
    pairs: list[tuple[str, float]] = []
    for i, pair in enumerate(near):
        if not (
            isinstance(pair, list)
            and len(pair) == 2
            and isinstance(pair[0], str)
            and isinstance(pair[1], (int, float))
        ):
            raise LineError(f"{where}near_duplicates[{i}]: must be [id, similarity]")
        pairs.append((pair[0], float(pair[1])))
    valid_until = _time(obj, "valid_until", where, None)
    record = MemoryRecord(
        id=memory_id,
        collection=collection,
        content=_get(obj, "content", str, where),
        type=_enum(obj, "type", MemoryType, where, MemoryType.EVENT),
        importance=_get(obj, "importance", int, where, 5),
        tags=_strings(obj, "tags", where),
        source=_enum(obj, "source", Source, where, Source.AGENT),
        source_type=_enum(obj, "source_type", SourceType, where, SourceType.UNKNOWN),
        source_type_history=tuple(
            _enum({"x": x}, "x", SourceType, f"{where}source_type_history[{i}].", SourceType.UNKNOWN)
            for i, x in enumerate(_strings(obj, "source_type_history", where))
        ),
        metadata=dict(metadata),
        created_at=_time(obj, "created_at", where),
        updated_at=_time(obj, "updated_at", where, 0.0),
        valid_until=NEVER if valid_until is None else valid_until,
        version=_get(obj, "version", int, where, 1),
        superseded_by=_get(obj, "superseded_by", str, where, None),
        access_count=_get(obj, "access_count", int, where, 0),
        last_accessed_at=_time(obj, "last_accessed_at", where, None),
        reflected_at=_time(obj, "reflected_at", where, None),
        request_id=_get(obj, "request_id", str, where, None),
        request_hash=_get(obj, "request_hash", str, where, None),
        near_duplicates=tuple(pairs),
        derived_from=_strings(obj, "derived_from", where),
        draft=_get(obj, "draft", bool, where, False),
        session_id=_get(obj, "session_id", str, where, None),
        agent_id=_get(obj, "agent_id", str, where, None),
    )
    vector = decode_vector(obj["vector"], f"{where}vector") if obj.get("vector") is not None else None
    return record, vector


def parse_line(raw: bytes, collection: str | None) -> ExportHeader | ExportedMemory:
    """One line: a header, or a memory of ``collection`` (the section's; None before any header)."""
    try:
        obj = json.loads(raw)
    except UnicodeDecodeError as exc:
        raise LineError(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except ValueError as exc:
        raise LineError(f"not JSON ({exc}): truncated or corrupt") from None
    if not isinstance(obj, dict):
        raise LineError("must be a JSON object")
    if "engram_export" in obj:
        version = obj["engram_export"]
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise LineError("engram_export: must be the format version (a positive integer)")
        if version > FORMAT_VERSION:
            raise LineError(
                f"format version {version} is newer than this server reads ({FORMAT_VERSION}); "
                "upgrade the server"
            )
        dimension = _get(obj, "dimension", int, "")
        if dimension < 1:
            raise LineError("dimension: must be positive")
        return ExportHeader(
            collection=_get(obj, "collection", str, ""),
            embedding_model=_get(obj, "embedding_model", str, ""),
            dimension=dimension,
            created_at=_time(obj, "created_at", "", 0.0),
            lexical=_get(obj, "lexical", str, "", None),
            exported_at=_time(obj, "exported_at", "", 0.0),
            vectors=_get(obj, "vectors", bool, "", False),
            memories=_get(obj, "memories", int, "", 0),
            version=version,
        )
    if collection is None:
        raise LineError("a memory line before any header line (the file must start with a header)")
    record, vector = _record(obj, collection, "")
    if record.superseded_by is not None:
        raise LineError("superseded_by: a memory line holds a current memory (history goes in 'history')")
    history = []
    for i, h in enumerate(_get(obj, "history", list, "", [])):
        past, past_vector = _record(h, collection, f"history[{i}].")
        if past.superseded_by != record.id:
            raise LineError(f"history[{i}].superseded_by: must be the memory's id {record.id}")
        history.append((past, past_vector))
    return ExportedMemory(record, vector, tuple(history))
