"""`make bench`: where a search's time goes — per-stage costs at N memories, beside the floor.

    .venv/bin/python bench/stages.py --memories 10000,100000 --samples 200 \\
        --json results/bench/stages.json --md results/bench/stages.md
    .venv/bin/python bench/stages.py --quick          # 2,000 memories, 30 samples (development)

For each size N:

1. **Corpus.** Only the bulk corpus is synthetic; every query (and every AddMemory) is embedded by
   the real model. Embedding N texts with the local model would take ~35 min of CPU at 100k here,
   so ``--base-texts`` (default 2,000) varied template sentences — English, ~15 % Chinese, of the
   four memory types — are embedded once with the real local model (e5 ``passage:`` path), and each
   of the N memories gets a vector that is a normalised random mixture of three of those base
   vectors (main weight 0.6-0.9) plus Gaussian noise (σ = 0.012 per dimension), and its own text:
   its main base's template re-filled with new numbers and one word borrowed from a mixed-in base
   (so its BM25 terms fit its vector). The cosine distributions this gives are printed beside the
   real ones (pairwise, nearest neighbour, query top-1; see the "corpus check" line). Records
   carry what ``MemoryService.add`` would set: mixed types and importance, tags, metadata,
   provenance, ``valid_until`` from ``domain/ttl.py`` (all live: events sit in ~20-turn
   sessions of the last 2.7 days, other types within their TTL), ~3 % history versions
   (``superseded_by``), ~0.5 % reflection drafts, some request ids and near-duplicate lists.
   They are written straight into a fresh data dir through ``EdgeStore`` (collection "default",
   the local embedder's model id / dimension, lexical = ``bm25-v1``, sparse vectors from
   ``Bm25Encoder.encode_document``), then the store is closed.
2. **Server.** ``running_server(data_dir)`` opens it (the HNSW index is built in ``open()`` for a
   collection past ``ENGRAM_HNSW_THRESHOLD`` = 20,000 points: the first start-up is timed, and the
   second one, on already indexed data, too; the difference of their ``EdgeStore.open()`` times is
   the build). Between the two the
   data dir is copied, so the floor can open the same shard directly. NOTE (qdrant-edge 0.9): in a
   collection with the lexical sparse vector, ``info().indexed_vectors_count`` counts the sparse
   vectors (always indexed), so it equals ``points_count`` and EdgeStore's "due" test never fires:
   no HNSW is built and dense search stays brute force. ``--optimize-copy`` calls ``optimize()``
   on the floor's copy, to show what the index would give.
3. **Samples**, one call at a time, in a shuffled order per round so every stage shares the noise:
   over a real gRPC channel SearchMemories with a unique query, SearchMemories with one repeated
   query (its embedding is in the query cache), AddMemory of a new text (through the write gate),
   GetMemory by id and the gRPC health check (the overhead floors); and, in the same process, the
   stages alone: the server's local embedder without batcher or cache (``embed_queries`` of one
   unique text; a batch of 32 in every 10th round, per text), the BM25 query encoder, the same
   Qdrant requests the service sends, made directly on a ``qdrant_edge.EdgeShard`` opened on the
   copy (dense top-100 with the service's filter — live, not superseded, not a draft — and with
   no filter or without payload; sparse top-100; the gate's dense top-8), the server's own
   ``EdgeStore.search`` (both queries + payload decoding), decoding 200 payloads alone, the
   ranking alone (hybrid relevance + fusion over the ~200 candidates), and ``service.search``
   in-process with a cached query (no gRPC).
   **Floor** of a search = embed one query + the dense query + the sparse query, done directly,
   summed per round. Reported: SearchMemories p50 / floor p50, and the cached SearchMemories p50
   against the two queries done directly.
   After each SearchMemories the service's background access-count update (``_bump_access``: a
   retrieve + set_payload of the 10 hits) is awaited outside the timed region and timed too.
4. **Memory and disk.** VmRSS (``/proc/self/status``; psutil is not in the venv) before the server
   starts and after it opened the data (model + shard), and after the samples; disk bytes per
   memory, allocated blocks (``st_blocks`` × 512) with and without the WAL.
5. One Markdown table per size and a growth table; ``--json`` / ``--md`` write them.
   ``--profile`` adds a cProfile of in-process ``service.search`` calls (cached queries), on the
   event-loop thread and on the storage io thread, top functions by own time.

Runtime: ``--memories 10000,100000 --samples 200`` takes ~15-25 min on the 2-core machine
(the 100k HNSW build is ~1.5-3 min of it, embedding the base texts ~1-3 min). Ratios are the
figures to compare across machines: the machine is shared and absolute numbers move with load.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import gc
import io
import json
import os
import pstats
import random
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
import qdrant_edge as qe
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.adapters.embedding.batching import BatchingEmbedder
from engram_server.adapters.embedding.local import LocalE5Embedder
from engram_server.adapters.lexical import LEXICAL_ENCODER_ID, Bm25Encoder
from engram_server.adapters.storage.edge import DENSE_SEARCH_PARAMS, EdgeStore, _edge_filter
from engram_server.adapters.storage.payload import LEXICAL_VECTOR, filter_plan, record_from_payload
from engram_server.domain.model import (
    DEFAULT_COLLECTION,
    Candidates,
    CollectionSpec,
    MemoryRecord,
    MemoryType,
    Source,
    SourceType,
    StoredPoint,
    StoreFilter,
)
from engram_server.domain.service import MemoryService, SearchQuery, _Query
from engram_server.domain.ttl import DAY, compute_valid_until, ttl_seconds
from engram_server.testing import running_server

COLLECTION = DEFAULT_COLLECTION
CANDIDATES = 100  # max(limit * 3, 100) for limit 10: what the service asks each side for
GATE_K = 8
NOISE = 0.012
WRITE_BATCH = 1000
Vec = npt.NDArray[np.float32]
RANK_FIELDS = ["type", "importance", "created_at"]

# ----------------------------------------------------------------------------- synthetic text

PEOPLE = ["Alice", "Bruno", "Chen Wei", "Dara", "Emeka", "Fatima", "Gustav", "Hana", "Ivan", "Jun", "Kofi",
          "Lena", "Mateo", "Nadia", "Omar", "Priya"]  # fmt: skip
PLACES = ["Berlin", "Lisbon", "Osaka", "Nairobi", "Lima", "Oslo", "Hanoi", "Austin", "Porto", "Seoul",
          "Quito", "Krakow", "Dublin", "Accra"]  # fmt: skip
THINGS = ["the quarterly report", "a birthday dinner", "the database migration", "a dentist appointment",
          "the hiking trip", "the new laptop", "a piano lesson", "the tax return", "the team offsite",
          "a job interview", "the garden project", "the car repair", "the mobile release",
          "the kitchen renovation", "the conference talk", "the rent contract", "a flight to the coast",
          "the CI pipeline"]  # fmt: skip
VERBS = ["discussed", "planned", "postponed", "finished", "booked", "cancelled", "reviewed", "paid for",
         "asked about", "worried about"]  # fmt: skip
JOBS = ["nurse", "data engineer", "teacher", "architect", "chef", "lawyer", "designer", "pilot"]
FOODS = ["peanuts", "shellfish", "gluten", "dairy", "sesame", "eggs"]
HABITS = ["over-plan", "procrastinate", "ask for feedback", "work late", "double-check numbers", "skip lunch"]
ZH_PEOPLE = ["小王", "李娜", "张伟", "陈静", "刘洋", "王芳"]
ZH_PLACES = ["北京", "上海", "杭州", "成都", "深圳", "西安"]
ZH_THINGS = [
    "季度报告",
    "生日晚宴",
    "数据库迁移",
    "牙医预约",
    "徒步旅行",
    "新电脑",
    "钢琴课",
    "报税",
    "团队团建",
]
ZH_VERBS = ["讨论了", "计划了", "推迟了", "完成了", "预订了", "取消了"]
TAGS = ["work", "family", "health", "travel", "finance", "project-x", "urgent", "time-sensitive", "location",
        "permanent", "music", "home"]  # fmt: skip

# (type, template); {n}/{d}/{h}/{m} are numbers re-drawn for every memory.
TEMPLATES: list[tuple[MemoryType, str]] = [
    (MemoryType.EVENT, "{p} {v} {t} in {c} on day {d} at {h}:{m}, ref #{n}."),
    (MemoryType.EVENT, "Meeting note: {p} and the team {v} {t}; next step due in {d} days ({c} office)."),
    (MemoryType.EVENT, "{p} called from {c} and {v} {t}; follow up before {h}:{m} tomorrow, ticket {n}."),
    (MemoryType.IDENTITY, "{p} lives in {c} and works as a {j}; prefers to be addressed as {p}."),
    (MemoryType.IDENTITY, "{p} is allergic to {f} and avoids it in every meal plan."),
    (
        MemoryType.DIRECTIVE,
        "When writing to {p}, keep messages short and never schedule before {h}:00 {c} time.",
    ),
    (MemoryType.DIRECTIVE, "For {t}, always ask {p} before spending more than {n} euros."),
    (MemoryType.INSIGHT, "{p} tends to {b} before {t}, especially when travelling to {c}."),
    (MemoryType.INSIGHT, "Across the last {d} weeks, {p} {v} {t} more often than anything else."),
    (MemoryType.EVENT, "{zp}在{zc}{zv}{zt}，第{d}天{h}点，编号{n}。"),
    (MemoryType.EVENT, "{zp}说下周要和{p}一起{zv}{zt}（{c}）。"),
    (MemoryType.INSIGHT, "{zp}每次{zt}之前都会先问{p}的意见。"),
]
QUERY_TEMPLATES = [
    "When did {p} {v} {t}? ({n})",
    "what did {p} say about {t} in {c} on day {n}",
    "Which notes mention {t} and {c}, week {n}?",
    "{p}'s preferences about {t} (case {n})",
    "{zp}什么时候{zv}{zt}？第{n}次",
]


def slots(rng: random.Random) -> dict[str, str]:
    return {
        "p": rng.choice(PEOPLE), "v": rng.choice(VERBS), "t": rng.choice(THINGS), "c": rng.choice(PLACES),
        "j": rng.choice(JOBS), "f": rng.choice(FOODS), "b": rng.choice(HABITS), "zp": rng.choice(ZH_PEOPLE),
        "zc": rng.choice(ZH_PLACES), "zt": rng.choice(ZH_THINGS), "zv": rng.choice(ZH_VERBS),
    }  # fmt: skip


def numbers(rng: random.Random) -> dict[str, str]:
    return {
        "n": str(rng.randint(100, 99_999)),
        "d": str(rng.randint(1, 365)),
        "h": str(rng.randint(6, 22)),
        "m": rng.choice(["00", "15", "30", "45"]),
    }


@dataclass(frozen=True)
class Base:
    template: int
    slots: dict[str, str]
    text: str


def make_bases(rng: random.Random, n: int) -> list[Base]:
    out: list[Base] = []
    for _ in range(n):
        ti = rng.randrange(len(TEMPLATES))
        sl = slots(rng)
        out.append(Base(ti, sl, TEMPLATES[ti][1].format(**sl, **numbers(rng))))
    return out


def query_text(rng: random.Random, j: int) -> str:
    return rng.choice(QUERY_TEMPLATES).format(**slots(rng), n=j)


# ----------------------------------------------------------------------------- corpus


@dataclass
class Corpus:
    records: list[MemoryRecord]
    vectors: Vec
    build_seconds: dict[str, float]


def mix_vectors(base_vecs: Vec, n: int, seed: int) -> tuple[Vec, npt.NDArray[np.int64]]:
    """N normalised mixtures of 3 base vectors (main weight 0.6-0.9) plus Gaussian noise."""
    r = np.random.default_rng(seed)
    nb = base_vecs.shape[0]
    idx = r.integers(0, nb, size=(n, 3))
    w1 = r.uniform(0.6, 0.9, n)
    w2 = (1 - w1) * r.uniform(0.3, 1.0, n)
    w3 = 1 - w1 - w2
    out = np.empty((n, base_vecs.shape[1]), dtype=np.float32)
    for start in range(0, n, 20_000):
        sl = slice(start, min(n, start + 20_000))
        v = (
            w1[sl, None] * base_vecs[idx[sl, 0]]
            + w2[sl, None] * base_vecs[idx[sl, 1]]
            + w3[sl, None] * base_vecs[idx[sl, 2]]
            + r.normal(0.0, NOISE, (sl.stop - sl.start, base_vecs.shape[1]))
        )
        out[sl] = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)
    return out, idx


def make_records(
    rng: random.Random, bases: list[Base], idx: npt.NDArray[np.int64], now: float
) -> list[MemoryRecord]:
    n = idx.shape[0]
    ids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(n)]
    session_start: dict[int, float] = {}
    records: list[MemoryRecord] = []
    for i in range(n):
        main, other = bases[int(idx[i, 0])], bases[int(idx[i, 1])]
        sl = dict(main.slots)
        borrow = rng.choice(sorted(sl))  # one word from a mixed-in memory
        sl[borrow] = other.slots[borrow]
        mtype, template = TEMPLATES[main.template]
        text = template.format(**sl, **numbers(rng))
        importance = rng.choices(range(1, 11), weights=[4, 6, 8, 10, 12, 12, 10, 8, 5, 3])[0]
        tags = tuple(sorted(set(rng.sample(TAGS, rng.choice([0, 0, 1, 1, 1, 2, 3])))))
        if mtype is MemoryType.EVENT:
            session = i // 20
            start = session_start.setdefault(session, now - rng.uniform(600, 2.7 * DAY))
            created = start + (i % 20) * rng.uniform(5, 40)
        else:
            ttl = ttl_seconds(mtype, importance, tags)
            created = now - rng.uniform(60, 0.9 * min(ttl if ttl is not None else 180 * DAY, 180 * DAY))
        source_type = rng.choice(list(SourceType)[:5])
        rid = str(uuid.UUID(int=rng.getrandbits(128), version=4)) if rng.random() < 0.2 else None
        superseded = ids[(i + 1) % n] if rng.random() < 0.03 else None
        records.append(
            MemoryRecord(
                id=ids[i],
                collection=COLLECTION,
                content=text,
                type=mtype,
                importance=importance,
                tags=tags,
                source=rng.choice([Source.AGENT, Source.AGENT, Source.USER]),
                source_type=source_type,
                source_type_history=(source_type,),
                metadata={"session": f"s{i // 20}", "channel": rng.choice(["chat", "email", "voice"])}
                if rng.random() < 0.5
                else {},
                created_at=created,
                updated_at=created,
                valid_until=compute_valid_until(mtype, importance, tags, created),
                version=2 if rng.random() < 0.03 else 1,
                superseded_by=superseded,
                request_id=rid,
                request_hash=uuid.uuid4().hex if rid else None,
                near_duplicates=((ids[rng.randrange(n)], round(rng.uniform(0.82, 0.92), 6)),)
                if rng.random() < 0.05
                else (),
                draft=mtype is MemoryType.INSIGHT and rng.random() < 0.02,
            )
        )
    return records


async def write_corpus(
    data_dir: Path, n: int, bases: list[Base], base_vecs: Vec, *, model_id: str, dim: int, seed: int
) -> Corpus:
    rng = random.Random(seed)
    now = time.time()
    times: dict[str, float] = {}
    t = time.perf_counter()
    vectors, idx = mix_vectors(base_vecs, n, seed)
    records = make_records(rng, bases, idx, now)
    times["generate_s"] = time.perf_counter() - t
    t = time.perf_counter()
    bm25 = Bm25Encoder()
    sparse = [bm25.encode_document(r.content) for r in records]
    times["bm25_encode_s"] = time.perf_counter() - t
    store = EdgeStore(data_dir)
    await store.open()
    t = time.perf_counter()
    try:
        spec = CollectionSpec(COLLECTION, model_id, dim, now - 200 * DAY, lexical=LEXICAL_ENCODER_ID)
        await store.create_collection(spec)
        for start in range(0, n, WRITE_BATCH):
            await store.upsert(
                COLLECTION,
                [
                    StoredPoint(records[i], vectors[i], sparse[i])
                    for i in range(start, min(n, start + WRITE_BATCH))
                ],
            )
    finally:
        await store.close()
    times["upsert_s"] = time.perf_counter() - t
    return Corpus(records, vectors, times)


def cosine_check(real: Vec, synth: Vec, queries: Vec) -> dict[str, Any]:
    """Cosine distributions of the real base vectors vs the synthetic corpus (a sample of each)."""

    def stats(m: Vec) -> dict[str, float]:
        m = m[:1500]
        c = m @ m.T
        iu = np.triu_indices(len(m), 1)
        np.fill_diagonal(c, -1)
        q = queries @ m.T
        return {
            "pairwise_p50": round(float(np.median(c[iu])), 3),
            "pairwise_p99": round(float(np.percentile(c[iu], 99)), 3),
            "nearest_neighbour_p50": round(float(np.median(c.max(axis=1))), 3),
            "query_top1_p50": round(float(np.median(q.max(axis=1))), 3),
            "query_all_p50": round(float(np.median(q)), 3),
        }

    return {"real": stats(real), "synthetic": stats(synth)}


# ----------------------------------------------------------------------------- measuring


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def dir_bytes(root: Path) -> dict[str, int]:
    out = {"apparent": 0, "allocated": 0, "apparent_without_wal": 0, "allocated_without_wal": 0}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            st = path.lstat()
            wal = "wal" in path.relative_to(root).parts
            out["apparent"] += st.st_size
            out["allocated"] += st.st_blocks * 512
            if not wal:
                out["apparent_without_wal"] += st.st_size
                out["allocated_without_wal"] += st.st_blocks * 512
    return out


def timed_store(data_dir: Path, hnsw_threshold: int | None = None) -> tuple[EdgeStore, list[float]]:
    """An EdgeStore as the server builds it on the defaults (or with ``hnsw_threshold``), whose
    open() (which builds due HNSW indexes) is timed into the returned list."""
    store = (
        EdgeStore(data_dir) if hnsw_threshold is None else EdgeStore(data_dir, hnsw_threshold=hnsw_threshold)
    )
    took = [0.0]
    inner_open = store.open

    async def open_timed() -> None:
        t = time.perf_counter()
        await inner_open()
        took[0] = time.perf_counter() - t

    setattr(store, "open", open_timed)  # noqa: B010 - instrument this one instance
    return store, took


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        "n": len(values),
        "p50_ms": statistics.median(values),
        "p95_ms": pct(values, 0.95),
        "p99_ms": pct(values, 0.99),
    }


@dataclass
class Samples:
    ms: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, value_ms: float) -> None:
        self.ms.setdefault(name, []).append(value_ms)


def timed_sync(samples: Samples, name: str, fn: Callable[[], Any]) -> Any:
    t = time.perf_counter()
    out = fn()
    samples.add(name, (time.perf_counter() - t) * 1000)
    return out


async def timed(samples: Samples, name: str, coro: Awaitable[Any]) -> Any:
    t = time.perf_counter()
    out = await coro
    samples.add(name, (time.perf_counter() - t) * 1000)
    return out


def rank(service: MemoryService, found: Candidates, now: float) -> list[Any]:
    """The ranking step of MemoryService.search for one collection (limit 10, default weights):
    relevance (cached with the candidate list on a repeated search), then recency + fusion + order."""
    pool = service._prepare(found, _Query(service, "what did Alice say about the quarterly report"))
    return service._rank([pool], now, service.policy.weights, 0.0, keep=10)


def shard_requests(
    vec: list[float], sparse: qe.SparseVector, flt: qe.Filter | None
) -> dict[str, qe.QueryRequest]:
    """The requests EdgeStore.search / the gate send, plus variants without filter / payload."""
    near = qe.Query.Nearest(vec)
    lex = qe.Query.Nearest(sparse, using=LEXICAL_VECTOR)
    k = CANDIDATES
    req = qe.QueryRequest
    dp = DENSE_SEARCH_PARAMS  # as the store asks (int8 codes walked for 1.5 x, rescored; if quantized)
    return {
        "dense": req(limit=k, query=near, filter=flt, with_payload=True, with_vector=False, params=dp),
        "dense_nofilter": req(limit=k, query=near, with_payload=True, with_vector=False, params=dp),
        "dense_ids": req(limit=k, query=near, filter=flt, with_payload=False, with_vector=False, params=dp),
        "sparse": req(limit=k, query=lex, filter=flt, with_payload=True, with_vector=[""]),
        "sparse_ids": req(limit=k, query=lex, filter=flt, with_payload=False, with_vector=False),
        "gate": req(limit=GATE_K, query=near, filter=flt, with_payload=True, with_vector=False),
        # What ranking needs, without the rest of the payload (a possible cheaper candidate fetch).
        "dense_rankfields": req(
            limit=k, query=near, filter=flt, with_payload=RANK_FIELDS, with_vector=False, params=dp
        ),
        "sparse_rankfields": req(limit=k, query=lex, filter=flt, with_payload=RANK_FIELDS, with_vector=False),
    }


STAGE_LABELS = {
    "rpc_search": "SearchMemories (gRPC, unique query)",
    "rpc_search_cached": "SearchMemories (gRPC, embedding cached, candidates from storage)",
    "rpc_search_repeat": "SearchMemories (gRPC, same search again, nothing written: candidate cache)",
    "rpc_search_after_write": "SearchMemories (gRPC, same search again after an AddMemory: nearest list "
    "patched)",
    "rpc_search_cached_b2b": "SearchMemories (gRPC, embedding cached, candidates from storage), the 3rd of 3 "
    "back-to-back",
    "hop_idle": "storage io thread: an empty job after 100 ms idle (thread wake-up)",
    "hop_warm": "storage io thread: an empty job right after another",
    "rpc_add": "AddMemory (gRPC, new text, gate + write)",
    "rpc_get": "GetMemory by id (gRPC)",
    "rpc_health": "health Check (gRPC overhead floor)",
    "bump_access": "after a search: background access-count update",
    "svc_search_cached": "service.search in-process, embedding cached, candidates from storage (no gRPC)",
    "store_search": "EdgeStore.candidates: dense + sparse top-100, ranking columns (server's store)",
    "embed_one": "embed 1 query (local model, no batcher/cache)",
    "embed_batch32_per_text": "embed a batch of 32 queries, per text",
    "bm25_query": "BM25 encode 1 query",
    "q_dense": "direct: dense top-100, service filter, payload",
    "q_dense_nofilter": "direct: dense top-100, no filter, payload",
    "q_dense_ids": "direct: dense top-100, service filter, ids only",
    "q_sparse": "direct: sparse top-100, service filter, payload + dense vector",
    "q_sparse_ids": "direct: sparse top-100, service filter, ids only",
    "q_dense_rankfields": "direct: dense top-100, service filter, payload type/importance/created_at only",
    "q_sparse_rankfields": "direct: sparse top-100, service filter, payload type/importance/created_at only",
    "q_gate": "direct: gate query, dense top-8, live filter, payload",
    "decode_200": "decode payloads of the dense + sparse hits (record_from_payload)",
    "rank": "ranking alone: hybrid relevance + fusion + sort",
    "floor": "FLOOR: embed 1 + dense + sparse, direct",
    "floor_queries": "dense + sparse, direct",
}


# ----------------------------------------------------------------------------- one size


async def measure_size(
    n: int,
    args: argparse.Namespace,
    *,
    bases: list[Base],
    base_vecs: Vec,
    base_query_vecs: Vec,
    tmp_root: Path,
) -> dict[str, Any]:
    rng = random.Random(1000 + n)
    data_dir = tmp_root / f"data-{n}"
    copy_dir = tmp_root / f"copy-{n}"
    res: dict[str, Any] = {"memories": n}
    print(f"\n== {n:,} memories: writing the corpus …", flush=True)
    corpus = await write_corpus(
        data_dir, n, bases, base_vecs, model_id=args.model_id, dim=args.dimension, seed=n
    )
    res["corpus"] = corpus.build_seconds
    res["corpus_check"] = cosine_check(
        base_vecs, corpus.vectors[np.random.default_rng(1).permutation(n)], base_query_vecs
    )
    print(f"   corpus written {corpus.build_seconds}; cosine check {res['corpus_check']}", flush=True)
    live_ids = [r.id for r in corpus.records if r.superseded_by is None and not r.draft]
    del corpus
    gc.collect()

    # First start-up: builds the HNSW index when due. Then copy the (indexed) data for the floor.
    first_store, first_open = timed_store(data_dir, args.hnsw_threshold)
    t = time.perf_counter()
    async with running_server(data_dir, store=first_store):
        res["first_start_s"] = time.perf_counter() - t
        res["first_store_open_s"] = first_open[0]
        print(
            f"   first start-up {res['first_start_s']:.1f} s (store open {first_open[0]:.1f} s)", flush=True
        )
    shutil.copytree(data_dir, copy_dir)
    disk = dir_bytes(data_dir)
    res["disk"] = disk
    res["disk_bytes_per_memory"] = {k: v / n for k, v in disk.items()}
    gc.collect()

    rss0 = rss_bytes()
    second_store, second_open = timed_store(data_dir, args.hnsw_threshold)
    t = time.perf_counter()
    async with running_server(data_dir, store=second_store) as srv:
        res["reopen_s"] = time.perf_counter() - t
        res["reopen_store_open_s"] = second_open[0]
        rss1 = rss_bytes()
        # The first open built the HNSW index (when due); the second found it built.
        res["hnsw_build_s"] = max(0.0, first_open[0] - second_open[0])
        store = srv.store
        service = srv.service
        emb = srv.embedder
        assert isinstance(emb, BatchingEmbedder) and isinstance(emb.inner, LocalE5Embedder)
        assert isinstance(store, EdgeStore)
        inner = emb.inner
        bm25 = Bm25Encoder()

        shard = qe.EdgeShard.load(str(copy_dir / "collections" / COLLECTION / "shard"))
        if args.optimize_copy:
            # Build the HNSW index on the floor's copy whatever EdgeStore decided (see --help).
            t = time.perf_counter()
            res["copy_optimize_changed"] = shard.optimize()
            res["copy_optimize_s"] = time.perf_counter() - t
        info = shard.info()
        res["shard"] = {
            "points": info.points_count,
            "indexed_vectors": info.indexed_vectors_count,
            "segments": info.segments_count,
        }
        rss2 = rss_bytes()
        # The store reads every memory's ranking fields in the background after open: sample once
        # that is done (white box), as a server that has been up for a few seconds would be.
        t = time.perf_counter()
        while not store._cols[COLLECTION].warm:
            await store.count(COLLECTION, StoreFilter())  # one io-thread job: lets the pages run
            await asyncio.sleep(0.05)
        res["ranking_fields_wait_s"] = time.perf_counter() - t
        print(f"   reopen {res['reopen_s']:.1f} s; shard {res['shard']}", flush=True)

        sm = Samples()
        add_outcomes: dict[str, int] = {}
        counter = [0]

        def uniq() -> str:
            counter[0] += 1
            return query_text(rng, 10_000 * n + counter[0])

        async with grpc.aio.insecure_channel(srv.address) as ch:
            stub = memory_service_pb2_grpc.MemoryServiceStub(ch)
            health = health_pb2_grpc.HealthStub(ch)
            cached_q = "what did Alice say about the quarterly report in Berlin"
            await stub.SearchMemories(s.SearchMemoriesRequest(query=cached_q, limit=10))
            await service.search(SearchQuery(query=cached_q, limit=10))
            await service.drain()
            for _ in range(3):  # warm every path once
                await inner.embed_queries([uniq()])
                await stub.SearchMemories(s.SearchMemoriesRequest(query=uniq(), limit=10))
            await service.drain()

            async def rpc_search() -> None:
                await timed(
                    sm, "rpc_search", stub.SearchMemories(s.SearchMemoriesRequest(query=uniq(), limit=10))
                )
                await timed(sm, "bump_access", service.drain())

            def forget_results() -> None:
                # White box: drop the search caches and the store's nearest lists, so the storage
                # searches its graph (embedding cached).
                service._candidate_cache.clear()
                service._record_cache.clear()
                store._cols[COLLECTION].nearest.reset()

            async def rpc_search_after_write() -> None:
                # An agent's usual pattern: a memory written, then a question asked before is
                # asked again (embedding cached; the store patches its nearest list).
                req = s.SearchMemoriesRequest(query=cached_q, limit=10)
                await stub.SearchMemories(req)
                text = TEMPLATES[1][1].format(**slots(rng), **numbers(rng)) + f" [{uniq()}]"
                r = await stub.AddMemory(s.AddMemoryRequest(content=text))
                key = s.AddOutcome.Name(r.outcome)
                add_outcomes[key] = add_outcomes.get(key, 0) + 1
                await service.drain()
                await timed(sm, "rpc_search_after_write", stub.SearchMemories(req))
                await service.drain()

            async def rpc_search_cached() -> None:
                req = s.SearchMemoriesRequest(query=cached_q, limit=10)
                forget_results()
                await timed(sm, "rpc_search_cached", stub.SearchMemories(req))
                await service.drain()

            async def rpc_search_repeat() -> None:
                req = s.SearchMemoriesRequest(query=cached_q, limit=10)
                await stub.SearchMemories(req)
                await timed(sm, "rpc_search_repeat", stub.SearchMemories(req))  # nothing written between
                await service.drain()

            async def rpc_search_cached_b2b() -> None:
                # The same storage-bound search arriving back-to-back (as under load): the threads
                # it crosses are awake; compare with rpc_search_cached and the hops below.
                req = s.SearchMemoriesRequest(query=cached_q, limit=10)
                for _ in range(2):
                    forget_results()
                    await stub.SearchMemories(req)
                forget_results()
                await timed(sm, "rpc_search_cached_b2b", stub.SearchMemories(req))
                await service.drain()

            async def hops() -> None:
                await asyncio.sleep(0.1)
                await timed(sm, "hop_idle", store._run(lambda: None))
                await timed(sm, "hop_warm", store._run(lambda: None))

            async def svc_search_cached() -> None:
                forget_results()
                await timed(sm, "svc_search_cached", service.search(SearchQuery(query=cached_q, limit=10)))
                await service.drain()

            async def rpc_add() -> None:
                text = TEMPLATES[0][1].format(**slots(rng), **numbers(rng)) + f" [{uniq()}]"
                r = await timed(sm, "rpc_add", stub.AddMemory(s.AddMemoryRequest(content=text)))
                key = s.AddOutcome.Name(r.outcome)
                add_outcomes[key] = add_outcomes.get(key, 0) + 1

            async def rpc_get() -> None:
                req = s.GetMemoryRequest(id=rng.choice(live_ids))
                await timed(sm, "rpc_get", stub.GetMemory(req))

            async def rpc_health() -> None:
                await timed(sm, "rpc_health", health.Check(health_pb2.HealthCheckRequest()))

            async def direct(batch: bool) -> None:
                text = uniq()
                t0 = time.perf_counter()
                qvec = (await inner.embed_queries([text]))[0]
                e_ms = (time.perf_counter() - t0) * 1000
                sm.add("embed_one", e_ms)
                if batch:
                    texts = [uniq() for _ in range(32)]
                    t1 = time.perf_counter()
                    await inner.embed_queries(texts)
                    sm.add("embed_batch32_per_text", (time.perf_counter() - t1) * 1000 / 32)
                qs = timed_sync(sm, "bm25_query", lambda: bm25.encode_query(text))
                now = time.time()
                flt = _edge_filter(filter_plan(StoreFilter(live_at=now)))
                vec = [float(x) for x in qvec]
                reqs = shard_requests(vec, qe.SparseVector(list(qs.indices), list(qs.values)), flt)
                order = list(reqs)
                rng.shuffle(order)
                hits: dict[str, list[Any]] = {}
                for name in order:
                    req = reqs[name]
                    hits[name] = timed_sync(sm, f"q_{name}", functools.partial(shard.query, req))
                sm.add("floor", e_ms + sm.ms["q_dense"][-1] + sm.ms["q_sparse"][-1])
                sm.add("floor_queries", sm.ms["q_dense"][-1] + sm.ms["q_sparse"][-1])
                raw = hits["dense"] + hits["sparse"]
                timed_sync(
                    sm,
                    "decode_200",
                    lambda: [record_from_payload(h.id, COLLECTION, h.payload or {}) for h in raw],
                )
                search = store.candidates(COLLECTION, qvec, CANDIDATES, StoreFilter(live_at=now), sparse=qs)
                found = await timed(sm, "store_search", search)
                timed_sync(sm, "rank", lambda: rank(service, found, now))
                res.setdefault("candidates", []).append(len(found))

            print(f"   sampling ({args.samples} rounds) …", flush=True)
            t_s = time.perf_counter()
            for i in range(args.samples):
                steps: list[Callable[[], Awaitable[None]]] = [
                    rpc_search, rpc_search_cached, rpc_search_repeat, svc_search_cached, rpc_add, rpc_get,
                    rpc_health, rpc_search_cached_b2b, hops, rpc_search_after_write,
                    functools.partial(direct, i % 10 == 0),
                ]  # fmt: skip
                rng.shuffle(steps)
                for step in steps:
                    await step()
            res["sampling_s"] = time.perf_counter() - t_s
            rss3 = rss_bytes()

            if args.profile:
                res["profile"] = await profile_search(
                    service, store, [uniq() for _ in range(20)], args.profile
                )

        shard.close()
        res["add_outcomes"] = add_outcomes
        cands = res.pop("candidates", [0])
        res["candidates_p50"] = statistics.median(cands)

    res["rss"] = {
        "before_server_mb": rss0 / 2**20,
        "after_open_mb": rss1 / 2**20,
        "open_delta_mb": (rss1 - rss0) / 2**20,
        "direct_shard_open_delta_mb": (rss2 - rss1) / 2**20,
        "after_samples_mb": rss3 / 2**20,
        "open_delta_bytes_per_memory": (rss1 - rss0) / n,
    }
    res["stages"] = {k: summary(v) for k, v in sm.ms.items()}
    st = res["stages"]
    res["ratios"] = {
        "search_p50_over_floor_p50": st["rpc_search"]["p50_ms"] / st["floor"]["p50_ms"],
        "cached_search_p50_over_direct_queries_p50": st["rpc_search_cached"]["p50_ms"]
        / st["floor_queries"]["p50_ms"],
        "search_p50_minus_floor_p50_ms": st["rpc_search"]["p50_ms"] - st["floor"]["p50_ms"],
    }
    shutil.rmtree(copy_dir, ignore_errors=True)
    if args.keep is not None:  # e.g. to serve it and load-test it with ghz (bench/load.py --address)
        args.keep.mkdir(parents=True, exist_ok=True)
        shutil.move(data_dir, args.keep / f"data-{n}")
        print(f"kept the {n:,}-memory data directory at {args.keep / f'data-{n}'}", flush=True)
    else:
        shutil.rmtree(data_dir, ignore_errors=True)
    return res


async def profile_search(
    service: MemoryService, store: EdgeStore, queries: list[str], rounds: int
) -> dict[str, Any]:
    """cProfile of in-process service.search (cached queries) on the loop thread and the io thread."""
    for q in queries:  # fill the query cache
        await service.search(SearchQuery(query=q, limit=10))
    await service.drain()
    main_prof, io_prof = cProfile.Profile(), cProfile.Profile()
    io_ex = store._io
    assert io_ex is not None
    await asyncio.wrap_future(io_ex.submit(io_prof.enable))
    main_prof.enable()
    t = time.perf_counter()
    for i in range(rounds):
        await service.search(SearchQuery(query=queries[i % len(queries)], limit=10))
        await service.drain()
    wall = time.perf_counter() - t
    main_prof.disable()
    await asyncio.wrap_future(io_ex.submit(io_prof.disable))
    out: dict[str, Any] = {"searches": rounds, "wall_ms_per_search_profiled": wall * 1000 / rounds}
    for name, prof in (("loop_thread", main_prof), ("io_thread", io_prof)):
        buf = io.StringIO()
        stats = pstats.Stats(prof, stream=buf)
        rows = []
        for (file, line, func), (_cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
            rows.append(
                {
                    "function": f"{Path(file).name}:{line}({func})",
                    "calls_per_search": nc / rounds,
                    "own_ms_per_search": tt * 1000 / rounds,
                    "cum_ms_per_search": ct * 1000 / rounds,
                }
            )
        rows.sort(key=lambda r: -r["own_ms_per_search"])
        out[name] = {
            "total_own_ms_per_search": sum(r["own_ms_per_search"] for r in rows),
            "top_own": rows[:15],
            "top_cum": sorted(rows, key=lambda r: -r["cum_ms_per_search"])[:15],
        }
    return out


# ----------------------------------------------------------------------------- report


def size_table(r: dict[str, Any]) -> str:
    st = r["stages"]
    floor = st["floor"]["p50_ms"]
    n = r["memories"]
    lines = [
        f"### {n:,} memories",
        "",
        f"Corpus written in {sum(r['corpus'].values()):.1f} s ({r['corpus']}); first start-up "
        f"{r['first_start_s']:.1f} s (store open {r['first_store_open_s']:.1f} s), "
        f"reopen {r['reopen_s']:.1f} s "
        f"(store open {r['reopen_store_open_s']:.1f} s) → HNSW build ≈ {r['hnsw_build_s']:.1f} s; "
        f"shard {r['shard']}; sampling {r['sampling_s']:.0f} s; candidates after the union p50 "
        f"{r['candidates_p50']:.0f}; AddMemory outcomes {r['add_outcomes']}.",
        ""
        if "copy_optimize_s" not in r
        else f"\n--optimize-copy: the floor's shard copy was optimized in {r['copy_optimize_s']:.1f} s "
        f"(changed: {r['copy_optimize_changed']}; True = it built what was due, so the direct "
        "queries use HNSW).\n",
        f"| stage, at {n:,} memories | n | p50 ms | p95 ms | p99 ms | p50 / floor p50 |",
        "|---|---|---|---|---|---|",
    ]
    for key, label in STAGE_LABELS.items():
        v = st.get(key)
        if not v:
            continue
        lines.append(
            f"| {label} | {v['n']} | {v['p50_ms']:.2f} | {v['p95_ms']:.2f} | {v['p99_ms']:.2f} | "
            f"{v['p50_ms'] / floor:.2f} |"
        )
    ra, rss, disk = r["ratios"], r["rss"], r["disk_bytes_per_memory"]
    lines += [
        "",
        f"- **SearchMemories p50 / floor p50 = {ra['search_p50_over_floor_p50']:.2f}** "
        f"(target ≤ 1.3 at 100k); difference {ra['search_p50_minus_floor_p50_ms']:.1f} ms.",
        f"- **Cached SearchMemories p50 = {st['rpc_search_cached']['p50_ms']:.2f} ms** "
        "(target ≤ 5 ms at 100k) = "
        f"{ra['cached_search_p50_over_direct_queries_p50']:.2f} × (dense + sparse directly, p50 "
        f"{st['floor_queries']['p50_ms']:.2f} ms); the same search repeated with nothing written "
        f"in between (candidate cache): p50 {st['rpc_search_repeat']['p50_ms']:.2f} ms; the same "
        f"search again right after an AddMemory (nearest list patched): p50 "
        f"{st['rpc_search_after_write']['p50_ms']:.2f} ms.",
        f"- RSS: {rss['before_server_mb']:.0f} MB before the server, {rss['after_open_mb']:.0f} MB "
        f"after it opened (+{rss['open_delta_mb']:.0f} MB: model + shard), "
        f"{rss['after_samples_mb']:.0f} MB after the samples (with the floor's shard copy); "
        f"the floor's own shard copy +{rss['direct_shard_open_delta_mb']:.0f} MB.",
        f"- Disk, allocated: {disk['allocated']:.0f} B/memory with the WAL, "
        f"{disk['allocated_without_wal']:.0f} B/memory without "
        f"(apparent {disk['apparent']:.0f} / {disk['apparent_without_wal']:.0f}).",
        f"- Corpus check (cosines, real base texts vs synthetic corpus): {r['corpus_check']}",
    ]
    prof = r.get("profile")
    if prof:
        each = prof["wall_ms_per_search_profiled"]
        lines += [
            "",
            f"Profile: {prof['searches']} in-process service.search calls with cached queries "
            f"({each:.2f} ms each under cProfile).",
        ]
        for th in ("loop_thread", "io_thread"):
            p = prof[th]
            total = p["total_own_ms_per_search"]
            lines += [
                "",
                f"| {th}: top own time (total {total:.2f} ms/search) | calls/search "
                "| own ms/search | cum ms/search |",
                "|---|---|---|---|",
            ]
            for row in p["top_own"][:12]:
                lines.append(
                    f"| `{row['function']}` | {row['calls_per_search']:.0f} | "
                    f"{row['own_ms_per_search']:.3f} | {row['cum_ms_per_search']:.3f} |"
                )
    return "\n".join(lines)


def growth_table(results: list[dict[str, Any]]) -> str:
    lines = [
        "### Growth",
        "",
        "| memories | Search p50 ms | floor p50 ms | Search / floor | cached Search p50 ms | repeated p50 ms "
        "| dense+sparse direct p50 ms | store_search p50 ms | AddMemory p50 ms | HNSW build s "
        "| RSS open Δ MB | disk B/memory (no WAL / WAL) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        st, d = r["stages"], r["disk_bytes_per_memory"]
        lines.append(
            f"| {r['memories']:,} | {st['rpc_search']['p50_ms']:.1f} | {st['floor']['p50_ms']:.1f} | "
            f"{r['ratios']['search_p50_over_floor_p50']:.2f} | {st['rpc_search_cached']['p50_ms']:.2f} | "
            f"{st['rpc_search_repeat']['p50_ms']:.2f} | "
            f"{st['floor_queries']['p50_ms']:.2f} | {st['store_search']['p50_ms']:.2f} | "
            f"{st['rpc_add']['p50_ms']:.1f} | "
            f"{r['hnsw_build_s']:.1f} | {r['rss']['open_delta_mb']:.0f} | "
            f"{d['allocated_without_wal']:.0f} / {d['allocated']:.0f} |"
        )
    if len(results) >= 2:
        a, b = results[0], results[-1]
        dn = b["memories"] - a["memories"]
        rss_m = (b["rss"]["open_delta_mb"] - a["rss"]["open_delta_mb"]) * 2**20 / dn
        disk_m = (b["disk"]["allocated_without_wal"] - a["disk"]["allocated_without_wal"]) / dn
        lines += [
            "",
            f"Marginal cost {a['memories']:,} → {b['memories']:,}: RSS after open {rss_m:.0f} B/memory, "
            f"disk (allocated, no WAL) {disk_m:.0f} B/memory.",
        ]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- main


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memories", default="10000,100000", help="comma-separated corpus sizes")
    ap.add_argument("--samples", type=int, default=200, help="rounds of samples per size")
    ap.add_argument(
        "--base-texts", type=int, default=2000, help="real texts embedded to build the corpus from"
    )
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="also cProfile N in-process searches")
    ap.add_argument(
        "--optimize-copy",
        action="store_true",
        help="call optimize() on the floor's shard copy (HNSW for the floor even where the server has none)",
    )
    ap.add_argument("--quick", action="store_true", help="2,000 memories, 30 samples, 300 base texts")
    ap.add_argument(
        "--hnsw-threshold",
        type=int,
        help="the server store's ENGRAM_HNSW_THRESHOLD (default: the server's default, 20,000 points)",
    )
    ap.add_argument("--json", type=Path, help="write the figures as JSON here")
    ap.add_argument("--md", type=Path, help="write the Markdown tables here")
    ap.add_argument("--tmp", type=Path, help="directory for the data dirs (default: system temp)")
    ap.add_argument("--keep", type=Path, help="move each size's data directory here instead of deleting it")
    args = ap.parse_args()
    if args.quick:
        args.memories, args.samples, args.base_texts = "2000", 30, 300
    sizes = [int(x) for x in str(args.memories).split(",") if x.strip()]
    t_all = time.perf_counter()

    rng = random.Random(7)
    bases = make_bases(rng, args.base_texts)
    embedder = LocalE5Embedder()
    args.model_id, args.dimension = embedder.model_id, embedder.dimension
    print(f"embedding {len(bases)} base texts with {embedder.model_id} …", flush=True)
    t = time.perf_counter()
    parts = [
        await embedder.embed_documents([b.text for b in bases[i : i + 64]]) for i in range(0, len(bases), 64)
    ]
    base_vecs: Vec = np.concatenate(parts).astype(np.float32)
    base_query_vecs: Vec = await embedder.embed_queries([query_text(rng, 10**9 + j) for j in range(40)])
    base_embed_s = time.perf_counter() - t
    await embedder.close()
    del embedder
    gc.collect()
    print(f"   {base_embed_s:.1f} s", flush=True)

    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="engram-stages-", dir=args.tmp) as tmp:
        for n in sizes:
            r = await measure_size(
                n, args, bases=bases, base_vecs=base_vecs, base_query_vecs=base_query_vecs, tmp_root=Path(tmp)
            )
            results.append(r)
            print("\n" + size_table(results[-1]), flush=True)

    total = time.perf_counter() - t_all
    md = "\n\n".join(
        [
            f"## Where the time goes (`bench/stages.py`, {args.samples} rounds per size, "
            f"{len(bases)} real base texts embedded in {base_embed_s:.0f} s, total {total / 60:.1f} min, "
            f"load average at the end {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)",
            *[size_table(r) for r in results],
            growth_table(results),
        ]
    )
    print("\n" + growth_table(results))
    if args.md:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(md + "\n")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {"samples": args.samples, "base_texts": len(bases), "base_embed_s": base_embed_s,
                 "total_s": total, "sizes": results},
                indent=2,
            )
        )  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
