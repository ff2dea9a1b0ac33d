"""Nearest lists kept across writes (``engram_server.adapters.storage.nearest``): a search repeated
after writes patches its kept list with the points written since, and must return what a fresh
search returns."""

from __future__ import annotations

import hashlib
import math
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import qdrant_edge as qe

from engram_server.adapters.lexical import LEXICAL_ENCODER_ID, Bm25Encoder
from engram_server.adapters.storage import edge, nearest
from engram_server.adapters.storage.edge import EdgeStore
from engram_server.adapters.storage.nearest import (
    PREFILTER_MARGIN,
    NearestBudget,
    NearestList,
    NearestLists,
    Row,
    patch,
)
from engram_server.adapters.storage.payload import filter_plan
from engram_server.domain.model import (
    Candidates,
    CollectionSpec,
    MemoryRecord,
    MemoryType,
    SourceType,
    StoredPoint,
    StoreFilter,
)

DIM = 16
NOW = 1_800_000_000.0
WORDS = ["alpha", "berlin", "coffee", "report", "garden", "piano", "python", "quarterly", "river", "tennis"]
#: The filters of the probes' searches: none, and a user filter of each kind (liveness always).
FILTERS = [
    StoreFilter(live_at=NOW),
    StoreFilter(live_at=NOW, types=(MemoryType.EVENT, MemoryType.INSIGHT)),
    StoreFilter(live_at=NOW, min_importance=6),
    StoreFilter(live_at=NOW, tags_any=("t1",)),
    StoreFilter(live_at=NOW, source_types=(SourceType.USER_INPUT,)),
    StoreFilter(live_at=NOW, created_after=150.0, types=(MemoryType.EVENT,)),
]


def _row(key: int, score: float) -> Row:
    return (key, score, None, key)


def _entry(scores: list[float], limit: int) -> NearestList:
    lists = NearestLists(NearestBudget(4))
    return lists.new([_row(i, s) for i, s in enumerate(scores)], limit)


def test_patch_merges_changed_points_and_keeps_the_floor() -> None:
    entry = _entry([0.9, 0.8, 0.7, 0.6], limit=4)
    assert entry.floor == 0.6  # a full answer: every point outside scores at most 0.6
    # point 1 moved below the floor (it leaves: it may not be placed among the unknown points),
    # new point 10 scores 0.85, new point 11 is below the floor
    rows = patch(entry, 4, {1: 1, 10: 10, 11: 11}, [_row(1, 0.5), _row(10, 0.85), _row(11, 0.55)])
    assert rows is not None and [r[:2] for r in rows] == [(0, 0.9), (10, 0.85), (2, 0.7), (3, 0.6)]
    assert ([r[0] for r in entry.rows()], entry.floor) == ([0, 10, 2, 3], 0.6)
    # two new points above the floor: the list is cut back, the best point cut bounds the rest
    assert patch(entry, 4, {12: 12, 13: 13}, [_row(12, 0.95), _row(13, 0.65)]) is not None
    assert ([r[0] for r in entry.rows()], entry.floor) == ([12, 0, 10, 2], 0.65)
    # two deleted (not found any more): too few left while unknown points may score up to the
    # floor, so the caller searches anew; the list is left as it was
    assert patch(entry, 4, {0: 0, 10: 10}, []) is None
    assert [r[0] for r in entry.rows()] == [12, 0, 10, 2]


def test_patch_of_a_list_that_holds_every_point_accepts_any_length() -> None:
    entry = _entry([0.9, 0.2], limit=5)  # the engine had only two points
    assert entry.floor == -math.inf
    assert patch(entry, 5, {0: 0, 7: 7}, [_row(7, -0.3)]) is not None  # 0 deleted, 7 added far away
    assert [r[0] for r in entry.rows()] == [1, 7]


def test_patch_forgets_the_cosines_of_changed_points_met_beyond_the_list() -> None:
    entry = _entry([0.9, 0.8], limit=2)
    entry.set_others({5: 0.3, 6: 0.2})
    assert patch(entry, 2, {5: 5}, [_row(5, 0.1)]) is not None  # 5 changed, stays below the floor
    assert entry.others() == {6: 0.2}


