"""One behaviour suite for every Store adapter (edge, qdrant-client :memory:, qdrant-client path).

Filters are checked against a plain-Python reading of the StoreFilter docstring, so the suite
does not reuse the adapters' own filter translation."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest

from engram_server.domain.errors import CollectionNotFound, InvalidArgument
from engram_server.domain.model import (
    NEVER,
    CollectionSpec,
    MemoryRecord,
    MemoryType,
    Source,
    SourceType,
    StoredPoint,
    StoreFilter,
    Vector,
)
from engram_server.domain.text import script_tag
from engram_server.ports import Store

# ------------------------------------------------------------------ helpers

DIM = 16
PERSISTENT_BACKENDS = ("edge", "qdrant-path", "qdrant-server")


def spec(name: str = "default", dimension: int = DIM) -> CollectionSpec:
    return CollectionSpec(
        name=name, embedding_model="test/random", dimension=dimension, created_at=1_700_000_000.5
    )


def unit_vectors(n: int, rng: np.random.Generator, dim: int = DIM) -> Vector:
    v = rng.normal(size=(n, dim)).astype(np.float32)
    out: Vector = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)
    return out


def record(collection: str = "default", **kw: Any) -> MemoryRecord:
    base = MemoryRecord(
        id=str(uuid.uuid4()), collection=collection, content="c", created_at=1000.0, updated_at=1000.0
    )
    return replace(base, **kw)


def points(records: list[MemoryRecord], vectors: Vector) -> list[StoredPoint]:
    return [StoredPoint(r, vectors[i]) for i, r in enumerate(records)]


# ------------------------------------------------------------------ collections


async def test_collection_lifecycle_and_spec_round_trip(store: Store) -> None:
    assert await store.list_collections() == []
    assert await store.get_collection("a") is None
    a, b = spec("a"), spec("b-2", dimension=8)
    await store.create_collection(a)
    await store.create_collection(b)
    await store.create_collection(spec("a", dimension=32))  # exists: no-op, keeps the first spec
    assert await store.get_collection("a") == a
    assert await store.get_collection("b-2") == b
    assert await store.list_collections() == [a, b]

    rng = np.random.default_rng(1)
    await store.upsert("a", points([record("a") for _ in range(3)], unit_vectors(3, rng)))
    assert await store.drop_collection("a") == 3
    assert await store.get_collection("a") is None
    assert await store.list_collections() == [b]
    assert await store.drop_collection("a") == 0
    await store.create_collection(a)  # a dropped name can be reused, empty
    assert await store.count("a", StoreFilter()) == 0


async def test_unknown_collection_and_bad_names(store: Store) -> None:
    v = unit_vectors(1, np.random.default_rng(2))
    with pytest.raises(CollectionNotFound):
        await store.upsert("nope", points([record("nope")], v))
    with pytest.raises(CollectionNotFound):
        await store.search("nope", v[0], 3, StoreFilter())
    with pytest.raises(CollectionNotFound):
        await store.count("nope", StoreFilter())
    with pytest.raises(CollectionNotFound):
        await store.scroll("nope", StoreFilter(), 10)
    for bad in ("", "../x", "a/b", "with space", "x" * 65):
        with pytest.raises(InvalidArgument):
            await store.create_collection(spec(bad))


async def test_upsert_validates_vectors_and_ids(store: Store) -> None:
    await store.create_collection(spec())
    with pytest.raises(InvalidArgument):
        await store.upsert("default", [StoredPoint(record(), np.ones(DIM + 1, dtype=np.float32))])
    with pytest.raises(InvalidArgument):
        await store.upsert("default", [StoredPoint(record(), None)])
    with pytest.raises(InvalidArgument):
        await store.upsert("default", [StoredPoint(record(id="not-a-uuid"), np.ones(DIM, dtype=np.float32))])
    assert await store.count("default", StoredFilter_all()) == 0


def StoredFilter_all() -> StoreFilter:
    return StoreFilter(include_history=True)


# ------------------------------------------------------------------ records


def full_record(collection: str = "default") -> MemoryRecord:
    return MemoryRecord(
        id=str(uuid.uuid4()),
        collection=collection,
        content="Alice prefers tea — 爱丽丝喜欢茶",
        type=MemoryType.DIRECTIVE,
        importance=9,
        tags=("drinks", "prefs"),
        source=Source.USER,
        source_type=SourceType.DOCUMENT,
        source_type_history=(SourceType.WEB_SEARCH, SourceType.DOCUMENT),
        metadata={"k": "v", "lang": "zh"},
        created_at=1_700_000_000.25,
        updated_at=1_700_000_100.5,
        valid_until=1_800_000_000.75,
        version=3,
        superseded_by=None,
        access_count=7,
        last_accessed_at=1_700_000_200.125,
        reflected_at=1_700_000_300.0,
        request_id="req-1",
        request_hash="sha256:abc",
        near_duplicates=((str(uuid.uuid4()), 0.875), (str(uuid.uuid4()), 0.8125)),
    )


async def test_round_trip_every_field(store: Store) -> None:
    await store.create_collection(spec())
    rng = np.random.default_rng(3)
    full = full_record()
    minimal = record(content="")  # every optional field at its default
    history = replace(full_record(), superseded_by=full.id, version=2)
    vecs = unit_vectors(3, rng)
    await store.upsert("default", points([full, minimal, history], vecs))

    got = await store.retrieve("default", [full.id, minimal.id, history.id, str(uuid.uuid4()), "junk"])
    by_id = {p.record.id: p for p in got}
    assert set(by_id) == {full.id, minimal.id, history.id}
    assert by_id[full.id].record == full
    assert by_id[minimal.id].record == minimal
    assert by_id[history.id].record == history
    assert all(p.vector is None for p in got)

    with_vec = await store.retrieve("default", [full.id, minimal.id], with_vectors=True)
    for p in with_vec:
        assert p.vector is not None and p.vector.dtype == np.float32
        expected = vecs[0] if p.record.id == full.id else vecs[1]
        np.testing.assert_allclose(p.vector, expected, atol=1e-6)

    assert await store.retrieve("default", []) == []


async def test_upsert_replaces(store: Store) -> None:
    await store.create_collection(spec())
    rng = np.random.default_rng(4)
    r = record(content="v1")
    await store.upsert("default", points([r], unit_vectors(1, rng)))
    r2 = replace(r, content="v2", version=2, tags=("x",))
    v2 = unit_vectors(1, rng)
    await store.upsert("default", points([r2], v2))
    [got] = await store.retrieve("default", [r.id], with_vectors=True)
    assert got.record == r2
    assert got.vector is not None
    np.testing.assert_allclose(got.vector, v2[0], atol=1e-6)
    assert await store.count("default", StoreFilter()) == 1


# ------------------------------------------------------------------ search


async def test_search_orders_by_true_cosine(store: Store) -> None:
    await store.create_collection(spec())
    rng = np.random.default_rng(5)
    n = 60
    vecs = unit_vectors(n, rng)
    recs = [record() for _ in range(n)]
    await store.upsert("default", points(recs, vecs))
    for qi in range(5):
        q = rng.normal(size=DIM).astype(np.float32)  # not normalised: cosine must still be right
        cos = vecs @ q / np.linalg.norm(q)
        order = np.argsort(-cos)
        hits = await store.search("default", q, 10, StoreFilter(), with_vectors=qi == 0)
        assert [h.record.id for h in hits] == [recs[i].id for i in order[:10]]
        np.testing.assert_allclose([h.score for h in hits], cos[order[:10]], atol=1e-5)
        if qi == 0:
            for h, i in zip(hits, order[:10], strict=True):
                assert h.vector is not None
                np.testing.assert_allclose(h.vector, vecs[i], atol=1e-6)
        else:
            assert all(h.vector is None for h in hits)
    assert len(await store.search("default", vecs[0], 1000, StoreFilter())) == n
    assert await store.search("default", vecs[0], 0, StoreFilter()) == []


async def test_search_batch_equals_one_search_per_vector(store: Store) -> None:
    await store.create_collection(spec())
    rng = np.random.default_rng(6)
    vecs = unit_vectors(80, rng)
    recs = [record(importance=1 + i % 10) for i in range(80)]
    await store.upsert("default", points(recs, vecs))
    queries = rng.normal(size=(7, DIM)).astype(np.float32)
    for flt in (StoreFilter(), StoreFilter(min_importance=6)):
        batch = await store.search_batch("default", queries, 8, flt)
        assert len(batch) == len(queries)
        for q, hits in zip(queries, batch, strict=True):
            one = await store.search("default", q, 8, flt)
            assert [h.record for h in hits] == [h.record for h in one]
            np.testing.assert_allclose([h.score for h in hits], [h.score for h in one], atol=1e-6)
            assert all(h.vector is None for h in hits)
            assert len(hits) == 8 and all(h.record.importance >= (flt.min_importance or 0) for h in hits)
    assert await store.search_batch("default", queries[:0], 8, StoreFilter()) == []
    assert await store.search_batch("default", queries, 0, StoreFilter()) == [[]] * len(queries)


# ------------------------------------------------------------------ filters


def reference_match(r: MemoryRecord, f: StoreFilter) -> bool:
    """StoreFilter's docstring, read literally."""
    if f.only_history_of is not None:
        if r.superseded_by != f.only_history_of:
            return False
    elif not f.include_history and r.superseded_by is not None:
        return False
    checks = [
        not f.types or r.type in f.types,
        not f.tags_any or bool(set(r.tags) & set(f.tags_any)),
        f.created_after is None or r.created_at >= f.created_after,
        f.created_before is None or r.created_at < f.created_before,
        f.min_importance is None or r.importance >= f.min_importance,
        not f.source_types or r.source_type in f.source_types,
        f.live_at is None or r.valid_until > f.live_at,
        f.expired_at is None or r.valid_until <= f.expired_at,
        f.request_id is None or r.request_id == f.request_id,
        not f.request_ids or r.request_id in f.request_ids,
        not f.scripts or script_tag(r.content) in f.scripts,
        f.include_drafts or not r.draft,
        not f.unreflected or r.reflected_at is None,
        # the trash: left out unless asked for; only_trashed / trashed_before keep only it
        (r.trashed_at is not None and (f.trashed_before is None or r.trashed_at <= f.trashed_before))
        if f.only_trashed or f.trashed_before is not None
        else f.include_trashed or r.trashed_at is None,
    ]
    return all(checks)


