"""The server store's packed ranking value (``PACKED_FIELD``): one payload value holding what the
candidate query reads of a point (its type, importance, ``created_at``, ``valid_until``, script
tag and rescoring cue), kept true by every writer, and read as the fields it packs.

Without a server: the packed value of every payload shape gives exactly the fields the full
decoding gives, and any other value is refused (the fields are read then). On the session's real
server node (``qdrant_server``; skips without one): after each writer (``upsert``, ``set_fields``
of each ranking field and of others, ``add_access``) every point's stored packed value is the one
of its stored fields, and the candidates read through it equal the client's, read field by field;
an update racing with another writer leaves no stale value; a collection with points written
before the field (none) is read correctly and asks for the fields until every point is packed.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from qdrant_client.conversions.conversion import json_to_value

from engram_server.adapters.storage import qdrant as qdrant_module
from engram_server.adapters.storage.qdrant import QdrantStore, _decoded_fields, _pack
from engram_server.adapters.storage.qdrant_cues import CUE_FIELDS
from engram_server.adapters.storage.qdrant_grpc import (
    PACKED_FIELD,
    SERVER_CANDIDATE_FIELDS,
    candidate_fields,
    pack_fields,
    packed_fields,
    payload_of,
)
from engram_server.domain.errors import StorageUnavailable
from engram_server.domain.model import MemoryType, SparseVector, StoredPoint, StoreFilter
from engram_server.domain.ranking import NO_CUE, RescoreCue
from tests.storage.test_qdrant_server_raw import (
    DIM,
    NOW,
    _payload_variants,
    _points,
    _same,
    _store_pair,
)
from tests.support.qdrant import QdrantNode


def _encoded(payload: dict[str, Any]) -> dict[str, bytes]:
    return {k: json_to_value(v).SerializeToString() for k, v in payload.items()}


def test_packed_values_give_the_fields_they_pack() -> None:
    """For every payload shape: the packed value written for it reads back as the fields the
    full decoding of the stored fields gives (and as ``candidate_fields`` where it reads them);
    a payload whose fields are unreadable gets no packed value."""
    packed_n = 0
    for i, payload in enumerate(_payload_variants()):
        key = str(uuid.UUID(int=i))
        columns = _encoded(payload)
        try:
            want = _decoded_fields(key, payload_of(columns), "default")
        except StorageUnavailable:
            assert _pack(payload, "default") is None, payload
            continue
        packed = _pack(payload, "default")
        if packed is None:  # (a number the JSON payload cannot hold)
            continue
        packed_n += 1
        got = packed_fields(_encoded({PACKED_FIELD: packed}))
        assert got == want, payload
        fast = candidate_fields(columns)
        assert fast is None or fast == got, payload
    assert packed_n >= 60


def test_other_packed_values_are_refused() -> None:
    """Anything but the layout the store writes reads as None (the fields are read instead)."""
    good = pack_fields((MemoryType.EVENT, 5.0, NOW, NOW + 10.0, "latin", RescoreCue("Ann", 0.5)))
    assert good is not None
    assert packed_fields(_encoded({PACKED_FIELD: good})) == (
        MemoryType.EVENT,
        5.0,
        NOW,
        NOW + 10.0,
        "latin",
        RescoreCue("Ann", 0.5),
    )
    no_label = pack_fields((MemoryType.INSIGHT, 0.0, 1.0, 2.0, "", NO_CUE))
    assert no_label is not None
    assert packed_fields(_encoded({PACKED_FIELD: no_label}))[5] is NO_CUE  # type: ignore[index]
    no_cue = pack_fields((MemoryType.IDENTITY, 3.0, 1.0, 2.0, "cjk", None))
    assert no_cue is not None and no_cue[3] == -1.0
    assert packed_fields(_encoded({PACKED_FIELD: no_cue})) == (
        MemoryType.IDENTITY,
        3.0,
        1.0,
        2.0,
        "cjk",
        None,
    )
    bad: list[Any] = [
        None,
        [],
        "x",
        5.0,
        good[:4],
        good[:5],
        [*good, "extra", "more"],
        [5, *good[1:]],  # an integer where a double is
        [*good[:4], "unknown", "latin"],
        [*good[:4], 7, "latin"],
        [*good[:3], "0.5", *good[4:]],
        [*good[:4], "event", "latin", 5],
        {"a": 1},
    ]
    for value in bad:
        assert packed_fields(_encoded({PACKED_FIELD: value})) is None, value
    data = _encoded({PACKED_FIELD: good})[PACKED_FIELD]
    for cut in range(len(data)):
        assert packed_fields({PACKED_FIELD: data[:cut]}) is None
    assert packed_fields({}) is None
    for row in (
        (MemoryType.EVENT, 5.0, float("inf"), 1.0, "", None),
        (MemoryType.EVENT, 5.0, 1.0, float("nan"), "", None),
        (MemoryType.EVENT, 5.0, 1.0, 1.0, "", RescoreCue(None, -0.5)),
    ):
        assert pack_fields(row) is None


# ---------------------------------------------------------------------------- on a server


@pytest.fixture
def prefix() -> str:
    return f"p{uuid.uuid4().hex[:12]}_"


@pytest.fixture
def points() -> list[StoredPoint]:
    return _points(np.random.default_rng(5))


@pytest.fixture
async def stores(
    qdrant_server: QdrantNode, prefix: str, points: list[StoredPoint]
) -> AsyncIterator[tuple[QdrantStore, QdrantStore]]:
    """(raw, client): two stores on one collection of N points, written by ``raw``."""
    async with _store_pair(qdrant_server, prefix, points) as (raw, old):
        assert raw._raw is not None
        old._raw = None  # qdrant-client's calls: candidates read field by field
        yield raw, old


async def _stored(store: QdrantStore) -> dict[str, dict[str, Any]]:
    records, _ = await store._c.scroll(store._qname("default"), limit=10_000, with_payload=True)
    return {str(r.id): r.payload or {} for r in records}


async def _packed_true(store: QdrantStore) -> int:
    """Every stored packed value is the one of the point's stored fields; how many points have one."""
    n = 0
    for pid, payload in (await _stored(store)).items():
        packed = payload.get(PACKED_FIELD)
        if packed is None:
            continue
        n += 1
        assert packed == _pack(payload, "default"), (pid, payload)
    return n