def test_a_collection_without_lists_keeps_no_log() -> None:
    lists = NearestLists(NearestBudget(1))
    lists.put("q", lists.new([_row(1, 0.5)], 1))
    lists.changed([(2, 2), (3, 3)])
    assert lists.seq == 2
    other = NearestLists(lists._budget)
    other.put("q", other.new([_row(1, 0.5)], 1))  # evicts the only list of the first
    # white box: log released
    assert len(lists) == 0 and lists._latest == {} and lists._blocks == [] and lists.seq == 2
    lists.changed([(4, 4)])  # not logged: no list to patch
    lists.put("q", lists.new([_row(1, 0.5)], 1))
    found = lists.get("q")
    assert found is not None and not found.changed and list(found.changed) == []


def test_budget_is_shared_by_the_collections_of_a_store() -> None:
    budget = NearestBudget(2)
    a, b = NearestLists(budget), NearestLists(budget)
    a.put("q1", a.new([_row(1, 0.5)], 1))
    b.put("q1", b.new([_row(1, 0.5)], 1))
    assert a.get("q1") is not None  # a's list is now the most recent
    b.put("q2", b.new([_row(1, 0.5)], 1))  # evicts b's q1, the least recently used
    assert (len(a), len(b), len(budget)) == (1, 1, 2)
    assert b.get("q1") is None and a.get("q1") is not None
    a.reset()
    assert (len(a), len(budget)) == (0, 1)


def test_a_list_older_than_the_log_or_an_index_build_is_not_patched() -> None:
    lists = NearestLists(NearestBudget(4), log_limit=4)
    lists.put("q", lists.new([_row(1, 0.5)], 1))
    lists.changed([(2, 2), (3, 3)])
    found = lists.get("q")
    assert found is not None and set(found.changed) == {2, 3} and 2 in found.changed
    assert found.to_ask(np.ones(4)) == [2, 3]  # vectors not known: the engine is asked
    lists.changed([(i, i) for i in range(10, 15)])  # the log forgets the oldest changes
    assert len(lists) == 0 and len(lists._budget) == 0  # and the lists it can no longer patch
    assert lists.get("q") is None
    lists.put("q", lists.new([_row(1, 0.5)], 1))
    lists.invalidate()  # an index build (another thread)
    assert lists.get("q") is None


def _axis(cos: float, dim: int = 4) -> np.ndarray:
    """A unit vector at cosine ``cos`` to the first axis."""
    v = np.zeros(dim, dtype=np.float32)
    v[0], v[1] = cos, math.sqrt(1 - cos * cos)
    return v


def test_written_vectors_are_scored_against_the_floor_here() -> None:
    lists = NearestLists(NearestBudget(4), log_limit=8)
    lists.put("q", lists.new([_row(1, 0.9), _row(2, 0.5)], 2))  # floor 0.5
    q = np.array([3.0, 0, 0, 0])  # (any length: scored as a direction)
    lists.changed([(10, "p10"), (11, "p11")], [_axis(0.8), 2 * _axis(0.2)])  # above / below
    lists.changed([(12, "p12")], gone=True)  # deleted: leaves, nothing to ask
    lists.changed([(13, "p13")])  # a payload field set: the engine decides
    lists.changed([(14, "p14")], [_axis(0.5 - PREFILTER_MARGIN / 2)])  # within the rounding margin
    found = lists.get("q")
    assert found is not None
    assert found.to_ask(q) == ["p10", "p13", "p14"]
    assert set(found.changed) == {10, 11, 12, 13, 14} and 1 not in found.changed
    # the latest change of a point counts: 10 moved away, 11 came near, 12 re-created
    lists.changed([(10, "p10"), (11, "p11"), (12, "p12")], [_axis(0.1), _axis(0.95), _axis(0.7)])
    assert sorted(lists.get("q").to_ask(q)) == ["p11", "p12", "p13", "p14"]  # type: ignore[union-attr]
    # a list holding every point (no floor) asks for every changed point still there
    lists.put("all", lists.new([_row(1, 0.9)], 5))
    lists.changed([(20, "p20"), (21, "p21")], [_axis(-0.9), _axis(0.0)])
    lists.changed([(21, "p21")], gone=True)
    assert lists.get("all").to_ask(q) == ["p20"]  # type: ignore[union-attr]