def dataset(rng: np.random.Generator) -> list[MemoryRecord]:
    types = list(MemoryType)
    sts = list(SourceType)
    tag_pool = ["a", "b", "c", "d"]
    recs: list[MemoryRecord] = []
    for i in range(48):
        tags = tuple(t for t in tag_pool if rng.random() < 0.35)
        recs.append(
            record(
                content=(f"记忆{i}", f"memory {i}", f"记忆 {i} memory")[i % 3],  # cjk, latin, cjk+latin
                type=types[i % 4],
                importance=int(i % 10) + 1,
                tags=tags,
                source_type=sts[i % len(sts)],
                created_at=1000.0 + 10 * (i % 12),  # duplicates make >= / < boundaries matter
                valid_until=NEVER if i % 3 == 0 else 2000.0 + 50 * (i % 7),
                request_id=f"req-{i}" if i % 5 == 0 else None,
                draft=i % 7 == 3,
                reflected_at=1500.0 + i if i % 4 == 1 else None,
                derived_from=(f"src-{i}",) if i % 7 == 3 else (),
                trashed_at=3000.0 + i if i % 11 == 5 else None,
            )
        )
    current = recs[0].id
    recs[40] = replace(recs[40], superseded_by=current, version=1)
    recs[41] = replace(recs[41], superseded_by=current, version=2)
    recs[42] = replace(recs[42], superseded_by=recs[1].id)
    return recs


FILTERS: list[StoreFilter] = [
    StoreFilter(),
    StoreFilter(include_history=True),
    StoreFilter(only_history_of="__first__"),
    StoreFilter(only_history_of=str(uuid.uuid4())),
    StoreFilter(types=(MemoryType.EVENT,)),
    StoreFilter(types=(MemoryType.IDENTITY, MemoryType.INSIGHT)),
    StoreFilter(tags_any=("a",)),
    StoreFilter(tags_any=("b", "d")),
    StoreFilter(tags_any=("zzz",)),
    StoreFilter(created_after=1050.0),
    StoreFilter(created_before=1050.0),
    StoreFilter(created_after=1030.0, created_before=1070.0),
    StoreFilter(min_importance=7),
    StoreFilter(source_types=(SourceType.USER_INPUT, SourceType.REFLECTION)),
    StoreFilter(live_at=2150.0),
    StoreFilter(expired_at=2150.0),
    StoreFilter(expired_at=2100.0, include_history=True),
    StoreFilter(live_at=2000.0, expired_at=2200.0),
    StoreFilter(request_id="req-5"),
    StoreFilter(request_id="req-unknown"),
    StoreFilter(request_ids=("req-5", "req-10", "req-unknown")),
    StoreFilter(request_ids=("req-unknown",)),
    StoreFilter(
        types=(MemoryType.EVENT, MemoryType.INSIGHT, MemoryType.DIRECTIVE),
        tags_any=("a", "b", "c"),
        created_after=1010.0,
        min_importance=3,
        live_at=2100.0,
        include_history=True,
    ),
    StoreFilter(only_history_of="__first__", live_at=2000.0, min_importance=2),
    StoreFilter(source_types=tuple(SourceType)[:4], created_before=1100.0, tags_any=("c",)),
    StoreFilter(include_drafts=True),
    StoreFilter(unreflected=True),
    StoreFilter(unreflected=True, include_drafts=True, min_importance=4),
    StoreFilter(include_trashed=True),
    StoreFilter(only_trashed=True),
    StoreFilter(only_trashed=True, include_history=True, include_drafts=True),
    StoreFilter(trashed_before=3020.0, include_history=True, include_drafts=True),
    StoreFilter(trashed_before=2000.0),
    StoreFilter(only_trashed=True, live_at=2150.0, min_importance=3),
    StoreFilter(expired_at=2150.0, include_history=True, include_trashed=True),
    StoreFilter(scripts=("latin", "latin+cjk")),
    StoreFilter(scripts=("cjk", "cjk+latin"), live_at=2100.0),
]


