"""Timestamps leave the server exact to the nanosecond that float seconds can carry, and never
lose a second when the fraction rounds up; a Memory leaves it with every field."""

from __future__ import annotations

import pytest

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_server.api import convert as c
from engram_server.api.convert import ts_out
from engram_server.domain.model import NEVER, MemoryRecord, MemoryType, Source, SourceType


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (0.0, (0, 0)),
        (1.5, (1, 500_000_000)),
        (1_700_000_000.25, (1_700_000_000, 250_000_000)),
        (1.9999999999, (2, 0)),  # rounds up to the next second: carried, not dropped
        (-0.5, (-1, 500_000_000)),  # before the epoch: whole seconds down, nanos up (protobuf's form)
    ],
)
def test_ts_out(seconds: float, expected: tuple[int, int]) -> None:
    ts = ts_out(seconds)
    assert (ts.seconds, ts.nanos) == expected
    assert 0 <= ts.nanos < 1_000_000_000


def _memory_set_field_by_field(r: MemoryRecord) -> m.Memory:
    """A Memory built the plain way: every field assigned, timestamps copied in."""
    out = m.Memory()
    out.id, out.collection, out.content = r.id, r.collection, r.content
    out.type = c.TYPE_OUT[r.type]
    out.source = c.SOURCE_OUT[r.source]
    out.source_type = c.SOURCE_TYPE_OUT[r.source_type]
    out.source_type_history.extend(c.SOURCE_TYPE_OUT[x] for x in r.source_type_history)
    out.importance, out.version, out.access_count = r.importance, r.version, r.access_count
    out.tags.extend(r.tags)
    out.metadata.update(r.metadata)
    out.superseded_by = r.superseded_by or ""
    out.derived_from.extend(r.derived_from)
    out.draft = r.draft
    out.session_id, out.agent_id = r.session_id or "", r.agent_id or ""
    out.created_at.CopyFrom(ts_out(r.created_at))
    out.updated_at.CopyFrom(ts_out(r.updated_at))
    if r.valid_until < NEVER:
        out.valid_until.CopyFrom(ts_out(r.valid_until))
    for name in ("last_accessed_at", "reflected_at", "trashed_at"):
        value = getattr(r, name)
        if value is not None:
            getattr(out, name).CopyFrom(ts_out(value))
    return out


#: A record with every field set away from its default.
_EVERY_FIELD = MemoryRecord(
    id="b",
    collection="c",
    content="every field",
    type=MemoryType.INSIGHT,
    importance=0,
    tags=("x", "y"),
    source=Source.USER,
    source_type=SourceType.CALENDAR,
    source_type_history=(SourceType.CALENDAR, SourceType.DOCUMENT),
    metadata={"k": "v", "ключ": "значение"},
    created_at=1_700_000_000.25,
    updated_at=1_700_000_001.9999999999,
    valid_until=1_800_000_000.5,
    version=3,
    superseded_by="z",
    access_count=7,
    last_accessed_at=1_700_000_002.0,
    reflected_at=1_700_000_003.0,
    derived_from=("p", "q"),
    draft=True,
    trashed_at=1_700_000_004.0,
    session_id="s",
    agent_id="g",
)


@pytest.mark.parametrize(
    "record",
    [
        MemoryRecord(id="a", collection="c", content="plain", created_at=1.5, updated_at=2.25),
        _EVERY_FIELD,
    ],
)
def test_memory_out_is_the_memory_set_field_by_field(record: MemoryRecord) -> None:
    """The answer builder leaves out the fields at their default: the message is the one every
    field is set on (the same bytes)."""
    built = c.memory_out(record)
    assert built == c.memory_out(record) == _memory_set_field_by_field(record)
    assert built.SerializeToString(deterministic=True) == _memory_set_field_by_field(
        record
    ).SerializeToString(deterministic=True)


_ZERO_TIMES = MemoryRecord(
    id="z",
    collection="c",
    content="the epoch",
    created_at=0.0,
    updated_at=0.0,
    valid_until=0.0,
    last_accessed_at=0.0,
    reflected_at=0.0,
    trashed_at=0.0,
)


@pytest.mark.parametrize(
    "record",
    [
        MemoryRecord(id="a", collection="c", content="plain", created_at=1.5, updated_at=2.25),
        _ZERO_TIMES,  # timestamps of 0 s are still present (the answer says "at the epoch")
        _EVERY_FIELD,
    ],
)
def test_fill_memory_is_memory_out(record: MemoryRecord) -> None:
    """SearchMemories writes each result's Memory in place, field by field: the same message as
    ``memory_out`` (every field, the same presence of each timestamp, the same bytes)."""
    filled = m.Memory()
    c.fill_memory(filled, record)
    plain = _memory_set_field_by_field(record)
    assert filled == c.memory_out(record) == plain
    for name in ("created_at", "updated_at", "valid_until", "last_accessed_at", "reflected_at", "trashed_at"):
        assert filled.HasField(name) == plain.HasField(name), name
    assert filled.SerializeToString(deterministic=True) == plain.SerializeToString(deterministic=True)


def test_fill_score_is_score_out() -> None:
    from engram_server.domain.ranking import Score  # noqa: PLC0415

    score = Score(0.75, 0.5, 0.25, 0.125, 0.9, lexical=0.1, episode=0.2, rescore=-0.05, rerank=0.6)
    filled = m.ScoreBreakdown()
    c.fill_score(filled, score)
    assert filled == c.score_out(score)
    assert filled.SerializeToString(deterministic=True) == c.score_out(score).SerializeToString(
        deterministic=True
    )