@pytest.mark.parametrize("small", [256, 0], ids=["as-set", "from-the-log"])
@pytest.mark.parametrize("block", [128, 4, 5])
def test_the_log_ring_against_a_model(monkeypatch: pytest.MonkeyPatch, block: int, small: int) -> None:
    """Random batches of changes through a small ring (it wraps around and trims many times):
    every list still kept reports exactly the points changed since it was made, and asks for
    the right ones; a list made within the last half of the log is always kept. With vector
    blocks smaller than the ring (one not dividing it), blocks no longer held are released."""
    monkeypatch.setattr(nearest, "_BLOCK", block)
    monkeypatch.setattr(nearest, "_SMALL_CHANGE", small)
    rng = np.random.default_rng(11)
    limit = 16
    lists = NearestLists(NearestBudget(1000), log_limit=limit)
    history: list[tuple[int, str, np.ndarray | None]] = []  # (key, kind, unit vector)
    made: dict[str, int] = {}  # list name -> len(history) when made
    q = _axis(1.0)
    for step in range(300):
        name = f"q{step}"
        lists.put(name, lists.new([_row(1, 0.9), _row(2, 0.4)], 2))  # floor 0.4
        made[name] = len(history)
        m = int(rng.integers(1, 6))
        keys = [int(k) for k in rng.integers(100, 130, size=m)]  # repeats, within and across
        kind = str(rng.choice(["known", "ask", "gone"]))
        if kind == "known":
            vecs = [_axis(float(c)) for c in rng.uniform(-1, 1, size=m)]
            lists.changed([(k, k) for k in keys], vecs)
            history += [(k, kind, v) for k, v in zip(keys, vecs, strict=True)]
        else:
            lists.changed([(k, k) for k in keys], gone=kind == "gone")
            history += [(k, kind, None) for k in keys]
        for old, since in made.items():
            found = lists.get(old)
            if found is None:
                assert len(history) - since > limit // 2, old
                continue
            latest = {k: (kd, v) for k, kd, v in history[since:]}
            assert set(found.changed) == set(latest)
            assert all(k in found.changed for k in latest) and 99 not in found.changed
            assert bool(found.changed) == bool(latest)
            want = [
                k
                for k, (kd, v) in latest.items()
                if kd == "ask" or (kd == "known" and v is not None and float(v @ q) > 0.4 - PREFILTER_MARGIN)
            ]
            assert sorted(found.to_ask(q)) == sorted(want)
        made = {n: s for n, s in made.items() if n in lists._lists}  # white box: those kept
        # white box: vectors kept only in blocks of the slots held
        held = {(pos % limit) // block for pos in range(lists._base, lists._end)}
        assert {b for b, rows in enumerate(lists._blocks) if rows is not None} <= held


# ------------------------------------------------------------------ against the real engine


def _spec() -> CollectionSpec:
    return CollectionSpec(
        name="default",
        embedding_model="test/random",
        dimension=DIM,
        created_at=1.0,
        lexical=LEXICAL_ENCODER_ID,
    )


def _text(rng: np.random.Generator) -> str:
    return " ".join(str(w) for w in rng.choice(WORDS, size=4))


def _unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v)).astype(np.float32)


def _signature(c: Candidates) -> list[tuple[str, float, float]]:
    return sorted(zip(c.ids, np.round(c.cosine, 5).tolist(), np.round(c.lexical, 4).tolist(), strict=True))