async def test_every_filter_field_alone_and_combined(store: Store) -> None:
    await store.create_collection(spec())
    rng = np.random.default_rng(6)
    recs = dataset(rng)
    vecs = unit_vectors(len(recs), rng)
    await store.upsert("default", points(recs, vecs))
    query = unit_vectors(1, rng)[0]
    cos = vecs @ query
    for template in FILTERS:
        flt = template
        if flt.only_history_of == "__first__":
            flt = replace(flt, only_history_of=recs[0].id)
        expected = {r.id for r in recs if reference_match(r, flt)}
        assert await store.count("default", flt) == len(expected), flt
        page, nxt = await store.scroll("default", flt, 1000)
        assert {r.id for r in page} == expected and nxt is None, flt
        hits = await store.search("default", query, 1000, flt)
        assert [h.record.id for h in hits] == sorted(
            expected, key=lambda i: -cos[[r.id for r in recs].index(i)]
        ), flt
    # the sanity of the dataset itself: history, drafts and the trash do split it
    assert await store.count("default", StoreFilter()) == 35
    assert await store.count("default", StoreFilter(include_drafts=True)) == 41
    assert await store.count("default", StoreFilter(include_trashed=True)) == 38
    assert await store.count("default", StoreFilter(only_trashed=True, include_drafts=True)) == 4
    assert await store.count("default", StoreFilter(only_history_of=recs[0].id)) == 2


# ------------------------------------------------------------------ scroll, count, delete


async def test_scroll_pages_are_stable_complete_and_disjoint(store: Store) -> None:
    await store.create_collection(spec())
    rng = np.random.default_rng(7)
    recs = [record(importance=1 + i % 10) for i in range(37)]
    await store.upsert("default", points(recs, unit_vectors(len(recs), rng)))

    async def all_pages(flt: StoreFilter, size: int) -> list[list[str]]:
        pages: list[list[str]] = []
        offset: str | None = None
        while True:
            page, offset = await store.scroll("default", flt, size, offset)
            pages.append([r.id for r in page])
            assert len(page) <= size
            if offset is None:
                return pages

    first = await all_pages(StoreFilter(), 5)
    ids = [i for p in first for i in p]
    assert len(ids) == len(set(ids)) == 37
    assert set(ids) == {r.id for r in recs}
    assert [len(p) for p in first[:-1]] == [5] * (len(first) - 1)
    assert await all_pages(StoreFilter(), 5) == first  # stable
    assert [i for p in await all_pages(StoreFilter(), 37) for i in p] == ids  # same order, any page size
    filtered = [i for p in await all_pages(StoreFilter(min_importance=6), 4) for i in p]
    assert set(filtered) == {r.id for r in recs if r.importance >= 6}
    assert len(filtered) == len(set(filtered))
    with pytest.raises(InvalidArgument):
        await store.scroll("default", StoreFilter(), 5, "not-an-id")


async def test_count_delete_and_delete_where(store: Store) -> None:
    await store.create_collection(spec())
    rng = np.random.default_rng(8)
    now = 5000.0
    expired = [record(valid_until=now - 1 - i) for i in range(6)] + [record(valid_until=now)]
    live = [record(valid_until=now + 1 + i) for i in range(5)] + [record(valid_until=NEVER)]
    old_version = record(valid_until=now - 10, superseded_by=live[0].id)
    allrecs = [*expired, *live, old_version]
    await store.upsert("default", points(allrecs, unit_vectors(len(allrecs), rng)))
    assert await store.count("default", StoreFilter()) == 13
    assert await store.count("default", StoreFilter(include_history=True)) == 14

    # the sweeper: valid_until <= now, current memories only (history kept by this filter)
    assert await store.delete_where("default", StoreFilter(expired_at=now)) == 7
    assert await store.count("default", StoreFilter(include_history=True)) == 7
    left = await store.retrieve("default", [r.id for r in allrecs])
    assert {p.record.id for p in left} == {r.id for r in [*live, old_version]}
    assert await store.delete_where("default", StoreFilter(expired_at=now)) == 0

    await store.delete("default", [live[0].id, live[1].id, str(uuid.uuid4()), "junk"])
    assert await store.count("default", StoreFilter()) == 4
    assert await store.retrieve("default", [live[0].id]) == []
    await store.delete("default", [])
    assert await store.delete_where("default", StoreFilter(include_history=True)) == 5
    assert await store.count("default", StoreFilter(include_history=True)) == 0


async def test_add_access_adds_to_the_stored_counters_of_current_memories(store: Store) -> None:
    await store.create_collection(spec())
    rng = np.random.default_rng(19)
    seen_before = record(access_count=7, last_accessed_at=1_700_000_200.125)
    never = record()
    history = record(superseded_by=str(uuid.uuid4()), access_count=1, last_accessed_at=10.0)
    await store.upsert("default", points([seen_before, never, history], unit_vectors(3, rng)))
    generation = store.generation("default")
    updated = await store.add_access(
        "default",
        {
            seen_before.id: (2, 1_700_000_100.0),  # earlier than the stored time: that one stays
            never.id.upper(): (1, 5_000.0),  # another spelling of the same id adds up
            never.id: (2, 6_000.0),
            history.id: (4, 9_999.0),  # a history version keeps its counters
            str(uuid.uuid4()): (1, 1.0),  # missing: skipped
            "not-a-uuid": (1, 1.0),
        },
    )
    assert updated == {seen_before.id: (9, 1_700_000_200.125), never.id: (3, 6_000.0)}
    got = {
        p.record.id: p.record for p in await store.retrieve("default", [seen_before.id, never.id, history.id])
    }
    assert got[seen_before.id] == replace(seen_before, access_count=9)
    assert got[never.id] == replace(never, access_count=3, last_accessed_at=6_000.0)
    assert got[history.id] == history
    assert store.generation("default") == generation  # counters take no part in search
    assert await store.add_access("default", {}) == {}


async def test_access_counters_are_read_everywhere_and_survive_a_restart(
    backend: str, new_store: Callable[[], Store]
) -> None:
    """Counters written by ``add_access`` come back from retrieve, scroll and search, after a
    restart too; an upsert writes the counters it carries; a deleted id written again starts anew."""
    if backend not in PERSISTENT_BACKENDS:
        pytest.skip("in-memory backend")
    rng = np.random.default_rng(23)
    a, b = record(access_count=2, last_accessed_at=100.0), record()
    vecs = unit_vectors(2, rng)

    def counts(records: Any) -> dict[str, tuple[int, float | None]]:
        return {r.id: (r.access_count, r.last_accessed_at) for r in records}

    async def everywhere(store: Store) -> list[dict[str, tuple[int, float | None]]]:
        return [
            counts(p.record for p in await store.retrieve("default", [a.id, b.id])),
            counts((await store.scroll("default", StoreFilter(), 10))[0]),
            counts(h.record for h in await store.search("default", vecs[0], 2, StoreFilter())),
        ]

    async with _opened(new_store) as store:
        await store.create_collection(spec())
        await store.upsert("default", points([a, b], vecs))
        await store.add_access("default", {a.id: (3, 200.0), b.id: (1, 50.0)})
        assert await store.add_access("default", {a.id: (1, 300.0)}) == {a.id: (6, 300.0)}
        want = {a.id: (6, 300.0), b.id: (1, 50.0)}
        assert await everywhere(store) == [want] * 3
    async with _opened(new_store) as store:
        assert await everywhere(store) == [want] * 3
        # an upsert carries the counters it was given (the service writes back what it read)
        moved = replace(a, content="rewritten", access_count=4, last_accessed_at=250.0)
        await store.upsert("default", points([moved], vecs[:1]))
        assert counts(p.record for p in await store.retrieve("default", [a.id])) == {a.id: (4, 250.0)}
        assert await store.add_access("default", {a.id: (1, 400.0)}) == {a.id: (5, 400.0)}
        # deleted, then the same id written again: its old counters are gone
        await store.delete("default", [b.id])
        await store.upsert("default", points([b], vecs[1:]))
        want = {a.id: (5, 400.0), b.id: (0, None)}
        assert await everywhere(store) == [want] * 3
    async with _opened(new_store) as store:
        assert await everywhere(store) == [want] * 3


