"""Search latency at N memories: the embedded store beside one real Qdrant server node, in one run.

    .venv/bin/python bench/server_vs_edge.py --memories 100000 --samples 200 --keep /tmp/svse-100k
    QDRANT_BIN=/path/to/qdrant .venv/bin/python bench/server_vs_edge.py --memories 10000 --samples 200

How the stores are filled: the corpus of ``bench/stages.py`` (``--base-texts`` real texts embedded
once with the local model, their vectors kept in ``results/bench/cache`` for later runs; each of
the N memories a normalised mixture of three of their vectors plus noise, with its own text, BM25
sparse vector and realistic payload), written with the
precomputed vectors straight through ``EdgeStore.upsert`` and ``QdrantStore.upsert`` (batches of
1,000; no model call per memory), both stores built by ``app.build_store`` from the default
settings, as the measured servers build theirs. The Qdrant node is started from ``QDRANT_BIN`` or
``../shared/bin/qdrant`` (``tests/support/qdrant.py``) on free ports, with its own storage.

The fill is the long part (at 100k, minutes of Python per store), so it runs in forked worker
processes, side by side: one fills the embedded store and then opens it once more, which builds its
HNSW index as a server's first start-up would; ``--writers`` others send the batches to the node,
``--parallel`` batches in flight each. The node's indexing is paused during the upload (Qdrant's
advice for bulk loads: ``indexing_threshold`` 0, then back to the collection's own value), and the
bench waits until the collection stays green (every optimization done) and holds exactly N points.
What is measured is the same either way: both stores hold the same N points, indexed.
``--keep DIR`` keeps both stores (and ``corpus.json``) in DIR: a later run with the same
``--memories`` and ``--base-texts`` measures on them again without filling.

Then two Engram servers run in this process, one per store (default settings), each with its own
local model, and the same SearchMemories calls (limit 10) go over real gRPC channels to both,
alternating which goes first: a unique query per round (model + store + ranking) and one repeated
query (its embedding cached: store + ranking only). Reported: p50 / p90 per backend and the
server/edge ratio of the p50s, the fill's phases and the load average (start, after the fill, end).
The machine is shared: compare the ratios, and read the load average.

Runtime on the shared 2-core machine (load average 12-34): 42 min at 100k, of which the corpus
1.5 min, the upload 4 min (node) / 6 min (embedded, side by side), the embedded store's HNSW build
17 min and the node's indexing 35 min (in parallel; mostly the HNSW links Qdrant then added per
payload index, all of them linked: now only five are, see ``bench/server_index.py``); 9 min at
10k (the node builds no HNSW below its indexing threshold). A ``--keep``
re-measurement: ~1.5 min at either size.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.stages import COLLECTION, WRITE_BATCH, make_bases, make_records, mix_vectors, query_text
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.adapters.embedding.local import LocalE5Embedder
from engram_server.adapters.lexical import LEXICAL_ENCODER_ID, Bm25Encoder
from engram_server.app import build_store
from engram_server.config import Settings
from engram_server.domain.model import CollectionSpec, StoredPoint
from engram_server.domain.ttl import DAY
from engram_server.ports import Store
from engram_server.testing import running_server
from tests.support.qdrant import QdrantNode, qdrant_binary, running_node

#: Where the base texts' vectors are kept between runs (git-ignored).
BASES_CACHE = Path(__file__).resolve().parents[1] / "results" / "bench" / "cache"
#: The corpus, set in the parent before the fill workers are forked (they read it copy-on-write).
POINTS: list[StoredPoint] = []


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)


def store_for(data_dir: Path, **overrides: Any) -> Store:
    """The store a server with these settings opens (``app.build_store``): same collection config."""
    return build_store(Settings(data_dir=data_dir).with_overrides(**overrides))


def server_store(node: QdrantNode) -> Store:
    # The fill alone gets a long timeout (a batch waits behind the others on a loaded machine);
    # the measured server uses the default settings.
    return store_for(Path("unused"), qdrant_url=node.url, qdrant_grpc_port=node.grpc_port, qdrant_timeout=300)


async def build_points(memories: int, base_texts: int) -> CollectionSpec:
    """The corpus (see the module docstring) into :data:`POINTS`; returns the collection's spec."""
    rng = random.Random(7)
    bases = make_bases(rng, base_texts)
    embedder = LocalE5Embedder()
    model_id, dim = embedder.model_id, embedder.dimension
    # The base texts' vectors are kept between runs (minutes of model time on a busy machine),
    # under a name that changes with the model and the texts.
    key = hashlib.sha256("\n".join([model_id, *(b.text for b in bases)]).encode()).hexdigest()[:16]
    cached = BASES_CACHE / f"bases-{key}.npy"
    if cached.exists():
        base_vecs = np.load(cached)
    else:
        parts = [
            await embedder.embed_documents([b.text for b in bases[i : i + 64]])
            for i in range(0, len(bases), 64)
        ]
        base_vecs = np.concatenate(parts).astype(np.float32)
        BASES_CACHE.mkdir(parents=True, exist_ok=True)
        np.save(cached, base_vecs)
    await embedder.close()
    now = time.time()
    vectors, idx = mix_vectors(base_vecs, memories, 7)
    records = make_records(rng, bases, idx, now)
    bm25 = Bm25Encoder()
    POINTS[:] = [
        StoredPoint(r, v, bm25.encode_document(r.content)) for r, v in zip(records, vectors, strict=True)
    ]
    return CollectionSpec(COLLECTION, model_id, dim, now - 200 * DAY, lexical=LEXICAL_ENCODER_ID)