@pytest.mark.parametrize("logged_delete_max", [edge.points._LOGGED_DELETE_MAX, 0], ids=["logged", "reset"])
async def test_patched_lists_return_what_a_fresh_search_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, logged_delete_max: int
) -> None:
    """Two stores receive the same writes — new points (some right beside a probe), vectors
    and filtered fields replaced, deletions by id (enough to empty a list), a memory superseded,
    an expiry, a deletion by filter (its points logged; or, when more than the store logs, every
    list dropped), a source type set — one keeping nearest lists, one searching afresh every
    time. After every write, every probe's candidates are the same in both, unfiltered and under
    each kind of user filter. Below the HNSW threshold both are exact."""
    monkeypatch.setattr(edge.points, "_LOGGED_DELETE_MAX", logged_delete_max)
    patched: list[int] = []
    real_patch = edge.candidates.patch

    def counting_patch(*args: Any) -> list[Row] | None:
        rows = real_patch(*args)
        patched.append(rows is not None)
        return rows

    monkeypatch.setattr(edge.candidates, "patch", counting_patch)
    rng = np.random.default_rng(7)
    enc = Bm25Encoder()
    kept, fresh = EdgeStore(tmp_path / "kept"), EdgeStore(tmp_path / "fresh", nearest_lists=0)
    stores = (kept, fresh)
    for s in stores:
        await s.open()
        await s.create_collection(_spec())

    vectors: dict[str, np.ndarray] = {}
    records: dict[str, MemoryRecord] = {}

    async def upsert(rec: MemoryRecord, vec: np.ndarray) -> None:
        vectors[rec.id], records[rec.id] = vec, rec
        point = StoredPoint(rec, vec, enc.encode_document(rec.content))
        for s in stores:
            await s.upsert("default", [point])

    def filtered_fields() -> dict[str, Any]:
        return {
            "type": MemoryType(str(rng.choice([t.value for t in MemoryType]))),
            "importance": int(rng.integers(1, 11)),
            "tags": tuple(str(t) for t in rng.choice(["t1", "t2", "t3"], size=int(rng.integers(0, 3)))),
            "source_type": SourceType(str(rng.choice(["user_input", "tool_output", "unknown"]))),
        }

    created = iter(range(1, 10**6))

    def new_record(**kw: Any) -> MemoryRecord:
        rec = MemoryRecord(
            id=str(uuid.uuid4()),
            collection="default",
            content=_text(rng),
            valid_until=NOW + 1e6,
            created_at=float(next(created)),
            **filtered_fields(),
        )
        return replace(rec, **kw)

    for _ in range(300):
        await upsert(new_record(), _unit(rng.normal(size=DIM)))
    probes = [_unit(rng.normal(size=DIM)) for _ in range(4)]
    probe_text = [enc.encode_query(_text(rng)) for _ in probes]

    async def same_everywhere() -> None:
        for q, sparse in zip(probes, probe_text, strict=True):
            for flt in FILTERS:
                got = [
                    await s.candidates("default", q, 12, flt, sparse=sparse, lexical_limit=8) for s in stores
                ]
                assert len(got[0]) >= (12 if flt == FILTERS[0] else 1), flt
                assert _signature(got[0]) == _signature(got[1]), flt
        lists_are_exact()

    probe_of = {hashlib.blake2b(q.tobytes(), digest_size=16).digest(): q for q in probes}

    def lists_are_exact() -> None:
        """White box: every kept list (patched or not) holds exactly the points an exact search
        would return for it (its tail is only a margin for liveness: the candidates alone would
        not show a point missing there)."""
        col = kept._cols["default"]
        for (digest, n, user), entry in col.nearest._lists.items():
            truth = col.shard.query(
                qe.QueryRequest(
                    limit=n,
                    query=qe.Query.Nearest(probe_of[digest].tolist()),
                    filter=edge._edge_filter(filter_plan(user)),
                    with_payload=False,
                    with_vector=False,
                )
            )
            assert [h.id.int for h in truth] == entry.keys, user
            assert np.allclose([h.score for h in truth], entry.scores, atol=1e-6)

    def nearest_ids(q: np.ndarray, n: int) -> list[str]:
        live = [i for i, r in records.items() if not r.superseded_by and r.valid_until > NOW]
        return sorted(live, key=lambda i: -float(vectors[i] @ q))[:n]

    await same_everywhere()
    for step in range(80):
        q = probes[step % len(probes)]
        kind = step % 8
        if kind == 0:  # a new point right beside a probe: it enters the list
            await upsert(new_record(), _unit(q + 0.05 * rng.normal(size=DIM)))
        elif kind == 1:  # a point of a list gets another vector and fields (an update in place)
            rid = nearest_ids(q, 3)[int(rng.integers(0, 3))]
            changed = replace(records[rid], content=_text(rng), **filtered_fields())
            await upsert(changed, _unit(rng.normal(size=DIM)))
        elif kind == 2:  # the nearest few deleted by id: lists shrink, some below their size
            gone = nearest_ids(q, 8)
            for s in stores:
                await s.delete("default", gone)
            for rid in gone:
                del records[rid], vectors[rid]
        elif kind == 3:  # superseded (a payload write: the vector stays)
            rid = nearest_ids(q, 1)[0]
            records[rid] = replace(records[rid], superseded_by=str(uuid.uuid4()))
            for s in stores:
                await s.set_fields("default", {rid: {"superseded_by": records[rid].superseded_by}})
        elif kind == 4:  # expired, then swept by filter
            rid = nearest_ids(q, 2)[1]
            records[rid] = replace(records[rid], valid_until=NOW - 1)
            for s in stores:
                await s.set_fields("default", {rid: {"valid_until": NOW - 1}})
            await same_everywhere()
            for s in stores:
                assert await s.delete_where("default", StoreFilter(expired_at=NOW)) == 1
            # white box: a logged deletion keeps the lists (patched next), a larger one drops them
            assert (len(kept._cols["default"].nearest) > 0) == (logged_delete_max > 0)
            del records[rid], vectors[rid]
        elif kind == 7:  # a point just inside the lists' depth (scoring near their floors)
            scores = sorted((float(v @ q) for v in vectors.values()), reverse=True)
            r = int(rng.integers(26, 30))  # the unfiltered lists hold 12 + 16 (the margin)
            target = (scores[r - 1] + scores[r]) / 2
            side = rng.normal(size=DIM)
            side -= (side @ q) * q
            side /= np.linalg.norm(side)
            await upsert(new_record(), (target * q + np.sqrt(1 - target**2) * side).astype(np.float32))
        elif kind == 5:  # a far point (below every floor)
            await upsert(new_record(), _unit(-q + 0.05 * rng.normal(size=DIM)))
        else:  # a filtered field set in place (the vector stays): the point may enter or leave
            for rid in nearest_ids(q, 4):
                source = (
                    SourceType.USER_INPUT
                    if records[rid].source_type != SourceType.USER_INPUT
                    else "tool_output"
                )
                records[rid] = replace(records[rid], source_type=SourceType(source))
                for s in stores:
                    await s.set_fields("default", {rid: {"source_type": str(source)}})
        await same_everywhere()
    assert patched.count(True) >= 20  # lists were patched, not searched again
    assert False in patched  # and some emptied by deletions were searched anew
    for s in stores:
        await s.close()