@contextlib.asynccontextmanager
async def _opened(new_store: Callable[[], Store]) -> AsyncIterator[Store]:
    store = new_store()
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def test_set_fields(store: Store) -> None:
    await store.create_collection(spec())
    rng = np.random.default_rng(9)
    a, b = record(), record(source_type=SourceType.WEB_SEARCH)
    vecs = unit_vectors(2, rng)
    await store.upsert("default", points([a, b], vecs))
    await store.set_fields(
        "default",
        {
            a.id: {"access_count": 3, "last_accessed_at": 1234.5, "reflected_at": 99.0},
            b.id: {
                "source_type": SourceType.USER_INPUT,
                "source_type_history": (SourceType.WEB_SEARCH, SourceType.USER_INPUT),
                "tags": ("new",),
            },
            str(uuid.uuid4()): {"access_count": 1},  # missing: skipped
        },
    )
    got = {p.record.id: p for p in await store.retrieve("default", [a.id, b.id], with_vectors=True)}
    assert got[a.id].record == replace(a, access_count=3, last_accessed_at=1234.5, reflected_at=99.0)
    assert got[b.id].record == replace(
        b,
        source_type=SourceType.USER_INPUT,
        source_type_history=(SourceType.WEB_SEARCH, SourceType.USER_INPUT),
        tags=("new",),
    )
    for p, v in ((got[a.id], vecs[0]), (got[b.id], vecs[1])):
        assert p.vector is not None
        np.testing.assert_allclose(p.vector, v, atol=1e-6)  # vectors untouched
    assert await store.count("default", StoreFilter(tags_any=("new",))) == 1  # indexes follow
    assert await store.count("default", StoreFilter(source_types=(SourceType.USER_INPUT,))) == 1

    # superseding and un-superseding through set_fields moves a memory in and out of history
    await store.set_fields("default", {a.id: {"superseded_by": b.id}})
    assert await store.count("default", StoreFilter()) == 1
    assert [r.id for r in (await store.scroll("default", StoreFilter(only_history_of=b.id), 10))[0]] == [a.id]
    await store.set_fields("default", {a.id: {"superseded_by": None}})
    assert await store.count("default", StoreFilter()) == 2
    [back] = await store.retrieve("default", [a.id])
    assert back.record.superseded_by is None

    with pytest.raises(ValueError, match="unknown"):
        await store.set_fields("default", {a.id: {"no_such_field": 1}})
    with pytest.raises(ValueError):
        await store.set_fields("default", {a.id: {"id": str(uuid.uuid4())}})


async def test_collections_are_isolated(store: Store) -> None:
    await store.create_collection(spec("a"))
    await store.create_collection(spec("b"))
    rng = np.random.default_rng(10)
    ra = [record("a") for _ in range(4)]
    rb = [record("b") for _ in range(3)]
    va, vb = unit_vectors(4, rng), unit_vectors(3, rng)
    await store.upsert("a", points(ra, va))
    await store.upsert("b", points(rb, vb))
    assert await store.count("a", StoreFilter()) == 4
    assert await store.count("b", StoreFilter()) == 3
    hits = await store.search("b", va[0], 100, StoreFilter())
    assert {h.record.id for h in hits} == {r.id for r in rb}
    assert all(h.record.collection == "b" for h in hits)
    assert await store.retrieve("b", [r.id for r in ra]) == []
    assert {r.id for r in (await store.scroll("a", StoreFilter(), 100))[0]} == {r.id for r in ra}
    assert await store.delete_where("b", StoreFilter()) == 3
    assert await store.count("a", StoreFilter()) == 4
    assert await store.drop_collection("b") == 0
    assert await store.count("a", StoreFilter()) == 4


# ------------------------------------------------------------------ persistence


async def test_persists_across_close_and_reopen(backend: str, new_store: Callable[[], Store]) -> None:
    if backend not in PERSISTENT_BACKENDS:
        pytest.skip("in-memory backend")
    rng = np.random.default_rng(11)
    recs = [full_record("keep") for _ in range(5)]
    vecs = unit_vectors(5, rng)
    s1 = new_store()
    await s1.open()
    await s1.create_collection(spec("keep"))
    await s1.create_collection(spec("gone"))
    await s1.upsert("keep", points(recs, vecs))
    await s1.set_fields("keep", {recs[0].id: {"access_count": 42}})
    await s1.delete("keep", [recs[4].id])
    await s1.drop_collection("gone")
    await s1.put_state("reflection.keep", {"last_run_at": 5.0})
    await s1.close()

    s2 = new_store()
    await s2.open()
    try:
        assert await s2.list_collections() == [spec("keep")]
        got = {p.record.id: p for p in await s2.retrieve("keep", [r.id for r in recs], with_vectors=True)}
        assert set(got) == {r.id for r in recs[:4]}
        assert got[recs[0].id].record == replace(recs[0], access_count=42)
        assert got[recs[1].id].record == recs[1]
        hits = await s2.search("keep", vecs[2], 1, StoreFilter())
        assert hits[0].record.id == recs[2].id
        assert hits[0].score == pytest.approx(1.0, abs=1e-5)
        assert await s2.get_state("reflection.keep") == {"last_run_at": 5.0}
    finally:
        await s2.close()


async def test_state_documents_round_trip_and_stay_out_of_collections(store: Store) -> None:
    assert await store.get_state("reflection.default") is None
    await store.put_state("reflection.default", {"last_run_at": 12.5, "runs": [1.0, 2.0]})
    await store.put_state("reflection.other", {"runs": []})
    assert await store.get_state("reflection.default") == {"last_run_at": 12.5, "runs": [1.0, 2.0]}
    await store.put_state("reflection.default", {"last_run_at": 99.0, "runs": []})
    assert await store.get_state("reflection.default") == {"last_run_at": 99.0, "runs": []}
    assert await store.list_collections() == []  # state is not a memory collection
    with pytest.raises(ValueError):
        await store.put_state("Bad Key!", {})


# ------------------------------------------------------------------ lexical (hybrid) search


LEXICAL_DOCS = [
    "Caroline researched adoption agencies last week",
    "Melanie painted a sunrise over the lake",
    "Caroline went to the LGBTQ support group on Sunday",
    "The adoption interview is scheduled for May",
    "林伟喜欢在北京的咖啡馆写代码",
    "We talked about painting and pottery classes",
]


def _bm25_reference(docs: list[str], query: str) -> list[float]:
    """BM25 with Qdrant's IDF, ln(1 + (N − n + 0.5)/(n + 0.5)), over the encoder's own weights."""
    import math  # noqa: PLC0415

    from engram_server.adapters.lexical import Bm25Encoder  # noqa: PLC0415

    enc = Bm25Encoder()
    dvecs = [dict(zip(v.indices, v.values, strict=True)) for v in map(enc.encode_document, docs)]
    n_docs = sum(1 for d in dvecs if d)
    q = enc.encode_query(query)
    scores = []
    for d in dvecs:
        total = 0.0
        for term in q.indices:
            if term in d:
                df = sum(1 for other in dvecs if term in other)
                total += math.log(1 + (n_docs - df + 0.5) / (df + 0.5)) * d[term]
        scores.append(total)
    return scores


