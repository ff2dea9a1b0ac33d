"""The server store's search reads as raw gRPC (``qdrant_grpc``) give exactly what the client's
own conversion gave, on a real Qdrant server; and which collections a store lists.

Runs on the session's real server node (``qdrant_server`` in tests/conftest.py); skips without one.
The same searches go through two stores on one collection: one reading through ``qdrant_grpc``
(the default on a server with gRPC), one made to use qdrant-client's calls (``_raw = None``, the
path before). Candidates (ids, every column, vectors), the rescoring cues (from the memo and from
the fallback read, with points whose cue fields were removed), the winners' records, the
collection list, the collection specs and the access counters must be equal, value for value.
The payload values read straight from their encoded bytes (``value_of``) are checked against
``value_to_json`` for every kind of value, without a server.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qdrant_client import AsyncQdrantClient, models
from qdrant_client import grpc as qg
from qdrant_client.conversions.conversion import RestToGrpc, json_to_value, value_to_json

from engram_server.adapters.lexical import LEXICAL_ENCODER_ID
from engram_server.adapters.storage import qdrant as qdrant_module
from engram_server.adapters.storage.payload import (
    CANDIDATE_FIELDS,
    LEXICAL_VECTOR,
    filter_plan,
    rank_fields,
    record_to_payload,
)
from engram_server.adapters.storage.qdrant import QdrantStore, _qdrant_filter
from engram_server.adapters.storage.qdrant_cues import CUE_FIELDS, cue_payload, stored_cue
from engram_server.adapters.storage.qdrant_grpc import (
    DENSE_VECTOR,
    NO_PAYLOAD,
    NO_VECTORS,
    PACKED_FIELD,
    candidate_fields,
    dense_query,
    grpc_filter,
    include,
    payload_of,
    prefetch,
    search_params,
    set_payload,
    sparse_query,
    value_of,
)
from engram_server.adapters.storage.qdrant_grpc import query as raw_query
from engram_server.domain.errors import StorageUnavailable
from engram_server.domain.model import (
    Candidates,
    CollectionSpec,
    MemoryRecord,
    MemoryType,
    SourceType,
    SparseVector,
    StoredPoint,
    StoreFilter,
)
from tests.support.qdrant import QdrantNode, free_ports, qdrant_binary

DIM = 16
NOW = 1_800_000_000.0
N = 400

FILTERS = [
    StoreFilter(),
    StoreFilter(live_at=NOW),
    StoreFilter(types=(MemoryType.EVENT, MemoryType.INSIGHT), live_at=NOW),
    StoreFilter(tags_any=("t1", "t3")),
    StoreFilter(created_after=NOW - 200_000, created_before=NOW - 50_000, min_importance=4),
    StoreFilter(include_history=True, include_drafts=True, include_trashed=True),
    StoreFilter(source_types=(SourceType.USER_INPUT,), session_ids=("s1",)),
]


def _spec(name: str = "default") -> CollectionSpec:
    return CollectionSpec(
        name=name, embedding_model="test/random", dimension=DIM, created_at=1.0, lexical=LEXICAL_ENCODER_ID
    )


def _store(node: QdrantNode, prefix: str, **kw: object) -> QdrantStore:
    return QdrantStore(node.url, grpc_port=node.grpc_port, prefix=prefix, **kw)  # type: ignore[arg-type]


def _points(rng: np.random.Generator) -> list[StoredPoint]:
    texts = [
        "Alice: I moved to Berlin last spring.",
        "Bob: did you like it? Was it cold?",
        "我们明天去北京。",
        "Carol: the meeting moved to Friday. Why?",
        "plain note without a label",
    ]
    out = []
    ids = [str(uuid.uuid4()) for _ in range(N)]
    for i, pid in enumerate(ids):
        vec = rng.normal(size=DIM).astype(np.float32)
        terms = sorted({int(t) for t in rng.integers(0, 50, size=4)})
        record = MemoryRecord(
            pid,
            "default",
            f"{texts[i % len(texts)]} #{i}",
            type=list(MemoryType)[i % 4],
            importance=i % 11,
            tags=tuple(f"t{j}" for j in range(i % 4)),
            source_type=list(SourceType)[i % 3],
            metadata={"k": str(i), "lang": "en"} if i % 2 else {},
            created_at=NOW - 1000.0 * i - 0.25,
            updated_at=NOW - 10.0 * i,
            valid_until=NOW + 1e6 if i % 7 else NOW - 5.0,
            version=1 + i % 3,
            superseded_by=ids[0] if i % 29 == 5 else None,
            access_count=i % 5,
            last_accessed_at=NOW - 3.5 if i % 3 == 0 else None,
            near_duplicates=((ids[1], 0.91),) if i % 6 == 0 else (),
            derived_from=(ids[2],) if i % 8 == 0 else (),
            draft=i % 31 == 7,
            trashed_at=NOW - 9.0 if i % 37 == 11 else None,
            session_id="s1" if i % 2 else None,
            agent_id="a1" if i % 5 == 0 else None,
        )
        sparse = SparseVector(tuple(terms), tuple(float(v) for v in rng.uniform(0.1, 2.0, size=len(terms))))
        out.append(StoredPoint(record, vec, sparse))
    return out


def _same(a: Candidates, b: Candidates) -> None:
    assert a.ids == b.ids
    assert a.types == b.types
    assert a.scripts == b.scripts
    for col in ("importance", "created_at", "cosine", "lexical", "valid_until"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col), err_msg=col)
    if a.vectors is None or b.vectors is None:
        assert a.vectors is None and b.vectors is None
    else:
        assert a.vectors.dtype == b.vectors.dtype
        np.testing.assert_array_equal(a.vectors, b.vectors)


@pytest.fixture
def prefix() -> str:
    return f"r{uuid.uuid4().hex[:12]}_"


@asynccontextmanager
async def _store_pair(
    node: QdrantNode, prefix: str, points: list[StoredPoint]
) -> AsyncIterator[tuple[QdrantStore, QdrantStore]]:
    """(raw, client): two open stores on one collection holding ``points``, written by ``raw``
    (the caller turns the second one's raw reads off); both closed on exit."""
    raw, old = _store(node, prefix), _store(node, prefix)
    await raw.open()
    await old.open()
    try:
        await raw.create_collection(_spec())
        await raw.upsert("default", points)
        yield raw, old
    finally:
        await old.close()
        await raw.close()


@pytest.fixture
async def stores(qdrant_server: QdrantNode, prefix: str) -> AsyncIterator[tuple[QdrantStore, QdrantStore]]:
    """(raw, client): two stores on one collection of N points (some without cue fields)."""
    rng = np.random.default_rng(5)
    points = _points(rng)
    async with _store_pair(qdrant_server, prefix, points) as (raw, old):
        # a fifth of the points as an older release wrote them: no cue fields, no packed ranking
        # value (and another fifth without the packed value only): a mixed collection
        stripped = models.PointIdsList(points=[p.record.id for p in points[::5]])
        keys = [*CUE_FIELDS, PACKED_FIELD]
        await raw._c.delete_payload(prefix + "default", keys=keys, points=stripped, wait=True)
        unpacked = models.PointIdsList(points=[p.record.id for p in points[2::5]])
        await raw._c.delete_payload(prefix + "default", keys=[PACKED_FIELD], points=unpacked, wait=True)
        assert raw._raw is not None, "a server store with gRPC reads through qdrant_grpc"
        old._raw = None  # qdrant-client's own calls and conversion: the path before
        yield raw, old


async def test_raw_reads_equal_the_clients_conversion(stores: tuple[QdrantStore, QdrantStore]) -> None:
    raw, old = stores
    rng = np.random.default_rng(9)
    checked = 0
    for flt in FILTERS:
        for with_vectors in (False, True):
            q = rng.normal(size=DIM).astype(np.float32)
            sparse = SparseVector((1, 7, 13, 21), (1.0, 0.5, 2.0, 0.25))
            a = await raw.candidates(
                "default", q, 40, flt, sparse=sparse, lexical_limit=30, with_vectors=with_vectors
            )
            b = await old.candidates(
                "default", q, 40, flt, sparse=sparse, lexical_limit=30, with_vectors=with_vectors
            )
            _same(a, b)
            assert a.ids, "the searches find something"
            checked += int(bool(np.count_nonzero(a.lexical)))
            # the cues each memo holds now (from the candidate query), then the winners' records
            assert await raw.rescore_cues("default", a.ids) == await old.rescore_cues("default", a.ids)
            wanted = [*a.ids[:12], str(uuid.uuid4()), "not-a-uuid"]
            ra, rb = await raw.retrieve("default", wanted), await old.retrieve("default", wanted)
            assert [p.record for p in ra] == [p.record for p in rb]
            assert len(ra) == min(12, len(a.ids))
    assert checked, "some searches have lexical candidates"
    # the fallback read (the memo empty): cues from the stored fields or from the text
    records, _ = await raw.scroll("default", StoreFilter(include_history=True), 200)
    ids = [r.id for r in records]
    for store in (raw, old):
        store._cues = type(store._cues)()
    assert await raw.rescore_cues("default", ids) == await old.rescore_cues("default", ids)
    # ``old`` listed the collections at open, before ``raw`` created this one, and may keep that
    # list for NAMES_REFRESH_SECONDS (tested on its own below): both read the names afresh here.
    for store in (raw, old):
        store._names = None
    assert await raw.list_collections() == await old.list_collections()
    # the specs read afresh (raw: the metadata alone), a missing collection, and not Engram's
    for store in (raw, old):
        store._specs.clear()
    assert await raw.get_collection("default") == await old.get_collection("default") == _spec()
    assert await raw.get_collection("missing") is None
    assert await old.get_collection("missing") is None
    await raw._c.create_collection(
        raw._qname("plain"), vectors_config=models.VectorParams(size=2, distance=models.Distance.DOT)
    )
    try:
        assert await raw.get_collection("plain") is None
        assert await old.get_collection("plain") is None
    finally:
        await raw._c.delete_collection(raw._qname("plain"))


async def test_raw_access_counts_equal_the_clients(stores: tuple[QdrantStore, QdrantStore]) -> None:
    """``add_access`` reads the counters raw: the same counters written as through the client."""
    raw, old = stores
    records, _ = await raw.scroll("default", StoreFilter(include_history=True), 60)
    ids = [r.id for r in records]
    hits = {pid: (1 + i % 3, NOW + i) for i, pid in enumerate(ids)}
    hits[str(uuid.uuid4())] = (1, NOW)  # no such point: skipped by both
    first = await raw.add_access("default", hits)
    assert first, "some points are current"
    assert all(r.superseded_by is None for r in records if r.id in first)
    again = await old.add_access("default", hits)
    assert set(again) == set(first)
    for pid, (count, at) in first.items():
        assert again[pid] == (count + hits[pid][0], max(at, hits[pid][1]))
    stored = {p.record.id: p.record for p in await old.retrieve("default", list(first))}
    assert {pid: (r.access_count, r.last_accessed_at) for pid, r in stored.items()} == again


async def test_raw_access_writes_store_what_the_clients_store(
    stores: tuple[QdrantStore, QdrantStore], prefix: str
) -> None:
    """``add_access`` writes the counters raw (``set_payloads``): the same points stored as when
    the client writes them. The same points in two collections; the raw store counts hits in one,
    the client's path in the other, twice (counters absent, then present); every point of both
    collections is then equal, payload and vectors."""
    raw, old = stores
    twin = _spec("twin")
    await old.create_collection(twin)
    records, _ = await raw.scroll("default", StoreFilter(include_history=True, include_drafts=True), N)
    stored, _ = await old._c.scroll(prefix + "default", limit=N, with_payload=True, with_vectors=True)
    assert len(stored) == N
    await old._c.upsert(
        prefix + "twin",
        [models.PointStruct(id=r.id, vector=r.vector or {}, payload=r.payload) for r in stored],  # type: ignore[arg-type]
        wait=True,
    )
    ids = [r.id for r in records]
    history = [r.id for r in records if r.superseded_by is not None]
    assert history, "some points are history versions (skipped by both)"
    for round_ in range(2):
        hits = {pid: (1 + (i + round_) % 3, NOW + 0.5 * i - 7.0 * round_) for i, pid in enumerate(ids[::3])}
        hits.update({pid: (2, NOW) for pid in history})
        hits[str(uuid.uuid4())] = (1, NOW)  # no such point
        counted = await raw.add_access("default", hits)
        assert counted, "some points are current"
        assert counted == await old.add_access("twin", hits)
    want = await old._c.retrieve(prefix + "twin", ids, with_payload=True, with_vectors=True)
    got = await old._c.retrieve(prefix + "default", ids, with_payload=True, with_vectors=True)
    assert len(got) == len(want) == len(ids)
    by_id = {str(r.id): r for r in want}
    for r in got:  # the values and their kinds (an integer counter is not stored as 3.0)
        assert json.dumps(r.payload, sort_keys=True) == json.dumps(by_id[str(r.id)].payload, sort_keys=True)
        assert r.vector == by_id[str(r.id)].vector


def test_raw_payload_writes_are_the_messages_the_client_sends() -> None:
    """``set_payload`` is what ``RestToGrpc`` makes of the store's ``SetPayloadOperation``."""
    key = str(uuid.uuid4())
    for payload in (
        {"access_count": 3, "last_accessed_at": NOW + 0.25},
        {"access_count": 0, "last_accessed_at": 1.0},
        {"access_count": 2**40, "last_accessed_at": NOW},
    ):
        theirs = RestToGrpc.convert_update_operation(
            models.SetPayloadOperation(set_payload=models.SetPayload(payload=payload, points=[key]))
        )
        assert set_payload(key, payload) == theirs


def _encoded_values() -> list[qg.Value]:
    samples: list[Any] = [
        "",
        "latin",
        "ünïcode 北京",
        "x" * 127,
        "y" * 128,
        "z" * 20000,
        0.0,
        -0.0,
        1.5,
        1793842225.5250037,
        -2.5e-300,
        1e308,
        0,
        1,
        127,
        128,
        2**31,
        2**63 - 1,
        -1,
        -(2**63),
        True,
        False,
        None,
        [],
        [""],
        ["a", "ünïcode 北京", "x" * 200, "t1"],
        ["a", 1, 2.5, None],
        [["x", 0.5]],
        [[]],
        ["a", ["b"]],
        {},
        {"k": {"n": [1, {"m": "v"}]}},
        {"session": "s164", "channel": "email"},
        {"": "empty key", "k": ""},
        {"ü北": "x" * 300, "a": "b", "c": 1},
        {"a": None},
    ]
    values = [json_to_value(v) for v in samples]
    values += [qg.Value(double_value=x) for x in (float("nan"), float("inf"), float("-inf"))]
    values.append(qg.Value(integer_value=0))  # a oneof member at its default: still encoded
    return values


def test_values_read_from_their_bytes_equal_value_to_json() -> None:
    for value in _encoded_values():
        data = value.SerializeToString()
        got, want = value_of(data), value_to_json(value)
        assert type(got) is type(want), value
        if isinstance(want, float):
            assert got.hex() == want.hex()  # -0.0 stays -0.0
        else:
            assert got == want, value
    # a message with no kind set: refused, as value_to_json refuses it
    with pytest.raises(ValueError, match="Not supported"):
        value_of(b"")


def test_payloads_read_from_their_bytes_equal_value_to_json() -> None:
    """``payload_of`` (strings and doubles read inline) gives each field as ``value_to_json``."""
    values = _encoded_values()
    payload = {f"f{i}": value.SerializeToString() for i, value in enumerate(values)}
    got = payload_of(payload)
    assert list(got) == list(payload)
    for i, value in enumerate(values):
        want = value_to_json(value)
        assert type(got[f"f{i}"]) is type(want), value
        if isinstance(want, float):
            assert got[f"f{i}"].hex() == want.hex()  # -0.0 stays -0.0, nan and inf as the client
        else:
            assert got[f"f{i}"] == want, value


def test_raw_requests_are_the_messages_the_client_sends() -> None:
    """The raw batch is what ``RestToGrpc`` makes of the store's models (filters of every kind,
    the search params, the payload selector, vectors asked or not)."""
    store = QdrantStore("http://127.0.0.1:1", quantization="int8")
    fields = [*CANDIDATE_FIELDS, *CUE_FIELDS]
    vec = [0.25, -1.5, 3.0]
    sparse = SparseVector((3, 9), (0.5, 1.25))
    for flt in [*FILTERS, StoreFilter(only_history_of="x", only_trashed=True, trashed_before=NOW)]:
        plan = filter_plan(flt)
        client_filter = _qdrant_filter(plan)
        assert grpc_filter(plan) == (
            None if client_filter is None else RestToGrpc.convert_filter(client_filter)
        )
        for with_vectors in (False, True):
            ours = raw_query(
                "c",
                dense_query(vec),
                10,
                flt=grpc_filter(plan),
                with_payload=include(fields),
                with_vectors=DENSE_VECTOR if with_vectors else NO_VECTORS,
                params=search_params(store._search_params),
            )
            theirs = RestToGrpc.convert_query_request(
                models.QueryRequest(
                    query=vec,
                    filter=client_filter,
                    limit=10,
                    with_payload=fields,
                    with_vector=[""] if with_vectors else False,
                    params=store._search_params,
                ),
                "c",
            )
            assert ours == theirs
            ours = raw_query(
                "c",
                sparse_query(sparse),
                7,
                flt=grpc_filter(plan),
                with_payload=include(fields),
                with_vectors=DENSE_VECTOR if with_vectors else NO_VECTORS,
                using=LEXICAL_VECTOR,
            )
            bm25 = models.SparseVector(indices=list(sparse.indices), values=list(sparse.values))
            theirs = RestToGrpc.convert_query_request(
                models.QueryRequest(
                    query=bm25,
                    using=LEXICAL_VECTOR,
                    filter=client_filter,
                    limit=7,
                    with_payload=fields,
                    with_vector=[""] if with_vectors else False,
                ),
                "c",
            )
            assert ours == theirs
        # the BM25 hits' cosines: the BM25 query as a prefetch, scored with the dense query
        ours = raw_query(
            "c",
            dense_query(vec),
            7,
            flt=None,
            with_payload=NO_PAYLOAD,
            with_vectors=NO_VECTORS,
            params=search_params(store._search_params),
            prefetch=prefetch(sparse_query(sparse), 7, flt=grpc_filter(plan), using=LEXICAL_VECTOR),
        )
        theirs = RestToGrpc.convert_query_request(
            models.QueryRequest(
                prefetch=models.Prefetch(query=bm25, using=LEXICAL_VECTOR, filter=client_filter, limit=7),
                query=vec,
                limit=7,
                with_payload=False,
                with_vector=False,
                params=store._search_params,
            ),
            "c",
        )
        assert ours == theirs


async def test_collections_of_a_longer_prefix_are_not_listed(qdrant_server: QdrantNode, prefix: str) -> None:
    """Prefix ``p_`` and the collection ``p_old_default`` of a deployment with prefix ``p_old_``:
    not ``p_``'s collection ``old_default`` (its spec names ``default``), neither listed nor found."""
    mine, other = _store(qdrant_server, prefix), _store(qdrant_server, prefix + "old_")
    await mine.open()
    await other.open()
    try:
        await mine.create_collection(replace(_spec(), lexical=None))
        await other.create_collection(replace(_spec(), lexical=None))
        await other.create_collection(replace(_spec("notes"), lexical=None))
        await other.put_state("k", {"v": 1})  # its state collection: prefix + "old__engram_state"
        assert [s.name for s in await mine.list_collections()] == ["default"]
        assert [s.name for s in await other.list_collections()] == ["default", "notes"]
        assert await mine.get_collection("old_default") is None
        assert await mine.get_collection("old_notes") is None
        fresh = _store(qdrant_server, prefix)  # nothing cached
        await fresh.open()
        try:
            assert [s.name for s in await fresh.list_collections()] == ["default"]
        finally:
            await fresh.close()
    finally:
        await other.drop_collection("default")
        await other.drop_collection("notes")
        await mine.drop_collection("default")
        await other.close()
        await mine.close()


async def test_collection_names_are_cached_and_refreshed(
    qdrant_server: QdrantNode, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search naming no collection lists them: one read of the names per
    ``NAMES_REFRESH_SECONDS``; this process's creates and drops show at once, another replica's
    within that time."""
    monkeypatch.setattr(qdrant_module, "NAMES_REFRESH_SECONDS", 0.5)
    a, b = _store(qdrant_server, prefix), _store(qdrant_server, prefix)
    await a.open()
    await b.open()
    raw = a._raw
    assert raw is not None
    reads = 0
    real = raw.collection_names

    async def counting() -> list[str]:
        nonlocal reads
        reads += 1
        return await real()

    raw.collection_names = counting  # type: ignore[method-assign]
    try:
        await a.create_collection(replace(_spec(), lexical=None))
        assert [s.name for s in await a.list_collections()] == ["default"]  # own create: at once
        before = reads
        for _ in range(20):
            await a.list_collections()
        assert reads - before <= 1
        await b.create_collection(replace(_spec("other"), lexical=None))  # another replica
        await asyncio.sleep(0.6)
        assert [s.name for s in await a.list_collections()] == ["default", "other"]
        await a.drop_collection("other")  # own drop: at once
        assert [s.name for s in await a.list_collections()] == ["default"]
    finally:
        for name in ("default", "other"):
            await a.drop_collection(name)
        await b.close()
        await a.close()


async def test_local_mode_keeps_the_clients_calls(tmp_path: object) -> None:
    store = QdrantStore(":memory:")
    await store.open()
    try:
        assert store._raw is None
        await store.create_collection(replace(_spec(), lexical=None))
        assert [s.name for s in await store.list_collections()] == ["default"]
    finally:
        await store.close()


async def test_rest_clients_keep_their_calls(qdrant_server: QdrantNode, prefix: str) -> None:
    store = _store(qdrant_server, prefix, prefer_grpc=False)
    await store.open()
    try:
        assert store._raw is None
        assert isinstance(store._c, AsyncQdrantClient)
    finally:
        await store.close()


class _KeyedNode(QdrantNode):
    """A node that refuses calls without its API key."""

    key = "k-" + uuid.uuid4().hex

    def env(self) -> dict[str, str]:
        return {**super().env(), "QDRANT__SERVICE__API_KEY": self.key}


@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
async def test_raw_reads_send_the_api_key(tmp_path: Path) -> None:
    """The search's reads go on a channel of the store's own: they carry the client's headers
    (the API key: the node refuses calls without it)."""
    binary, why = qdrant_binary()
    if binary is None:
        pytest.skip(why)
    http, grpc_port = free_ports(2)
    node = _KeyedNode(binary, tmp_path, http, grpc_port)
    node.start()
    try:
        node.wait_ready()
        store = QdrantStore(node.url, grpc_port=grpc_port, api_key=node.key, https=False)
        await store.open()
        try:
            assert store._raw is not None
            points = _points(np.random.default_rng(2))[:40]
            await store.create_collection(_spec())
            await store.upsert("default", points)
            q = points[3].vector
            assert q is not None
            sparse = SparseVector((1, 7, 13, 21), (1.0, 0.5, 2.0, 0.25))
            found = await store.candidates("default", q, 10, StoreFilter(), sparse=sparse)
            assert points[3].record.id in found.ids
            got = await store.retrieve("default", found.ids[:3])
            assert [p.record.id for p in got] == found.ids[:3]
            # without the key the node refuses the same read
            raw = store._raw
            raw._metadata = lambda: ()  # type: ignore[method-assign]
            with pytest.raises(StorageUnavailable, match=r"UNAUTHENTICATED|PERMISSION_DENIED"):
                await store.retrieve("default", found.ids[:3])
        finally:
            await store.close()
    finally:
        node.stop()


def _payload_variants() -> list[dict[str, object]]:
    """Candidate payloads as Engram writes them, and each field in the other shapes a payload
    may hold (another writer, an older release, a hand edit)."""
    base: list[dict[str, object]] = []
    for p in _points(np.random.default_rng(4))[:40]:
        payload: dict[str, object] = {**record_to_payload(p.record), **cue_payload(p.record.content)}
        base.append({k: v for k, v in payload.items() if k in (*CANDIDATE_FIELDS, *CUE_FIELDS)})
    odd: list[tuple[str, object]] = [
        ("type", "unknown"),
        ("type", 3),
        ("importance", 7.0),
        ("importance", 200),
        ("importance", -1),
        ("importance", "5"),
        ("created_at", 1_700_000_000),
        ("created_at", 5),
        ("created_at", float("nan")),
        ("created_at", "x"),
        ("valid_until", None),
        ("valid_until", 12),
        ("valid_until", float("inf")),
        ("script", None),
        ("script", ""),
        ("script", 7),
        ("script", "cyrillic"),
        ("superseded_by", "x"),
        ("superseded_by", []),
        ("superseded_by", ["a"]),
        ("superseded_by", ""),
        ("superseded_by", None),
        ("draft", True),
        ("draft", False),
        ("draft", None),
        ("trashed_at", 12.5),
        ("trashed_at", {}),
        ("rescore_questions", None),
        ("rescore_questions", 0),
        ("rescore_questions", 1),
        ("rescore_questions", 0.5),
        ("rescore_questions", "0.5"),
        ("rescore_label", None),
        ("rescore_label", "Alice"),
        ("rescore_label", 5),
        ("rescore_label", "L" * 300),
    ]
    out = list(base)
    for i, (name, value) in enumerate(odd):
        out.append({**base[i % len(base)], name: value})
    for name in (*CANDIDATE_FIELDS, *CUE_FIELDS):
        out.append({k: v for k, v in base[0].items() if k != name})
    return out


def test_candidate_fields_equal_the_full_decoding() -> None:
    """``candidate_fields`` reads a candidate's ranking fields and cue straight from the payload's
    bytes: the same values as decoding the payload in full, or None (the full decoding then)."""
    fast = 0
    for i, payload in enumerate(_payload_variants()):
        encoded = {k: json_to_value(v).SerializeToString() for k, v in payload.items()}
        key = str(uuid.UUID(int=i))
        row = candidate_fields(encoded)
        if row is None:
            continue
        fast += 1
        decoded = payload_of(encoded)
        assert row[:5] == rank_fields(key, decoded, "default")[:5], payload
        assert row[5] == stored_cue(decoded), payload
    assert fast >= 40, "payloads as Engram writes them take the direct path"


@pytest.mark.parametrize("quantization", ["none", "int8"])
async def test_the_bm25_hits_cosines_are_the_cosines_of_their_stored_vectors(
    qdrant_server: QdrantNode, prefix: str, quantization: str
) -> None:
    """The node scores the BM25-only hits with the dense query (a prefetch query in the batch):
    each candidate's cosine is that of its stored vector (float32 scores), on both paths, with
    int8 codes built too (the scores are rescored with the original vectors), vectors asked or
    not."""
    rng = np.random.default_rng(21)
    points = _points(rng)
    stored = {p.record.id: np.asarray(p.vector, dtype=np.float64) for p in points}
    raw, old = _store(qdrant_server, prefix, quantization=quantization), _store(qdrant_server, prefix)
    await raw.open()
    await old.open()
    try:
        await raw.create_collection(_spec())
        await raw.upsert("default", points)
        if quantization == "int8":  # the index and the int8 codes built for every point
            await raw._c.update_collection(
                prefix + "default", optimizers_config=models.OptimizersConfigDiff(indexing_threshold=1)
            )
            for _ in range(600):
                info = await raw._c.get_collection(prefix + "default")
                if info.status == models.CollectionStatus.GREEN and (info.indexed_vectors_count or 0) >= N:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError(f"index not built: {info}")
        old._raw = None
        lexical_only = 0
        for flt in FILTERS[:4]:
            for with_vectors in (False, True):
                q = rng.normal(size=DIM).astype(np.float32)
                sparse = SparseVector((1, 7, 13, 21, 33), (1.0, 0.5, 2.0, 0.25, 1.5))
                found = await raw.candidates(
                    "default", q, 10, flt, sparse=sparse, lexical_limit=30, with_vectors=with_vectors
                )
                y = np.asarray(q, dtype=np.float64)
                for i, pid in enumerate(found.ids):
                    x = stored[pid]
                    want = float(x @ y) / float(np.linalg.norm(x) * np.linalg.norm(y))
                    assert abs(found.cosine[i] - want) < 1e-6, (pid, found.cosine[i], want)
                lexical_only += int(np.count_nonzero(found.lexical[10:]))
                if quantization == "none":  # the client's path: the same values
                    _same(
                        found,
                        await old.candidates(
                            "default", q, 10, flt, sparse=sparse, lexical_limit=30, with_vectors=with_vectors
                        ),
                    )
        assert lexical_only > 20, "the searches have BM25-only candidates"
    finally:
        await old.close()
        await raw.close()


async def test_odd_payloads_and_repeated_hits_give_the_clients_candidates(
    stores: tuple[QdrantStore, QdrantStore],
) -> None:
    """Candidates whose payload is not as Engram writes it (an importance as a double, a null
    script, a text label field, a cue share as a string) are decoded in full, and a point the node
    sent twice in one answer counts once (its first row): the same candidates as the client's."""
    raw, old = stores
    records, _ = await raw.scroll("default", StoreFilter(), 400)
    odd = [r.id for r in records[::7]]
    qname = raw._qname("default")
    edits: list[dict[str, Any]] = [
        {"importance": 7.0},
        {"script": None},
        {"rescore_label": 5},
        {"rescore_questions": "0.5"},
    ]
    for i, pid in enumerate(odd):  # (by another program: the packed ranking value goes)
        await raw._c.set_payload(qname, payload=edits[i % len(edits)], points=[pid], wait=True)
        await raw._c.delete_payload(qname, keys=[PACKED_FIELD], points=[pid], wait=True)
    rng = np.random.default_rng(17)
    sparse = SparseVector((1, 7, 13, 21), (1.0, 0.5, 2.0, 0.25))
    real = raw._raw.query_batch if raw._raw is not None else None
    assert real is not None
    seen_odd = 0
    for _ in range(6):
        q = rng.normal(size=DIM).astype(np.float32)
        want = await old.candidates("default", q, 60, StoreFilter(), sparse=sparse, lexical_limit=30)
        seen_odd += len(set(odd) & set(want.ids))
        _same(await raw.candidates("default", q, 60, StoreFilter(), sparse=sparse, lexical_limit=30), want)

        async def twice(collection: str, queries: Any) -> Any:
            answers = await real(collection, queries)
            return [[*answers[0][:3], *answers[0][:2], *answers[0][3:]], *answers[1:]]

        raw._raw.query_batch = twice  # type: ignore[method-assign, union-attr]
        try:
            got = await raw.candidates("default", q, 60, StoreFilter(), sparse=sparse, lexical_limit=30)
        finally:
            raw._raw.query_batch = real  # type: ignore[method-assign, union-attr]
        _same(got, want)
    assert seen_odd >= 5, "the searches find points with odd payloads"
