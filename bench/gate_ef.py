"""The write gate's HNSW beam width (``ENGRAM_GATE_HNSW_EF``), side by side on a real collection.

    .venv/bin/python bench/gate_ef.py --data DIR [--ef 0,32,64,128] [--rounds 2]

``DIR`` is an Engram data directory (e.g. the one ``bench/million.py --keep`` leaves) holding a
large collection with its HNSW index built. It is opened read-only in spirit (queries only) by the
engine directly. Queries are the gate's batch lookup as ``AddMemories`` sends it: 64 vectors, top-8,
the live filter, payloads. The query vectors are stored vectors plus a little noise (cosine ≈ 0.98
to their source: near copies, what the gate exists to catch). Per beam width, interleaved per
batch: p50 ms per batch of 64, the share of queries whose nearest hit is the source point, and
recall@8 against the widest beam measured.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import qdrant_edge as qe

from engram_server.adapters.storage.edge import DENSE_SEARCH_PARAMS, QUANTIZED, EdgeStore, _edge_filter
from engram_server.adapters.storage.payload import filter_plan, spec_from_json
from engram_server.domain.model import StoreFilter


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--collection", default="default")
    p.add_argument("--ef", default="0,32,64", help="beam widths; 0 = the engine's default")
    p.add_argument("--batches", type=int, default=10)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    widths = [int(x) for x in args.ef.split(",")]
    col_dir = args.data / "collections" / args.collection
    spec = spec_from_json((col_dir / "spec.json").read_text(), where=str(col_dir))
    shard = qe.EdgeShard.load(str(col_dir / "shard"), EdgeStore(args.data)._edge_config(spec, create=False))
    info = shard.info()
    print(f"{info.points_count:,} points, {info.segments_count} segments", flush=True)
    n = 64 * args.batches
    records, _ = shard.scroll(qe.ScrollRequest(limit=n, with_payload=False, with_vector=True))
    rng = np.random.default_rng(0)
    sources = [str(r.id) for r in records]
    queries: list[list[float]] = []
    for r in records:
        v = np.asarray(r.vector[""] if isinstance(r.vector, dict) else r.vector, dtype=np.float64)
        v = v + rng.standard_normal(v.shape) * 0.01
        queries.append((v / np.linalg.norm(v)).tolist())
    flt = _edge_filter(filter_plan(StoreFilter(live_at=time.time())))

    def batch(rows: list[list[float]], ef: int) -> list[list[str]]:
        # as the store asks: on int8 codes (where the collection has them), rescored
        params = qe.SearchParams(hnsw_ef=ef, quantization=QUANTIZED) if ef > 0 else DENSE_SEARCH_PARAMS
        requests = [
            qe.QueryRequest(
                limit=8,
                query=qe.Query.Nearest(row),
                filter=flt,
                with_payload=True,
                with_vector=False,
                params=params,
            )
            for row in rows
        ]
        return [[str(h.id) for h in hits] for hits in shard.query_batch(qe.QueryBatchRequest(requests))]

    ms: dict[int, list[float]] = {ef: [] for ef in widths}
    found: dict[int, dict[int, list[list[str]]]] = {ef: {} for ef in widths}
    for rnd in range(args.rounds):
        for b in range(args.batches):
            rows = queries[b * 64 : (b + 1) * 64]
            for ef in widths if (rnd + b) % 2 == 0 else list(reversed(widths)):
                t = time.perf_counter()
                found[ef][b] = batch(rows, ef)
                ms[ef].append((time.perf_counter() - t) * 1e3)
    widest = 0 if 0 in widths else max(widths)
    print(f"\n| ef | ms per batch of 64, p50 | nearest = source | recall@8 vs ef {widest or 'default'} |")
    print("|---|---|---|---|")
    for ef in widths:
        hits = [h for b in range(args.batches) for h in found[ef][b]]
        ref = [h for b in range(args.batches) for h in found[widest][b]]
        top1 = np.mean([bool(h) and h[0] == s for h, s in zip(hits, sources, strict=True)])
        at8 = np.mean([len(set(h) & set(g)) / max(1, len(g)) for h, g in zip(hits, ref, strict=True)])
        print(f"| {ef or 'default'} | {statistics.median(ms[ef]):.1f} | {top1:.3f} | {at8:.3f} |")


if __name__ == "__main__":
    main()