@dataclass(frozen=True)
class Row:
    """One candidate of ``Store.candidates``, as a row (for asserting)."""

    id: str
    score: float
    lexical: float
    type: MemoryType
    importance: float
    created_at: float
    script: str


async def hybrid(
    store: Store, collection: str, vector: Any, limit: int, flt: StoreFilter, *, sparse: Any
) -> list[Row]:
    c = await store.candidates(collection, vector, limit, flt, sparse=sparse)
    n = len(c)
    for column in (c.types, c.importance, c.created_at, c.cosine, c.lexical, c.scripts):
        assert len(column) == n
    return [
        Row(
            c.ids[i],
            float(c.cosine[i]),
            float(c.lexical[i]),
            c.types[i],
            float(c.importance[i]),
            float(c.created_at[i]),
            c.scripts[i],
        )
        for i in range(n)
    ]


async def test_hybrid_search_returns_lexical_candidates_with_bm25_and_cosine(store: Store) -> None:
    from engram_server.adapters.lexical import LEXICAL_ENCODER_ID, Bm25Encoder  # noqa: PLC0415

    enc = Bm25Encoder()
    lexical_spec = replace(spec(), lexical=LEXICAL_ENCODER_ID)
    await store.create_collection(lexical_spec)
    assert await store.get_collection("default") == lexical_spec
    rng = np.random.default_rng(11)
    vecs = unit_vectors(len(LEXICAL_DOCS), rng)
    recs = [record(content=text, importance=i + 1) for i, text in enumerate(LEXICAL_DOCS)]
    await store.upsert(
        "default",
        [StoredPoint(r, vecs[i], enc.encode_document(r.content)) for i, r in enumerate(recs)],
    )
    query = "Where did Caroline research adoption?"
    expected = _bm25_reference(LEXICAL_DOCS, query)
    q = vecs[1]  # the dense side alone would find Melanie's painting first
    hits = await hybrid(store, "default", q, 2, StoreFilter(), sparse=enc.encode_query(query))
    by_id = {h.id: h for h in hits}
    lexical_top = sorted(range(len(recs)), key=lambda i: -expected[i])[:2]
    for i in lexical_top:
        assert recs[i].id in by_id, "a lexical candidate is missing"
        h = by_id[recs[i].id]
        assert h.lexical == pytest.approx(expected[i], rel=1e-4)
        assert h.score == pytest.approx(float(vecs[i] @ q), abs=1e-5)  # true cosine, not BM25
    assert by_id[recs[1].id].score == pytest.approx(1.0, abs=1e-5)  # the dense side is still there
    # filters apply to the lexical side too
    flt = StoreFilter(min_importance=2)
    filtered = await hybrid(store, "default", q, 2, flt, sparse=enc.encode_query(query))
    assert recs[0].id not in {h.id for h in filtered}
    # Chinese terms are indexed (jieba segmentation): a Chinese query finds the Chinese memory
    zh = await hybrid(store, "default", vecs[0], 1, StoreFilter(), sparse=enc.encode_query("咖啡馆"))
    assert recs[4].id in {h.id for h in zh if h.lexical > 0}


async def test_collection_without_lexical_vectors_ignores_the_sparse_query(store: Store) -> None:
    from engram_server.adapters.lexical import Bm25Encoder  # noqa: PLC0415

    await store.create_collection(spec())
    rng = np.random.default_rng(12)
    vecs = unit_vectors(4, rng)
    recs = [record(content=text) for text in LEXICAL_DOCS[:4]]
    await store.upsert("default", points(recs, vecs))
    hits = await hybrid(
        store, "default", vecs[2], 2, StoreFilter(), sparse=Bm25Encoder().encode_query("adoption")
    )
    assert [h.id for h in hits] == [recs[2].id, hits[1].id]
    assert all(h.lexical == 0.0 for h in hits)


async def test_lexical_collection_persists_and_returns_dense_vectors(
    backend: str, new_store: Callable[[], Store]
) -> None:
    if backend not in PERSISTENT_BACKENDS:
        pytest.skip("in-memory backend")
    from engram_server.adapters.lexical import LEXICAL_ENCODER_ID, Bm25Encoder  # noqa: PLC0415

    enc = Bm25Encoder()
    lexical_spec = replace(spec(), lexical=LEXICAL_ENCODER_ID)
    rng = np.random.default_rng(13)
    vecs = unit_vectors(3, rng)
    recs = [record(content=text) for text in LEXICAL_DOCS[:3]]
    s1 = new_store()
    await s1.open()
    await s1.create_collection(lexical_spec)
    await s1.upsert(
        "default", [StoredPoint(r, vecs[i], enc.encode_document(r.content)) for i, r in enumerate(recs)]
    )
    await s1.close()

    s2 = new_store()
    await s2.open()
    try:
        assert await s2.get_collection("default") == lexical_spec
        got = {p.record.id: p for p in await s2.retrieve("default", [r.id for r in recs], with_vectors=True)}
        for i, r in enumerate(recs):
            vector = got[r.id].vector
            assert vector is not None
            np.testing.assert_allclose(vector, vecs[i], atol=1e-6)  # the dense one, not the named dict
        hits = await hybrid(
            s2, "default", vecs[1], 1, StoreFilter(), sparse=enc.encode_query("adoption agencies")
        )
        assert {h.id for h in hits if h.lexical > 0} == {recs[0].id}
    finally:
        await s2.close()


async def test_candidates_carry_the_ranking_fields_of_every_hit(store: Store) -> None:
    from engram_server.adapters.lexical import LEXICAL_ENCODER_ID, Bm25Encoder  # noqa: PLC0415

    enc = Bm25Encoder()
    await store.create_collection(replace(spec(), lexical=LEXICAL_ENCODER_ID))
    rng = np.random.default_rng(14)
    vecs = unit_vectors(len(LEXICAL_DOCS), rng)
    types = [MemoryType.INSIGHT, MemoryType.EVENT, MemoryType.IDENTITY, MemoryType.DIRECTIVE]
    recs = [
        record(content=t, type=types[i % 4], importance=i + 2, created_at=1000.0 + i, tags=("x",))
        for i, t in enumerate(LEXICAL_DOCS)
    ]
    await store.upsert(
        "default", [StoredPoint(r, vecs[i], enc.encode_document(r.content)) for i, r in enumerate(recs)]
    )
    sparse = enc.encode_query("adoption")
    rows = await hybrid(store, "default", vecs[1], 3, StoreFilter(), sparse=sparse)
    dense_top = [h.record.id for h in await store.search("default", vecs[1], 3, StoreFilter())]
    assert [r.id for r in rows[:3]] == dense_top  # dense hits first, best first
    assert len({r.id for r in rows}) == len(rows)  # a memory found by both sides appears once
    by_id = {r.id: r for r in recs}
    for i, row in enumerate(rows):
        want = by_id[row.id]
        j = recs.index(want)
        assert row.score == pytest.approx(float(vecs[j] @ vecs[1]), abs=1e-5)
        assert (row.type, row.importance, row.created_at) == (want.type, want.importance, want.created_at)
        assert row.script == script_tag(want.content)
        if i >= 3:
            assert row.lexical > 0  # lexical-only candidates follow the dense ones
    # vectors on request, aligned with the rows
    with_vectors = await store.candidates(
        "default", vecs[1], 3, StoreFilter(), sparse=sparse, with_vectors=True
    )
    assert with_vectors.vectors is not None and with_vectors.vectors.shape == (
        len(with_vectors),
        vecs.shape[1],
    )
    for k, pid in enumerate(with_vectors.ids):
        np.testing.assert_allclose(with_vectors.vectors[k], vecs[recs.index(by_id[pid])], atol=1e-6)
    # no hits: empty columns
    none = await store.candidates("default", vecs[1], 3, StoreFilter(min_importance=10))
    assert len(none) == 0 and none.cosine.shape == (0,)