async def test_a_store_without_lists_keeps_none(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path, nearest_lists=0)
    await store.open()
    try:
        await store.create_collection(replace(_spec(), lexical=None))
        rng = np.random.default_rng(3)
        vecs = [_unit(rng.normal(size=DIM)) for _ in range(50)]
        await store.upsert(
            "default", [StoredPoint(MemoryRecord(str(uuid.uuid4()), "default", "x"), v) for v in vecs]
        )
        await store.candidates("default", vecs[0], 5, StoreFilter(live_at=NOW))
        assert len(store._cols["default"].nearest) == 0  # white box
    finally:
        await store.close()
    with pytest.raises(ValueError, match="nearest_lists"):
        EdgeStore(tmp_path, nearest_lists=-1)


async def test_a_list_is_patched_after_many_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A question asked again after 1,200 new points (in batches, some right beside it) is
    patched from its kept list — the log holds the written vectors, scored here — and answers
    as a fresh search does."""
    patched: list[bool] = []
    real_patch = edge.candidates.patch

    def counting_patch(*args: Any) -> list[Row] | None:
        rows = real_patch(*args)
        patched.append(rows is not None)
        return rows

    monkeypatch.setattr(edge.candidates, "patch", counting_patch)
    rng = np.random.default_rng(5)
    enc = Bm25Encoder()
    kept, fresh = EdgeStore(tmp_path / "kept"), EdgeStore(tmp_path / "fresh", nearest_lists=0)
    for s in (kept, fresh):
        await s.open()
        await s.create_collection(_spec())

    def point(vec: np.ndarray) -> StoredPoint:
        rec = MemoryRecord(str(uuid.uuid4()), "default", _text(rng), valid_until=NOW + 1e6)
        return StoredPoint(rec, vec, enc.encode_document(rec.content))

    async def write(vecs: list[np.ndarray]) -> None:
        points = [point(v) for v in vecs]
        for s in (kept, fresh):
            await s.upsert("default", points)

    await write([_unit(rng.normal(size=DIM)) for _ in range(300)])
    q = _unit(rng.normal(size=DIM))

    async def both() -> list[Candidates]:
        # (dense only: BM25 over these few words ties often, and the engine orders ties freely)
        return [await s.candidates("default", q, 12, StoreFilter(live_at=NOW)) for s in (kept, fresh)]

    await both()  # the list is made
    for i in range(120):
        near = [_unit(q + 0.3 * rng.normal(size=DIM))] if i % 10 == 0 else []
        await write(near + [_unit(rng.normal(size=DIM)) for _ in range(10 - len(near))])
    got = await both()
    assert _signature(got[0]) == _signature(got[1])
    assert patched == [True]  # patched, not searched anew
    for s in (kept, fresh):
        await s.close()