# ----------------------------------------------------------------------------- fill workers


async def fill_edge(data_dir: Path, spec: CollectionSpec) -> dict[str, float]:
    """Upsert every batch through the embedded store, then open it once more: its HNSW index is
    built in ``open()``, so the measured server starts on indexed data."""
    t = time.perf_counter()
    store = store_for(data_dir)
    await store.open()
    try:
        await store.create_collection(spec)
        for start in range(0, len(POINTS), WRITE_BATCH):
            await store.upsert(COLLECTION, POINTS[start : start + WRITE_BATCH])
    finally:
        await store.close()
    out = {"edge_fill_s": time.perf_counter() - t}
    log(f"embedded store filled in {out['edge_fill_s']:.0f} s; building its index")
    t = time.perf_counter()
    store = store_for(data_dir)
    await store.open()  # builds the due HNSW index before returning
    await store.close()
    out["edge_index_s"] = time.perf_counter() - t
    log(f"embedded store indexed in {out['edge_index_s']:.0f} s")
    return out


async def create_server_collection(node: QdrantNode, spec: CollectionSpec) -> dict[str, float]:
    store = server_store(node)
    await store.open()
    try:
        await store.create_collection(spec)
    finally:
        await store.close()
    return {}


async def fill_server_share(node: QdrantNode, worker: int, writers: int, parallel: int) -> dict[str, float]:
    """Batches ``worker``, ``worker + writers``, … through ``QdrantStore.upsert``, ``parallel`` in flight."""
    t = time.perf_counter()
    store = server_store(node)
    await store.open()
    gate = asyncio.Semaphore(parallel)

    async def batch(start: int) -> None:
        async with gate:
            await store.upsert(COLLECTION, POINTS[start : start + WRITE_BATCH])

    try:
        starts = range(worker * WRITE_BATCH, len(POINTS), writers * WRITE_BATCH)
        await asyncio.gather(*(batch(start) for start in starts))
    finally:
        await store.close()
    return {f"server_writer{worker}_s": time.perf_counter() - t}