async def test_candidates_follow_every_change_of_the_ranking_fields(
    backend: str, new_store: Callable[[], Store]
) -> None:
    """Candidates report a point's current ranking fields whatever happened to it: set_fields,
    an upsert that replaces it, delete and re-creation, a reopened store (the embedded store keeps
    these fields in memory beside the engine: this is what must never go stale)."""
    store = new_store()
    await store.open()
    await store.create_collection(spec())
    rng = np.random.default_rng(15)
    vecs = unit_vectors(12, rng)
    recs = [
        record(
            type=MemoryType.INSIGHT,
            content=f"note {i}",
            importance=3,
            created_at=1000.0 + i,
            valid_until=5000.0,
        )
        for i in range(12)
    ]
    await store.upsert("default", points(recs, vecs))

    async def fields(rid: str) -> tuple[Any, ...]:
        found = await store.candidates("default", vecs[0], 12, StoreFilter(include_history=True))
        k = found.ids.index(rid)
        return (
            found.types[k],
            found.importance[k],
            found.created_at[k],
            found.valid_until[k],
            found.scripts[k],
        )

    target = recs[3].id
    assert await fields(target) == (MemoryType.INSIGHT, 3.0, 1003.0, 5000.0, "latin")
    await store.set_fields("default", {target: {"importance": 9, "valid_until": 7000.0}})
    assert await fields(target) == (MemoryType.INSIGHT, 9.0, 1003.0, 7000.0, "latin")
    await store.set_fields("default", {target: {"access_count": 4}})  # not a ranking field
    assert await fields(target) == (MemoryType.INSIGHT, 9.0, 1003.0, 7000.0, "latin")
    await store.upsert(
        "default", points([replace(recs[3], type=MemoryType.EVENT, content="你好")], vecs[3:4])
    )
    assert await fields(target) == (MemoryType.EVENT, 3.0, 1003.0, 5000.0, "cjk")
    await store.delete("default", [target])
    found = await store.candidates("default", vecs[0], 12, StoreFilter())
    assert target not in found.ids and len(found) == 11
    await store.upsert("default", points([replace(recs[3], importance=6)], vecs[3:4]))
    assert await fields(target) == (MemoryType.INSIGHT, 6.0, 1003.0, 5000.0, "latin")
    await store.delete_where("default", StoreFilter(min_importance=6))
    await store.upsert("default", points([replace(recs[3], importance=7, created_at=1.0)], vecs[3:4]))
    assert await fields(target) == (MemoryType.INSIGHT, 7.0, 1.0, 5000.0, "latin")
    await store.set_fields("default", {target: {"superseded_by": recs[4].id}})
    assert target not in (await store.candidates("default", vecs[0], 12, StoreFilter())).ids
    assert await fields(target) == (MemoryType.INSIGHT, 7.0, 1.0, 5000.0, "latin")
    await store.close()
    if backend not in PERSISTENT_BACKENDS:
        return
    store = new_store()
    await store.open()
    try:
        assert await fields(target) == (MemoryType.INSIGHT, 7.0, 1.0, 5000.0, "latin")
        assert await fields(recs[5].id) == (MemoryType.INSIGHT, 3.0, 1005.0, 5000.0, "latin")
    finally:
        await store.close()


async def test_generation_changes_on_every_write_that_can_change_search(store: Store, backend: str) -> None:
    await store.create_collection(spec())
    if backend != "edge":
        # A Qdrant server may be written by other replicas: this store cannot know.
        assert store.generation("default") is None
        return
    assert store.generation("missing") is None
    rng = np.random.default_rng(21)
    vecs = unit_vectors(3, rng)
    recs = [record(content=f"memory {i}") for i in range(3)]
    seen = [store.generation("default")]

    def changed() -> bool:
        g = store.generation("default")
        fresh = g is not None and g not in seen
        seen.append(g)
        return fresh

    await store.upsert("default", points(recs, vecs))
    assert changed()
    await store.search("default", vecs[0], 3, StoreFilter())
    await store.candidates("default", vecs[0], 3, StoreFilter())
    await store.retrieve("default", [recs[0].id])
    assert not changed()  # reads change nothing
    await store.set_fields("default", {recs[0].id: {"access_count": 3, "last_accessed_at": 1.0}})
    assert not changed()  # access counters do not take part in search
    await store.set_fields("default", {recs[0].id: {"importance": 9}})
    assert changed()
    await store.set_fields("default", {recs[0].id: {"superseded_by": recs[1].id}})
    assert changed()
    await store.delete("default", [recs[2].id])
    assert changed()
    await store.delete_where("default", StoreFilter(min_importance=9, include_history=True))
    assert changed()
    await store.delete_where("default", StoreFilter(min_importance=10))  # matched nothing
    assert not changed()
    # a re-created collection never reuses a generation (cached results of the old one stay stale)
    await store.drop_collection("default")
    assert store.generation("default") is None
    await store.create_collection(spec())
    assert changed()


_DEAD_KINDS = ("superseded", "draft", "expired")


def dead_points(count: int, few: tuple[int, int, int]) -> dict[int, str]:
    """Which points are dead, and how: the first ``count`` (through the kinds in turn) when more
    than 3, else one of each kind at the positions ``few``."""
    if count > 3:
        return {i: _DEAD_KINDS[i % 3] for i in range(count)}
    return {i: kind for i, kind in zip(few, _DEAD_KINDS, strict=True)}


def maybe_dead(kind: str | None, now: float, *, content: str, until: float) -> MemoryRecord:
    """A memory live at ``now`` until ``until``, or dead at ``now`` in the way ``kind`` says."""
    return record(
        content=content,
        valid_until=now - 1.0 if kind == "expired" else until,
        superseded_by=str(uuid.uuid4()) if kind == "superseded" else None,
        draft=kind == "draft",
    )