async def _same_candidates(raw: QdrantStore, old: QdrantStore, seed: int) -> None:
    rng = np.random.default_rng(seed)
    sparse = SparseVector((1, 7, 13, 21), (1.0, 0.5, 2.0, 0.25))
    for flt in (StoreFilter(live_at=NOW), StoreFilter(include_history=True, include_drafts=True)):
        for _ in range(3):
            q = rng.normal(size=DIM).astype(np.float32)
            a = await raw.candidates("default", q, 60, flt, sparse=sparse, lexical_limit=30)
            b = await old.candidates("default", q, 60, flt, sparse=sparse, lexical_limit=30)
            _same(a, b)
            assert a.ids
            assert await raw.rescore_cues("default", a.ids) == await old.rescore_cues("default", a.ids)


async def test_every_writer_keeps_the_packed_value_true(stores: tuple[QdrantStore, QdrantStore]) -> None:
    raw, old = stores
    assert await _packed_true(raw) == len(await _stored(raw))  # upsert: every point packed
    await _same_candidates(raw, old, 1)
    assert not raw._unpacked, "a collection written by this store is read through the packed value"
    records, _ = await raw.scroll("default", StoreFilter(include_history=True, include_drafts=True), 400)
    ids = [r.id for r in records]
    other = str(uuid.uuid4())  # no such point: skipped
    updates: list[dict[str, Any]] = [
        {"importance": 9},
        {"valid_until": NOW + 5.0},
        {"valid_until": NOW - 1.0},  # expired
        {"type": MemoryType.DIRECTIVE},
        {"created_at": NOW - 123.5},
        {"content": "Dora: why did the train stop? Nobody knows."},  # the cue follows the text
        {"content": "no label now"},
        {"superseded_by": ids[0], "valid_until": NOW - 2.0},  # superseded
        {"trashed_at": NOW - 1.0},
        {"trashed_at": None},
        {"draft": True},
        {"tags": ("x", "trigger:deploy")},  # not a ranking field
        {"importance": 2, "tags": ("y",), "reflected_at": NOW},
    ]
    for i, fields in enumerate(updates):
        chosen = ids[i * 7 : i * 7 + 5]
        before = await _stored(raw)
        await raw.set_fields("default", {**{pid: fields for pid in chosen}, other: fields})
        after = await _stored(raw)
        assert await _packed_true(raw) == len(after), fields
        if not set(fields) & {*SERVER_CANDIDATE_FIELDS, "content"}:
            assert all(after[pid][PACKED_FIELD] == before[pid][PACKED_FIELD] for pid in chosen)
        else:
            assert any(after[pid][PACKED_FIELD] != before[pid][PACKED_FIELD] for pid in chosen), fields
        await _same_candidates(raw, old, 10 + i)
    # the access counters are no ranking field: the packed values stay (and stay true)
    before = {pid: p[PACKED_FIELD] for pid, p in (await _stored(raw)).items()}
    assert await raw.add_access("default", {pid: (2, NOW + 3.0) for pid in ids[:50]})
    assert {pid: p[PACKED_FIELD] for pid, p in (await _stored(raw)).items()} == before
    assert await _packed_true(raw) == len(before)
    await _same_candidates(raw, old, 99)
    assert not raw._unpacked