def _worker(queue: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        queue.put(("ok", asyncio.run(fn(*args))))
    except BaseException as exc:
        queue.put(("error", f"{fn.__name__}: {exc!r}"))
        raise


class Workers:
    """Fill steps in forked processes (the parent has opened no gRPC channel and runs no event
    loop when it forks); each returns a small dict of timings."""

    def __init__(self) -> None:
        self._ctx = multiprocessing.get_context("fork")
        self._queue = self._ctx.Queue()
        self._procs: list[Any] = []

    def start(self, fn: Callable[..., Any], *args: Any) -> None:
        proc = self._ctx.Process(target=_worker, args=(self._queue, fn, args), daemon=True)
        proc.start()
        self._procs.append(proc)

    def join(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        errors: list[str] = []
        for _ in self._procs:
            status, value = self._queue.get()
            if status == "ok":
                out.update(value)
            else:
                errors.append(value)
        for proc in self._procs:
            proc.join()
        self._procs.clear()
        if errors:
            raise RuntimeError("; ".join(errors))
        return out


# ----------------------------------------------------------------------------- the node


def node_collection(node: QdrantNode, qname: str) -> dict[str, Any]:
    info: dict[str, Any] = node.get(f"/collections/{qname}")
    return info


def set_indexing_threshold(node: QdrantNode, qname: str, value: int) -> None:
    r = httpx.patch(
        f"{node.url}/collections/{qname}",
        json={"optimizers_config": {"indexing_threshold": value}},
        timeout=60,
    )
    r.raise_for_status()


def exact_count(node: QdrantNode, qname: str) -> int:
    r = httpx.post(f"{node.url}/collections/{qname}/points/count", json={"exact": True}, timeout=60)
    r.raise_for_status()
    return int(r.json()["result"]["count"])


def wait_optimized(node: QdrantNode, qname: str, timeout: float = 3600) -> dict[str, Any]:
    """Until the collection is green (no optimization running or pending) on three polls in a row,
    a second apart: the node has built every index it is going to build. (A segment below the
    indexing threshold stays unindexed, as on any node: ``indexed_vectors_count`` is reported.)"""
    t = time.perf_counter()
    greens = 0
    while True:
        info = node_collection(node, qname)
        greens = greens + 1 if info["status"] == "green" and info.get("optimizer_status") == "ok" else 0
        if greens >= 3:
            return info
        if time.perf_counter() - t > timeout:
            raise RuntimeError(f"not optimized after {timeout} s: {info}")
        time.sleep(1)


def fill(
    node: QdrantNode, data_dir: Path, spec: CollectionSpec, writers: int, parallel: int
) -> dict[str, Any]:
    """Both stores side by side (see the module docstring); the fill's timings."""
    creating = Workers()
    creating.start(create_server_collection, node, spec)
    creating.join()
    threshold = node_collection(node, COLLECTION)["config"]["optimizer_config"]["indexing_threshold"]
    set_indexing_threshold(node, COLLECTION, 0)
    t = time.perf_counter()
    edge, server = Workers(), Workers()
    edge.start(fill_edge, data_dir, spec)
    for w in range(writers):
        server.start(fill_server_share, node, w, writers, parallel)
    out = server.join()
    out["server_fill_s"] = time.perf_counter() - t
    log(f"server node filled in {out['server_fill_s']:.0f} s; indexing (threshold back to {threshold})")
    t = time.perf_counter()
    set_indexing_threshold(node, COLLECTION, threshold)
    info = wait_optimized(node, COLLECTION)
    held = exact_count(node, COLLECTION)
    if held != len(POINTS):
        raise RuntimeError(f"the node holds {held} points, not {len(POINTS)}")
    out["server_index_s"] = time.perf_counter() - t
    out["server_collection"] = {
        k: info.get(k) for k in ("points_count", "indexed_vectors_count", "segments_count")
    }
    log(f"server node indexed in {out['server_index_s']:.0f} s: {out['server_collection']}")
    out.update(edge.join())
    return out


# ----------------------------------------------------------------------------- the measurement


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def allocated_mb(root: Path) -> float:
    """Disk blocks allocated under ``root`` (not the apparent size: both engines pre-allocate)."""
    return round(sum(p.stat().st_blocks * 512 for p in root.rglob("*") if p.is_file()) / 2**20, 1)


def footprint(node: QdrantNode, data_dir: Path) -> dict[str, float]:
    """The node's resident memory and both stores' disk (the embedded store's RAM is in the
    server's process, with the model: not separable here)."""
    assert node.proc is not None
    return {
        "node_rss_mb": rss_mb(node.proc.pid),
        "node_storage_mb": allocated_mb(node.workdir / "storage"),
        "edge_data_mb": allocated_mb(data_dir),
    }


async def measure(node: QdrantNode, data_dir: Path, unused: Path, samples: int) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    t = time.perf_counter()
    async with (
        running_server(data_dir) as edge,
        running_server(unused, qdrant_url=node.url, qdrant_grpc_port=node.grpc_port) as server,
        grpc.aio.insecure_channel(edge.address) as ce,
        grpc.aio.insecure_channel(server.address) as cs,
    ):
        figures["servers_start_s"] = time.perf_counter() - t
        figures["footprint_before"] = footprint(node, data_dir)
        log(f"servers up in {figures['servers_start_s']:.0f} s; {samples} rounds")
        stubs = {
            "edge": memory_service_pb2_grpc.MemoryServiceStub(ce),
            "server": memory_service_pb2_grpc.MemoryServiceStub(cs),
        }
        times: dict[str, list[float]] = {f"{b}_{k}": [] for b in stubs for k in ("unique", "cached")}
        rng = random.Random(11)  # the queries: the same whether the stores were filled now or not
        cached_query = query_text(rng, 10**9)
        for stub in stubs.values():  # warm up: the model, the query cache, the connections
            for _ in range(5):
                await stub.SearchMemories(s.SearchMemoriesRequest(query=cached_query, limit=10))
        for j in range(samples):
            unique = query_text(rng, j)
            order = list(stubs.items()) if j % 2 == 0 else list(reversed(stubs.items()))
            for name, stub in order:
                for kind, q in (("unique", unique), ("cached", cached_query)):
                    t = time.perf_counter()
                    await stub.SearchMemories(s.SearchMemoriesRequest(query=q, limit=10))
                    times[f"{name}_{kind}"].append((time.perf_counter() - t) * 1000)
        figures["footprint_after"] = footprint(node, data_dir)
    for key, values in times.items():
        figures[f"{key}_p50_ms"] = round(statistics.median(values), 2)
        figures[f"{key}_p90_ms"] = round(pct(values, 0.9), 2)
    for kind in ("unique", "cached"):
        figures[f"{kind}_server_over_edge"] = round(
            figures[f"server_{kind}_p50_ms"] / figures[f"edge_{kind}_p50_ms"], 2
        )
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memories", type=int, default=100_000)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--base-texts", type=int, default=1000)
    ap.add_argument("--writers", type=int, default=2, help="processes sending batches to the node")
    ap.add_argument("--parallel", type=int, default=2, help="batches in flight per writer")
    ap.add_argument(
        "--keep",
        type=Path,
        help="keep both stores in this directory; a later run with the same --memories and "
        "--base-texts measures on them again without filling",
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    binary, why = qdrant_binary()
    if binary is None:
        raise SystemExit(why)
    corpus = {"memories": args.memories, "base_texts": args.base_texts}
    figures: dict[str, Any] = {**corpus, "samples": args.samples, "load_average_start": os.getloadavg()}
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        root = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="engram-svse-")))
        manifest_path = root / "corpus.json"
        manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else None
        if manifest is not None and {k: manifest.get(k) for k in corpus} != corpus:
            raise SystemExit(f"{root} holds another corpus ({manifest}); use another --keep directory")
        if manifest is None and root.exists() and any(root.iterdir()):
            raise SystemExit(f"{root} is not empty and holds no corpus.json; use an empty directory")
        root.mkdir(parents=True, exist_ok=True)
        data_dir = root / "edge"
        node = stack.enter_context(running_node(binary, root / "qdrant"))
        if manifest is None:
            log(f"building the corpus: {args.memories} memories from {args.base_texts} embedded texts")
            spec = asyncio.run(build_points(args.memories, args.base_texts))
            corpus_s = time.perf_counter() - t0
            log(f"corpus built in {corpus_s:.0f} s; filling both stores side by side")
            t = time.perf_counter()
            timings = fill(node, data_dir, spec, args.writers, args.parallel)
            POINTS.clear()
            manifest = {
                **corpus,
                "filled_at": time.time(),
                "corpus_s": corpus_s,
                "fill_wall_s": time.perf_counter() - t,
                **timings,
                "load_average_filled": os.getloadavg(),
            }
            manifest_path.write_text(json.dumps(manifest, indent=2))
        else:
            age_h = (time.time() - manifest["filled_at"]) / 3600
            log(f"reusing the stores in {root}, filled {age_h:.1f} h ago")
            figures["reused"] = True
        figures["fill"] = manifest
        figures.update(asyncio.run(measure(node, data_dir, root / "unused", args.samples)))
    figures["total_s"] = time.perf_counter() - t0
    figures["load_average_end"] = os.getloadavg()
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
