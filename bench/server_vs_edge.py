"""Search latency at N memories: the embedded store beside one real Qdrant server node, in one run.

    .venv/bin/python bench/server_vs_edge.py --memories 100000 --samples 200
    QDRANT_BIN=/path/to/qdrant .venv/bin/python bench/server_vs_edge.py --memories 20000 --samples 100

How the stores are filled: the corpus of ``bench/stages.py`` (``--base-texts`` real texts embedded
once with the local model; each of the N memories a normalised mixture of three of their vectors
plus noise, with its own text, BM25 sparse vector and realistic payload), written with the
precomputed vectors straight through ``EdgeStore.upsert`` and ``QdrantStore.upsert`` (batches of
1,000; no model call per memory). The Qdrant node is started from ``QDRANT_BIN`` or
``../shared/bin/qdrant`` (``tests/support/qdrant.py``) on free ports, with its own storage; the bench
waits until it has indexed every point (HNSW, collection status green). The embedded store builds
its HNSW index when the server opens it (past ENGRAM_HNSW_THRESHOLD).

Then two Engram servers run in this process, one per store, each with its own local model, and
the same SearchMemories calls (limit 10) go over real gRPC channels to both, alternating which
goes first: a unique query per round (model + store + ranking) and one repeated query (its
embedding cached: store + ranking only). Reported: p50 / p90 per backend and the server/edge
ratio of the p50s. The machine is shared: compare the ratios, and read the load average printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.stages import COLLECTION, WRITE_BATCH, make_bases, make_records, mix_vectors, query_text
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.adapters.embedding.local import LocalE5Embedder
from engram_server.adapters.lexical import LEXICAL_ENCODER_ID, Bm25Encoder
from engram_server.adapters.storage.edge import EdgeStore
from engram_server.adapters.storage.qdrant import QdrantStore
from engram_server.domain.model import CollectionSpec, StoredPoint
from engram_server.domain.ttl import DAY
from engram_server.ports import Store
from engram_server.testing import running_server
from tests.support.qdrant import qdrant_binary, running_node


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def fill(store: Store, spec: CollectionSpec, points: list[StoredPoint]) -> float:
    t = time.perf_counter()
    await store.open()
    try:
        await store.create_collection(spec)
        for start in range(0, len(points), WRITE_BATCH):
            await store.upsert(COLLECTION, points[start : start + WRITE_BATCH])
    finally:
        await store.close()
    return time.perf_counter() - t


def wait_indexed(url: str, qname: str, n: int, timeout: float = 3600) -> float:
    t = time.perf_counter()
    while True:
        info = httpx.get(f"{url}/collections/{qname}", timeout=10).json()["result"]
        if info["status"] == "green" and (info.get("indexed_vectors_count") or 0) >= n:
            return time.perf_counter() - t
        if time.perf_counter() - t > timeout:
            raise RuntimeError(f"not indexed: {info}")
        time.sleep(1)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memories", type=int, default=100_000)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--base-texts", type=int, default=1000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    binary, why = qdrant_binary()
    if binary is None:
        raise SystemExit(why)

    rng = random.Random(7)
    bases = make_bases(rng, args.base_texts)
    embedder = LocalE5Embedder()
    parts = [
        await embedder.embed_documents([b.text for b in bases[i : i + 64]]) for i in range(0, len(bases), 64)
    ]
    import numpy as np  # noqa: PLC0415

    base_vecs = np.concatenate(parts).astype(np.float32)
    model_id, dim = embedder.model_id, embedder.dimension
    await embedder.close()
    now = time.time()
    vectors, idx = mix_vectors(base_vecs, args.memories, 7)
    records = make_records(rng, bases, idx, now)
    bm25 = Bm25Encoder()
    points = [
        StoredPoint(r, v, bm25.encode_document(r.content)) for r, v in zip(records, vectors, strict=True)
    ]
    spec = CollectionSpec(COLLECTION, model_id, dim, now - 200 * DAY, lexical=LEXICAL_ENCODER_ID)
    figures: dict[str, Any] = {
        "memories": args.memories,
        "samples": args.samples,
        "base_texts": args.base_texts,
    }

    with (
        tempfile.TemporaryDirectory(prefix="engram-server-vs-edge-") as tmp,
        running_node(binary, Path(tmp) / "qdrant") as node,
    ):
        data_dir = Path(tmp) / "edge"
        print(f"filling the embedded store with {args.memories} memories …", flush=True)
        figures["edge_fill_s"] = await fill(EdgeStore(data_dir), spec, points)
        print(f"filling the Qdrant server ({node.url}) …", flush=True)
        figures["server_fill_s"] = await fill(QdrantStore(node.url, grpc_port=node.grpc_port), spec, points)
        figures["server_index_wait_s"] = await asyncio.to_thread(
            wait_indexed, node.url, COLLECTION, args.memories
        )
        del points
        t = time.perf_counter()
        async with (
            running_server(data_dir) as edge,
            running_server(
                Path(tmp) / "unused", qdrant_url=node.url, qdrant_grpc_port=node.grpc_port
            ) as server,
            grpc.aio.insecure_channel(edge.address) as ce,
            grpc.aio.insecure_channel(server.address) as cs,
        ):
            figures["servers_start_s"] = time.perf_counter() - t
            stubs = {
                "edge": memory_service_pb2_grpc.MemoryServiceStub(ce),
                "server": memory_service_pb2_grpc.MemoryServiceStub(cs),
            }
            times: dict[str, list[float]] = {f"{b}_{k}": [] for b in stubs for k in ("unique", "cached")}
            cached_query = query_text(rng, 10**9)
            for stub in stubs.values():  # warm up: the model, the query cache, the connections
                for _ in range(5):
                    await stub.SearchMemories(s.SearchMemoriesRequest(query=cached_query, limit=10))
            for j in range(args.samples):
                unique = query_text(rng, j)
                order = list(stubs.items()) if j % 2 == 0 else list(reversed(stubs.items()))
                for name, stub in order:
                    for kind, q in (("unique", unique), ("cached", cached_query)):
                        t = time.perf_counter()
                        await stub.SearchMemories(s.SearchMemoriesRequest(query=q, limit=10))
                        times[f"{name}_{kind}"].append((time.perf_counter() - t) * 1000)
    for key, values in times.items():
        figures[f"{key}_p50_ms"] = round(statistics.median(values), 2)
        figures[f"{key}_p90_ms"] = round(pct(values, 0.9), 2)
    for kind in ("unique", "cached"):
        figures[f"{kind}_server_over_edge"] = round(
            figures[f"server_{kind}_p50_ms"] / figures[f"edge_{kind}_p50_ms"], 2
        )
    figures["load_average"] = os.getloadavg()
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