async def test_a_field_changed_during_an_update_leaves_no_stale_packed_value(
    stores: tuple[QdrantStore, QdrantStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer (another replica, another program) changes a ranking field between
    ``set_fields``' read and its write: the packed value written from the read is stale, and the
    check after the write clears it; the point is then read field by field, correctly."""
    raw, old = stores
    records, _ = await raw.scroll("default", StoreFilter(live_at=NOW), 20)
    target, untouched = records[0].id, records[1].id
    racing_importance = 10 if records[0].importance != 10 else 9  # (a change)
    qname = raw._qname("default")
    client = raw._c
    real = client.batch_update_points

    async def racing(*a: Any, **kw: Any) -> Any:
        await client.set_payload(qname, payload={"importance": racing_importance}, points=[target], wait=True)
        return await real(*a, **kw)

    monkeypatch.setattr(client, "batch_update_points", racing)
    await raw.set_fields(
        "default", {target: {"valid_until": NOW + 77.0}, untouched: {"valid_until": NOW + 78.0}}
    )
    monkeypatch.setattr(client, "batch_update_points", real)
    stored = await _stored(raw)
    assert stored[target]["importance"] == racing_importance and stored[target]["valid_until"] == NOW + 77.0
    assert stored[target].get(PACKED_FIELD) is None, "the stale packed value is cleared"
    assert stored[untouched][PACKED_FIELD] == _pack(stored[untouched], "default")
    assert await _packed_true(raw) == len(stored) - 1
    await _same_candidates(raw, old, 5)
    # a later update of a ranking field packs it again
    await raw.set_fields("default", {target: {"importance": 4}})
    assert await _packed_true(raw) == len(stored)


async def test_points_without_the_packed_value_are_read_from_their_fields(
    stores: tuple[QdrantStore, QdrantStore], points: list[StoredPoint], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collection with points written before the packed value (or without cue fields either):
    the candidates equal the client's; its candidate queries ask for the fields too, until one
    finds every point packed again; a fully packed collection costs one call a query."""
    raw, old = stores
    stored = await _stored(raw)
    some = list(stored)[::3]
    qname = raw._qname("default")
    await raw._c.delete_payload(qname, keys=[PACKED_FIELD], points=some[::2], wait=True)
    await raw._c.delete_payload(qname, keys=[PACKED_FIELD, *CUE_FIELDS], points=some[1::2], wait=True)
    calls: list[str] = []
    assert raw._raw is not None
    for name in ("get", "query_batch"):
        real = getattr(raw._raw, name)

        async def counted(*a: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
            calls.append(_name)
            return await _real(*a, **kw)

        monkeypatch.setattr(raw._raw, name, counted)
    await _same_candidates(raw, old, 3)
    assert "default" in raw._unpacked
    raw._unpacked.clear()
    q = np.random.default_rng(8).normal(size=DIM).astype(np.float32)
    for _ in range(3):
        calls.clear()
        await raw.candidates("default", q, 60, StoreFilter(live_at=NOW))
        assert calls == ["query_batch", "get"] if _ == 0 else ["query_batch"], calls
        assert "default" in raw._unpacked  # the first reads the unpacked points' fields, then asks for them
    # every point written again (as a release with the packed value writes it): packed-only again
    by_id = {p.record.id: p for p in points}
    await raw.upsert("default", [by_id[pid] for pid in some])
    await _same_candidates(raw, old, 4)
    assert "default" not in raw._unpacked
    for _ in range(2):
        calls.clear()
        await raw.candidates("default", q, 60, StoreFilter(live_at=NOW))
        assert calls == ["query_batch"]
        assert "default" not in raw._unpacked
    assert qdrant_module.PACKED_FIELD == PACKED_FIELD
