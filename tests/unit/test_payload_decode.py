"""``record_from_payload`` (the embedded store's decoding of a point's payload): every field of a
record survives ``record_to_payload`` and back, enum values are read as the enums' own
constructors read them, and an unreadable payload is StorageUnavailable."""

from __future__ import annotations

import uuid
from dataclasses import fields

import pytest

from engram_server.adapters.storage.payload import canonical_ids, record_from_payload, record_to_payload
from engram_server.domain.errors import StorageUnavailable
from engram_server.domain.model import MemoryRecord, MemoryType, Source, SourceType


def _full_record() -> MemoryRecord:
    """A record with every field away from its default."""
    return MemoryRecord(
        id=str(uuid.uuid4()),
        collection="c",
        content="Alice moved to Berlin.",
        type=MemoryType.INSIGHT,
        importance=8,
        tags=("home", "move"),
        source=Source.USER,
        source_type=SourceType.USER_INPUT,
        source_type_history=(SourceType.UNKNOWN, SourceType.USER_INPUT),
        metadata={"k": "v", "n": "1"},
        created_at=1_800_000_000.5,
        updated_at=1_800_000_100.25,
        valid_until=1_900_000_000.0,
        version=3,
        superseded_by=str(uuid.uuid4()),
        access_count=7,
        last_accessed_at=1_800_000_200.0,
        reflected_at=1_800_000_300.0,
        request_id="req-1",
        request_hash="abc",
        near_duplicates=((str(uuid.uuid4()), 0.93),),
        derived_from=(str(uuid.uuid4()), str(uuid.uuid4())),
        draft=True,
        trashed_at=1_800_000_400.0,
        session_id="s-1",
        agent_id="a-1",
    )


def test_every_field_round_trips() -> None:
    rec = _full_record()
    assert all(getattr(rec, f.name) != f.default for f in fields(MemoryRecord) if f.name != "metadata")
    back = record_from_payload(uuid.UUID(rec.id), "c", record_to_payload(rec))
    assert back == rec
    for f in fields(MemoryRecord):  # the enums are the members themselves, not equal strings
        assert type(getattr(back, f.name)) is type(getattr(rec, f.name)), f.name


@pytest.mark.parametrize("t", list(MemoryType))
def test_every_enum_value_decodes_to_its_member(t: MemoryType) -> None:
    for source in Source:
        for st in SourceType:
            rec = MemoryRecord(
                id=str(uuid.uuid4()), collection="c", content="x", type=t, source=source, source_type=st
            )
            back = record_from_payload(rec.id, "c", record_to_payload(rec))
            assert (back.type, back.source, back.source_type) == (t, source, st)
            assert back.type is t and back.source is source and back.source_type is st


@pytest.mark.parametrize(
    ("key", "value"),
    [("type", "nonsense"), ("source", 3), ("source_type", None), ("source_type_history", ["bogus"])],
)
def test_an_unknown_enum_value_is_storage_unavailable(key: str, value: object) -> None:
    payload = record_to_payload(_full_record())
    payload[key] = value
    with pytest.raises(StorageUnavailable, match="unreadable payload"):
        record_from_payload(str(uuid.uuid4()), "c", payload)


def test_canonical_ids_as_uuid_prints_them() -> None:
    u = uuid.uuid4()
    raw = [str(u), str(u).upper(), "{" + str(u) + "}", u.hex, "urn:uuid:" + str(u), "nope", str(uuid.uuid4())]
    assert canonical_ids(raw) == list(dict.fromkeys(str(uuid.UUID(x)) for x in raw if x != "nope"))
