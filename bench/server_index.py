"""Index build time and filtered recall on one real Qdrant server node, per payload-index layout.

    .venv/bin/python bench/server_index.py --memories 20000
    .venv/bin/python bench/server_index.py --memories 100000 --layouts unlinked
    QDRANT_BIN=/path/to/qdrant .venv/bin/python bench/server_index.py --memories 2000 --queries 10

For each layout a fresh node is started (``QDRANT_BIN`` or ``../shared/bin/qdrant``, on free ports,
its own storage in a temporary directory) and a collection is created by ``QdrantStore`` itself:

* ``linked``: every payload index HNSW-linked (the engine's default, what the store did before);
* ``unlinked``: the store's layout, only ``HNSW_LINKED_INDEXES`` linked.

N memories are written through ``QdrantStore.upsert`` (batches of 1,000, four in flight) with the
node's indexing paused (``indexing_threshold`` 0, Qdrant's advice for bulk loads), then the
threshold goes back to the collection's own value and the bench times until the collection stays
green (every segment indexed and optimized). The vectors are NOT model embeddings: each is a
random mixture (a random unit centre out of 500, plus noise) normalised to unit length, at the
local model's dimension (384), so no model runs and any N fills in seconds of Python. Payloads are
realistic in shape: type, tags, source type, session, agent, created/updated times and importance
(1-10, with ``--selective`` of the points, default 10%, at importance >= 7).

Then ``--queries`` queries (other random mixtures) search the top ``--limit`` (default 100) with
the store's own filter for ``StoreFilter(min_importance=7)`` (importance range plus the is-empty
tests every search carries), each answered three ways on the unlinked layout — without ACORN,
with ACORN (``ACORN_MAX_SELECTIVITY``, as the store searches) — and without ACORN on the linked
one; recall@limit is against an exact (numpy) search over the same points. The engine's default
HNSW beam is used (what ``QdrantStore.search`` sends with ``ENGRAM_GATE_HNSW_EF=0``).

Qdrant answers a filtered search exactly (from the payload index, no graph) in a segment where its
estimate of the points the filter keeps is below the full-scan threshold (10,000 KB of vectors:
~6,700 points at 384 dims): at 20k and the default threshold the 10% filter is answered exactly in
both layouts, at 100k it walks the graph. ``--full-scan-kb`` lowers the threshold of the bench's
collection so that a small N shows what the graph walk of a larger collection returns.

Runtime on the shared 2-core machine: ~5 min at 100k (both layouts), ~1.5 min at 20k.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from qdrant_client import AsyncQdrantClient, models

import engram_server.adapters.storage.qdrant as qdrant_store
from engram_server.adapters.storage.payload import PAYLOAD_INDEXES, filter_plan
from engram_server.adapters.storage.qdrant import ACORN_MAX_SELECTIVITY, QdrantStore
from engram_server.domain.model import (
    CollectionSpec,
    MemoryRecord,
    MemoryType,
    SourceType,
    StoredPoint,
    StoreFilter,
)
from tests.support.qdrant import QdrantNode, qdrant_binary, running_node

DIM = 384
CENTRES = 500
BATCH = 1000
IN_FLIGHT = 4
COLLECTION = "bench"
NOW = 1_800_000_000.0
FILTER = StoreFilter(min_importance=7, live_at=NOW)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def mixtures(rng: np.random.Generator, centres: np.ndarray, n: int) -> np.ndarray:
    pick = rng.integers(0, len(centres), n)
    v = (centres[pick] + rng.normal(scale=0.6 / np.sqrt(DIM), size=(n, DIM))).astype(np.float32)
    out: np.ndarray = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def corpus(n: int, selective: float, seed: int) -> tuple[list[MemoryRecord], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(CENTRES, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    vecs = mixtures(rng, centres, n)
    important = rng.random(n) < selective
    importance = np.where(important, rng.integers(7, 11, n), rng.integers(1, 7, n))
    types = list(MemoryType)
    sources = list(SourceType)
    sessions = [f"s{i}" for i in range(max(1, n // 50))]
    agents = [f"agent-{i}" for i in range(8)]
    tags = [f"tag{i}" for i in range(40)]
    records = []
    for i in range(n):
        created = NOW - float(rng.uniform(0, 365 * 86400))
        records.append(
            MemoryRecord(
                str(uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | i)),
                COLLECTION,
                f"memory {i}",
                type=types[int(rng.integers(len(types)))],
                importance=int(importance[i]),
                tags=tuple(
                    sorted({tags[int(t)] for t in rng.integers(0, len(tags), int(rng.integers(0, 4)))})
                ),
                source_type=sources[int(rng.integers(len(sources)))],
                created_at=created,
                updated_at=created,
                session_id=sessions[int(rng.integers(len(sessions)))],
                agent_id=agents[int(rng.integers(len(agents)))],
            )
        )
    return records, vecs, centres


def collection_info(node: QdrantNode, qname: str) -> dict[str, Any]:
    info: dict[str, Any] = node.get(f"/collections/{qname}")
    return info


def set_indexing_threshold(node: QdrantNode, qname: str, value: int | None) -> None:
    r = httpx.patch(
        f"{node.url}/collections/{qname}",
        json={"optimizers_config": {"indexing_threshold": value}},
        timeout=60,
    )
    r.raise_for_status()


def wait_green(node: QdrantNode, qname: str, timeout: float = 7200) -> dict[str, Any]:
    """Until green with every optimization done, three polls in a row a second apart (a segment
    below the indexing threshold stays unindexed, as on any node: ``indexed_vectors_count`` is
    reported)."""
    t = time.perf_counter()
    greens = 0
    while True:
        info = collection_info(node, qname)
        ok = info["status"] == "green" and info.get("optimizer_status") == "ok"
        greens = greens + 1 if ok else 0
        if greens >= 3:
            return info
        if time.perf_counter() - t > timeout:
            raise RuntimeError(f"not indexed after {timeout} s: {info}")
        time.sleep(1)


async def fill(store: QdrantStore, records: list[MemoryRecord], vecs: np.ndarray) -> None:
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(start: int) -> None:
        async with gate:
            await store.upsert(
                COLLECTION,
                [
                    StoredPoint(r, v)
                    for r, v in zip(records[start : start + BATCH], vecs[start:], strict=False)
                ],
            )

    await asyncio.gather(*(one(s) for s in range(0, len(records), BATCH)))


async def recall(
    client: AsyncQdrantClient,
    *,
    qname: str,
    queries: np.ndarray,
    truth: list[set[str]],
    limit: int,
    params: models.SearchParams | None,
) -> dict[str, float]:
    flt = qdrant_store._qdrant_filter(filter_plan(FILTER))
    got: list[float] = []
    took: list[float] = []
    for q, want in zip(queries, truth, strict=True):
        t = time.perf_counter()
        r = await client.query_points(
            qname, query=q.tolist(), query_filter=flt, limit=limit, search_params=params
        )
        took.append(time.perf_counter() - t)
        got.append(len(want & {str(p.id) for p in r.points}) / len(want))
    return {
        "recall": round(float(np.mean(got)), 4),
        "recall_min": round(float(np.min(got)), 4),
        "p50_ms": round(statistics.median(took) * 1000, 1),
    }


async def run_layout(
    layout: str,
    *,
    binary: Path,
    records: list[MemoryRecord],
    vecs: np.ndarray,
    queries: np.ndarray,
    truth: list[set[str]],
    limit: int,
    full_scan_kb: int | None,
) -> dict[str, Any]:
    linked = frozenset(PAYLOAD_INDEXES) if layout == "linked" else qdrant_store.HNSW_LINKED_INDEXES
    saved = qdrant_store.HNSW_LINKED_INDEXES
    qdrant_store.HNSW_LINKED_INDEXES = linked  # read when the store creates its indexes
    out: dict[str, Any] = {"layout": layout, "hnsw_linked": sorted(linked)}
    with tempfile.TemporaryDirectory(prefix="engram-srvidx-") as tmp, running_node(binary, Path(tmp)) as node:
        store = QdrantStore(node.url, grpc_port=node.grpc_port, write_lease=False)
        await store.open()
        client = AsyncQdrantClient(
            url=node.url, grpc_port=node.grpc_port, prefer_grpc=True, check_compatibility=False
        )
        try:
            spec = CollectionSpec(
                name=COLLECTION, embedding_model="bench/random-mixtures", dimension=DIM, created_at=1.0
            )
            await store.create_collection(spec)
            qdrant_store.HNSW_LINKED_INDEXES = saved
            if full_scan_kb is not None:
                await client.update_collection(
                    COLLECTION, hnsw_config=models.HnswConfigDiff(full_scan_threshold=full_scan_kb)
                )
            info = collection_info(node, COLLECTION)
            out["linked_in_schema"] = sorted(
                f
                for f, i in info["payload_schema"].items()
                if (i.get("params") or {}).get("enable_hnsw", True)
            )
            threshold = info["config"]["optimizer_config"]["indexing_threshold"]
            set_indexing_threshold(node, COLLECTION, 0)
            t = time.perf_counter()
            await fill(store, records, vecs)
            out["fill_s"] = round(time.perf_counter() - t, 1)
            log(f"{layout}: filled {len(records)} in {out['fill_s']} s; indexing")
            t = time.perf_counter()
            set_indexing_threshold(node, COLLECTION, threshold)
            info = wait_green(node, COLLECTION)
            out["index_s"] = round(time.perf_counter() - t, 1)
            out["collection"] = {
                k: info.get(k) for k in ("points_count", "indexed_vectors_count", "segments_count")
            }
            log(f"{layout}: indexed in {out['index_s']} s: {out['collection']}")
            acorn = models.AcornSearchParams(enable=True, max_selectivity=ACORN_MAX_SELECTIVITY)
            out["no_acorn"] = await recall(
                client, qname=COLLECTION, queries=queries, truth=truth, limit=limit, params=None
            )
            out["acorn"] = await recall(
                client,
                qname=COLLECTION,
                queries=queries,
                truth=truth,
                limit=limit,
                params=models.SearchParams(acorn=acorn),
            )
            log(f"{layout}: recall@{limit} without ACORN {out['no_acorn']}, with ACORN {out['acorn']}")
        finally:
            qdrant_store.HNSW_LINKED_INDEXES = saved
            await client.close()
            await store.close()
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memories", type=int, default=20000)
    ap.add_argument("--layouts", default="linked,unlinked", help="comma-separated: linked, unlinked")
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--selective", type=float, default=0.1, help="share of the points at importance >= 7")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--full-scan-kb", type=int, default=None, help="the collection's HNSW full_scan_threshold (KB)"
    )
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args()
    binary, why = qdrant_binary()
    if binary is None:
        raise SystemExit(why)
    t = time.perf_counter()
    records, vecs, centres = corpus(args.memories, args.selective, args.seed)
    rng = np.random.default_rng(args.seed + 1)
    queries = mixtures(rng, centres, args.queries)
    mask = np.array([r.importance >= 7 for r in records])
    ids = np.array([r.id for r in records])
    truth = []
    for q in queries:
        scores = np.where(mask, vecs @ q, -np.inf)
        truth.append(set(ids[np.argsort(-scores)[: args.limit]]))
    log(
        f"corpus of {args.memories} ({mask.mean():.1%} at importance >= 7) in {time.perf_counter() - t:.1f} s"
    )
    result: dict[str, Any] = {
        "memories": args.memories,
        "dimension": DIM,
        "selective": round(float(mask.mean()), 4),
        "queries": args.queries,
        "limit": args.limit,
        "acorn_max_selectivity": ACORN_MAX_SELECTIVITY,
        "full_scan_kb": args.full_scan_kb,
        "cpus": os.cpu_count(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "layouts": [],
    }
    for layout in args.layouts.split(","):
        if layout not in ("linked", "unlinked"):
            raise SystemExit(f"unknown layout {layout!r}")
        result["layouts"].append(
            await run_layout(
                layout,
                binary=binary,
                records=records,
                vecs=vecs,
                queries=queries,
                truth=truth,
                limit=args.limit,
                full_scan_kb=args.full_scan_kb,
            )
        )
    result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    asyncio.run(main())