@pytest.mark.parametrize("dead_nearest", [3, 60])
async def test_live_candidates_skip_dead_points_however_many_are_nearest(
    store: Store, dead_nearest: int
) -> None:
    """A search's filter (live at a time, current, not a draft) drops history versions, drafts and
    expired points even when they are the nearest ones: a few (within the embedded store's margin
    of extra nearest points it fetches unfiltered) or more than that margin (the engine filters).
    Every live point is then exactly where a brute-force reading puts it."""
    from engram_server.adapters.lexical import LEXICAL_ENCODER_ID, Bm25Encoder  # noqa: PLC0415

    enc = Bm25Encoder()
    await store.create_collection(replace(spec(), lexical=LEXICAL_ENCODER_ID))
    rng = np.random.default_rng(40 + dead_nearest)
    query = unit_vectors(1, rng)[0]
    n = 150
    # points ever farther from the query, so the nearest are the first ones
    noise = unit_vectors(n, rng)
    vecs = np.stack([query * (1.0 - i / n) + noise[i] * (0.05 + i / n) for i in range(n)])
    vecs = (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32)
    now = 10_000.0
    dead = dead_points(dead_nearest, (0, 2, 5))
    recs = [
        maybe_dead(
            dead.get(i),
            now,
            content=f"walnut story {i}" if i % 20 == 0 else f"note number {i}",
            until=now + 1000.0 + i,
        )
        for i in range(n)
    ]
    await store.upsert(
        "default", [StoredPoint(r, vecs[i], enc.encode_document(r.content)) for i, r in enumerate(recs)]
    )
    cos = vecs @ query
    live = [i for i in np.argsort(-cos, kind="stable") if i not in dead]
    for limit in (1, 10):
        found = await store.candidates("default", query, limit, StoreFilter(live_at=now))
        assert found.ids == [recs[i].id for i in live[:limit]]
        np.testing.assert_allclose(found.cosine, cos[live[:limit]], atol=1e-5)
        assert set(found.ids).isdisjoint(recs[i].id for i in dead)
    # with BM25: every live "walnut" memory is a candidate, with its cosine; no dead one is
    hybrid = await store.candidates(
        "default", query, 10, StoreFilter(live_at=now), sparse=enc.encode_query("walnut")
    )
    walnuts = {recs[i].id for i in range(0, n, 20) if i not in dead}  # fewer than 10
    assert walnuts <= set(hybrid.ids)
    assert set(hybrid.ids) <= walnuts | {recs[i].id for i in live[:10]}
    assert set(hybrid.ids).isdisjoint(recs[i].id for i in dead)
    for k, pid in enumerate(hybrid.ids):
        i = next(j for j, r in enumerate(recs) if r.id == pid)
        assert hybrid.cosine[k] == pytest.approx(float(cos[i]), abs=1e-5)
        assert (hybrid.lexical[k] > 0) == (i % 20 == 0)


@pytest.mark.parametrize("dead_nearest", [3, 60])
async def test_live_neighbours_skip_dead_points_however_many_are_nearest(
    store: Store, dead_nearest: int
) -> None:
    """``search`` and ``search_batch`` (the write gate, locating a memory) under a search's filter
    return the nearest live points read in full, exactly as a brute-force reading orders them,
    whether a few dead points are among the nearest (within the embedded store's margin of extra
    points it asks for unfiltered) or more than that (the engine filters) — in one batch with a
    question whose nearest are all live, and with a user filter beside liveness."""
    await store.create_collection(spec())
    rng = np.random.default_rng(70 + dead_nearest)
    query = unit_vectors(1, rng)[0]
    n = 150
    noise = unit_vectors(n, rng)
    vecs = np.stack([query * (1.0 - i / n) + noise[i] * (0.05 + i / n) for i in range(n)])
    vecs = (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32)
    now = 10_000.0
    dead = dead_points(dead_nearest, (0, 2, 5))
    recs = [
        replace(
            maybe_dead(dead.get(i), now, content=f"note number {i}", until=now + 1000.0 + i),
            importance=1 + i % 10,
        )
        for i in range(n)
    ]
    await store.upsert("default", points(recs, vecs))
    other = vecs[120] + 0.1 * unit_vectors(1, rng)[0]  # nearest ones live
    questions = np.stack([other / np.linalg.norm(other), query]).astype(np.float32)

    def expected(q: Vector, limit: int, min_importance: int) -> list[int]:
        cos = vecs @ q
        order = np.argsort(-cos, kind="stable")
        return [int(i) for i in order if i not in dead and recs[i].importance >= min_importance][:limit]

    for flt in (StoreFilter(live_at=now), StoreFilter(live_at=now, min_importance=4)):
        for limit in (1, 8):
            batch = await store.search_batch("default", questions, limit, flt)
            for qi, q in enumerate(questions):
                want = expected(q, limit, flt.min_importance or 0)
                one = await store.search("default", q, limit, flt, with_vectors=True)
                for hits in (batch[qi], one):
                    assert [h.record for h in hits] == [recs[i] for i in want]
                    np.testing.assert_allclose([h.score for h in hits], vecs[want] @ q, atol=1e-5)
                for h, i in zip(one, want, strict=True):
                    assert h.vector is not None
                    np.testing.assert_allclose(h.vector, vecs[i], atol=1e-5)
                assert all(h.vector is None for h in batch[qi])


@pytest.mark.parametrize("dead_best", [3, 30])
async def test_live_lexical_candidates_skip_dead_points_however_many_score_best(
    store: Store, dead_best: int
) -> None:
    """The BM25 side of a search drops history versions, drafts and expired points even when
    they score best: a few (within the embedded store's margin of extra hits it fetches
    unfiltered) or more than that margin (the engine filters). The lexical candidates are then
    exactly the best-scoring live ones."""
    from engram_server.adapters.lexical import LEXICAL_ENCODER_ID, Bm25Encoder  # noqa: PLC0415

    enc = Bm25Encoder()
    await store.create_collection(replace(spec(), lexical=LEXICAL_ENCODER_ID))
    rng = np.random.default_rng(60 + dead_best)
    n = 80
    vecs = unit_vectors(n, rng)
    now = 10_000.0
    dead = dead_points(dead_best, (0, 1, 4))
    # BM25 ranks shorter documents first: document i is the i-th best for "walnut"
    recs = [
        maybe_dead(dead.get(i), now, content="walnut " + " ".join(["filler"] * i), until=now + 1000.0)
        for i in range(n)
    ]
    await store.upsert(
        "default", [StoredPoint(r, vecs[i], enc.encode_document(r.content)) for i, r in enumerate(recs)]
    )
    best_live = [recs[i].id for i in range(n) if i not in dead][:5]
    found = await store.candidates(
        "default", vecs[50], 5, StoreFilter(live_at=now), sparse=enc.encode_query("walnut"), lexical_limit=5
    )
    scored = [(pid, lex) for pid, lex in zip(found.ids, found.lexical, strict=True) if lex > 0]
    assert {pid for pid, _ in scored} == set(best_live)
    assert [pid for pid, _ in sorted(scored, key=lambda x: -x[1])] == best_live
    assert set(found.ids).isdisjoint(recs[i].id for i in dead)
    cos = vecs @ vecs[50]
    for k, pid in enumerate(found.ids):
        i = next(j for j, r in enumerate(recs) if r.id == pid)
        assert found.cosine[k] == pytest.approx(float(cos[i]), abs=1e-5)


async def test_lexical_limit_bounds_the_bm25_side_only(store: Store) -> None:
    from engram_server.adapters.lexical import LEXICAL_ENCODER_ID, Bm25Encoder  # noqa: PLC0415

    enc = Bm25Encoder()
    await store.create_collection(replace(spec(), lexical=LEXICAL_ENCODER_ID))
    rng = np.random.default_rng(50)
    vecs = unit_vectors(30, rng)
    recs = [record(content="walnut " + " ".join(["filler"] * i)) for i in range(30)]  # BM25: shorter first
    await store.upsert(
        "default", [StoredPoint(r, vecs[i], enc.encode_document(r.content)) for i, r in enumerate(recs)]
    )
    sparse = enc.encode_query("walnut")
    dense_top = [h.record.id for h in await store.search("default", vecs[7], 5, StoreFilter())]
    for lexical_limit, want in ((None, 5), (3, 3), (12, 12)):
        found = await store.candidates(
            "default", vecs[7], 5, StoreFilter(), sparse=sparse, lexical_limit=lexical_limit
        )
        assert found.ids[:5] == dense_top  # the dense side keeps its limit
        lexical_ids = {pid for k, pid in enumerate(found.ids) if found.lexical[k] > 0}
        assert lexical_ids == {r.id for r in recs[:want]}  # the BM25 best, as many as asked
        assert set(found.ids) == set(dense_top) | lexical_ids


# ------------------------------------------------------------------ the trash and spec updates


async def test_trashed_points_leave_every_query_and_come_back(
    backend: str, new_store: Callable[[], Store]
) -> None:
    """Setting trashed_at takes a point out of search, candidates, neighbours, scroll and count at
    once (the embedded store's kept ranking fields and nearest lists too); clearing it brings it
    back; it survives a reopen."""
    store = new_store()
    await store.open()
    await store.create_collection(spec())
    rng = np.random.default_rng(31)
    vecs = unit_vectors(10, rng)
    recs = [record(content=f"t{i}") for i in range(10)]
    await store.upsert("default", points(recs, vecs))
    target = recs[2].id
    live = StoreFilter(live_at=1500.0)
    assert target in (await store.candidates("default", vecs[2], 5, live)).ids  # (kept nearest list)
    await store.set_fields("default", {target: {"trashed_at": 1234.0}})

    async def visible() -> dict[str, bool]:
        return {
            "candidates": target in (await store.candidates("default", vecs[2], 5, live)).ids,
            "search": target in [h.record.id for h in await store.search("default", vecs[2], 5, live)],
            "batch": target
            in [h.record.id for h in (await store.search_batch("default", vecs[2:3], 5, live))[0]],
            "scroll": target in [r.id for r in (await store.scroll("default", StoreFilter(), 100))[0]],
            "count": await store.count("default", StoreFilter()) == 10,
        }

    assert not any((await visible()).values())
    [trashed] = (await store.scroll("default", StoreFilter(only_trashed=True), 10))[0]
    assert trashed.id == target and trashed.trashed_at == 1234.0
    [got] = await store.retrieve("default", [target])
    assert got.record == replace(recs[2], trashed_at=1234.0)
    await store.close()
    if backend in PERSISTENT_BACKENDS:
        store = new_store()
        await store.open()
        assert not any((await visible()).values())
    else:
        store = new_store()
        await store.open()
        await store.create_collection(spec())
        again = [replace(r, trashed_at=1234.0 if r.id == target else None) for r in recs]
        await store.upsert("default", points(again, vecs))
    try:
        await store.set_fields("default", {target: {"trashed_at": None}})
        assert all((await visible()).values())
        [back] = await store.retrieve("default", [target])
        assert back.record == recs[2]
    finally:
        await store.close()


async def test_update_collection_replaces_the_spec_and_migrates(
    backend: str, new_store: Callable[[], Store]
) -> None:
    store = new_store()
    await store.open()
    old = replace(spec("notes"), format=1)
    await store.create_collection(old)
    assert await store.get_collection("notes") == old
    rng = np.random.default_rng(3)
    rec = record("notes")
    await store.upsert("notes", points([rec], unit_vectors(1, rng)))
    trashed = replace(old, format=2, trashed_at=555.5)
    await store.update_collection(trashed)
    assert await store.get_collection("notes") == trashed
    assert await store.list_collections() == [trashed]
    with pytest.raises(CollectionNotFound):
        await store.update_collection(spec("nope"))
    await store.close()
    if backend not in PERSISTENT_BACKENDS:
        return
    store = new_store()
    await store.open()
    try:
        assert await store.get_collection("notes") == trashed
        assert [r.id for r in (await store.scroll("notes", StoreFilter(), 10))[0]] == [rec.id]
    finally:
        await store.close()


async def test_top_orders_by_a_field_and_filters_sessions_agents_triggers(store: Store) -> None:
    await store.create_collection(spec())
    rng = np.random.default_rng(11)
    recs = [
        record(
            updated_at=1000.0 + i,
            importance=1 + (i * 7) % 10,
            session_id=f"s{i % 3}",
            agent_id="a" if i % 2 else None,
        )
        for i in range(30)
    ]
    recs[4] = replace(recs[4], tags=("trigger:deploy",))
    history = record(updated_at=5000.0, importance=10, superseded_by=recs[0].id)
    await store.upsert("default", points([*recs, history], unit_vectors(31, rng)))

    newest = await store.top("default", StoreFilter(), 5, "updated_at")
    assert [r.id for r in newest] == [r.id for r in recs[::-1][:5]]  # history excluded by the filter
    since = await store.top("default", StoreFilter(updated_after=1025.0), 10, "updated_at")
    assert [r.updated_at for r in since] == [1029.0, 1028.0, 1027.0, 1026.0, 1025.0]
    important = await store.top("default", StoreFilter(), 6, "importance")
    assert sorted(r.importance for r in important) == [9, 9, 9, 10, 10, 10]
    assert [r.importance for r in important] == sorted((r.importance for r in important), reverse=True)

    s1 = await store.top("default", StoreFilter(session_ids=("s1",)), 100, "updated_at")
    assert {r.id for r in s1} == {r.id for r in recs if r.session_id == "s1"}
    assert all(r.session_id == "s1" for r in s1)
    agents = await store.count("default", StoreFilter(agent_ids=("a",)))
    assert agents == 15
    triggered = await store.top("default", StoreFilter(with_trigger=True), 100, "updated_at")
    assert [r.id for r in triggered] == [recs[4].id]
    with pytest.raises(ValueError):
        await store.top("default", StoreFilter(), 5, "content")


@pytest.mark.parametrize("dead", [(), (1,), (0, 3, 4, 9)])
async def test_lexical_candidates_are_the_best_live_ones_past_dead_ones(
    store: Store, dead: tuple[int, ...]
) -> None:
    """The BM25 side of a search keeps the ``lexical_limit`` best-scoring live points: dead points
    among the best ones (a history version, a draft, an expired memory) make room for the next
    live ones, read from the embedded store's margin of extra hits; with none dead, exactly the
    best ones. Every memory holds the query's word once in ever longer texts, so the BM25 order
    is the order of their lengths."""
    from engram_server.adapters.lexical import LEXICAL_ENCODER_ID, Bm25Encoder  # noqa: PLC0415

    enc = Bm25Encoder()
    await store.create_collection(replace(spec(), lexical=LEXICAL_ENCODER_ID))
    rng = np.random.default_rng(90 + len(dead))
    n, wanted = 30, 8
    now = 10_000.0
    kinds = dict(zip(dead, _DEAD_KINDS * 2, strict=False))
    recs = [
        maybe_dead(
            kinds.get(i),
            now,
            content="walnut " + " ".join(f"filler{j}" for j in range(i + 1)),
            until=now + 1000.0,
        )
        for i in range(n)
    ]
    await store.upsert(
        "default",
        [
            StoredPoint(r, v, enc.encode_document(r.content))
            for r, v in zip(recs, unit_vectors(n, rng), strict=True)
        ],
    )
    found = await store.candidates(
        "default",
        unit_vectors(1, rng)[0],
        1,
        StoreFilter(live_at=now),
        sparse=enc.encode_query("walnut"),
        lexical_limit=wanted,
    )
    lexical = [pid for pid, score in zip(found.ids, found.lexical.tolist(), strict=True) if score > 0]
    best_live = [r.id for i, r in enumerate(recs) if i not in kinds][:wanted]
    assert set(lexical) == set(best_live)
    assert set(found.ids).isdisjoint(recs[i].id for i in kinds)
