"""`make bench-cpu`: Engram's own cost per search beside the engine's, with a zero-cost embedder.

    .venv/bin/python bench/stages.py --memories 100000 --samples 1 --keep results/bench/corpus
    .venv/bin/python bench/cpu.py --data results/bench/corpus/data-100000 --queries 200 --rounds 3

Every query's embedding is known before it is measured (the server's query cache is filled by one
search per query first; the engine side embeds the same texts with the same local model), so
neither side pays for the model; the cross-encoder reranker, a model too, is off
(``ENGRAM_RERANK=off``). The server runs as its own process (``engram serve`` on a copy of
the data directory) with the candidate/record caches and the nearest lists off
(``ENGRAM_SEARCH_CACHE_ENTRIES=0``, ``ENGRAM_NEAREST_LISTS=0``): every search walks the engine's
graph. The engine side opens another copy of the shard in this process and sends, per query, the
dense + BM25 batch the store sends for a default search (``limit`` 10: 100 + 25 dense and 50 + 16
BM25 candidates, unfiltered; ids and scores only).

Per round, variants alternating (engine, then Engram, then the next round):

* **c = 1**: each query once, one at a time; p50 of the latency (Engram: a gRPC SearchMemories
  from this process; engine: ``query_batch`` in-process).
* **c = 32**: the queries spread over 32 callers (engine: 32 threads; Engram: 32 concurrent gRPC
  calls on one channel); requests per second over the wall time.
* **CPU**: the engine's CPU per query (this process's CPU clock over the c = 1 engine pass, which
  does nothing else); Engram's CPU per search = the server process's CPU (its threads' clocks from
  ``/proc``, split: event loop, storage thread + engine threads, others) over the c = 32 pass,
  divided by the searches, less the engine's CPU per query (a search's reads run on the event loop
  while the storage thread is idle, so the engine's work shows there too). What is left is
  Engram's own work:
  gRPC and the servicer, the event loop, candidate assembly, ranking, reading the winners,
  storage-thread Python (and the lexical-only cosines query the store adds).

* **The floor**: a bare ``grpc.aio`` server (``bench/grpc_echo.py``, its own process: one unary
  method, no interceptors, answering with as many bytes as a search's answer) measured the same
  way each round (p50 at c = 1, requests/s at c = 32, its CPU per call); the last table gives what
  the targets leave for Engram's own work once the engine and a bare round trip are paid.

``--baseline DIR`` (the source tree of another revision, e.g. ``git archive main | tar -x -C
DIR``) runs that revision's server too, on its own copy of the data; each round then measures the
engine, the baseline and this checkout in turn, and the table has a column for each (a
before/after from one run, under the same load).

``--qdrant-url URL`` (a Qdrant server node, e.g. ``http://127.0.0.1:6333``; gRPC on
``--qdrant-grpc-port``) measures the server path too, in the same run. The data directory's
points (vectors, BM25 vectors, payloads) are written into the node through ``QdrantStore.upsert``
(collection ``--qdrant-prefix`` + ``default``, Engram's payload indexes, the node's indexing paused
during the upload, then waited for until green; a collection already holding the same number of
points is reused), and a second Engram server runs on it (``ENGRAM_QDRANT_URL``). Its engine side
is the node queried directly over gRPC with the dense + BM25 batch ``QdrantStore.candidates``
sends (the same limits, the store's search params, ids and scores only; the store's third query,
the BM25-only hits' cosines, counts as Engram's, as the embedded store's lexical-only cosines
query does): p50 at c = 1 from this process, RPS with 32 threads. Engram's own CPU per search on
the server path is the whole Engram process (the engine runs in the node's process,
``--qdrant-pid`` adds its CPU per search). The embedded server runs beside it on its copy of the
data, so the table also gives the search p50 of both stores in one run. ``--without-cues`` adds
a second copy of the data on the node with the rescoring cue fields removed (points as a release
before them wrote them: each search reads its best 50 candidates' texts to rescore) and a third
Engram server on it.
With ``--baseline`` too, the baseline revision's server also runs on the node (the same
collection), so the server path has its before/after in the same run; ``--qdrant-only`` leaves
the embedded servers out (the server path alone, in half the time). The table gives the three
ratios for each server on the node, the node's CPU per search and Engram's own + the node's.

A pass's CPU is read 1.5 s after its last search (``ACCESS_FLUSH_WAIT``): the access counters of
its last hits are written up to ``access_flush_seconds`` (1 s) later, and that write (in the
Engram process and on the node) belongs to the pass, not to the server measured next on the node.

    .venv/bin/python bench/cpu.py --data DIR --queries 200 --rounds 3 \
        --qdrant-url http://127.0.0.1:6333 --qdrant-grpc-port 6334 --qdrant-pid PID

The three ratios the targets of issue #33 name are printed side by side with ``uptime``. The
machine is shared: absolute figures move with load; compare ratios from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import qdrant_edge as qe

sys.path.insert(0, str(Path(__file__).resolve().parent))

import grpc_echo
from load import ThreadCpu
from stages import query_text

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.adapters.embedding.local import LocalE5Embedder
from engram_server.adapters.lexical import Bm25Encoder
from engram_server.adapters.storage.edge import DENSE_SEARCH_PARAMS
from engram_server.adapters.storage.payload import LEXICAL_VECTOR, record_from_payload, spec_from_json
from engram_server.adapters.storage.qdrant import QdrantStore
from engram_server.domain.model import DEFAULT_COLLECTION, SparseVector, StoredPoint

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 10
DENSE_N = 100 + max(16, 100 // 4)  # min_candidates and the store's liveness margin
SPARSE_N = 50 + max(16, 50 // 4)  # min_lexical_candidates and the margin
#: Seconds waited after a pass before its CPU is read: the access counters' write of its last
#: searches (``access_flush_seconds``, 1 s by default) lands in that pass's figures.
ACCESS_FLUSH_WAIT = 1.5


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def engine_requests(vec: list[float], bm25: Bm25Encoder, text: str) -> qe.QueryBatchRequest:
    sp = bm25.encode_query(text)
    return qe.QueryBatchRequest(
        [
            qe.QueryRequest(
                limit=DENSE_N,
                query=qe.Query.Nearest(vec),
                with_payload=False,
                with_vector=False,
                params=DENSE_SEARCH_PARAMS,
            ),
            qe.QueryRequest(
                limit=SPARSE_N,
                query=qe.Query.Nearest(
                    qe.SparseVector(list(sp.indices), list(sp.values)), using=LEXICAL_VECTOR
                ),
                with_payload=False,
                with_vector=False,
            ),
        ]
    )


def node_requests(vec: list[float], bm25: Bm25Encoder, text: str, params: Any) -> list[Any]:
    """The dense + BM25 queries ``QdrantStore.candidates`` sends a Qdrant node for a default search
    (ids and scores only; not its third query, the BM25-only hits' cosines: Engram's work)."""
    from qdrant_client import models  # noqa: PLC0415

    sp = bm25.encode_query(text)
    return [
        models.QueryRequest(query=vec, limit=DENSE_N, with_payload=False, with_vector=False, params=params),
        models.QueryRequest(
            query=models.SparseVector(indices=list(sp.indices), values=list(sp.values)),
            using=LEXICAL_VECTOR,
            limit=SPARSE_N,
            with_payload=False,
            with_vector=False,
        ),
    ]


async def fill_node(args: argparse.Namespace, data: Path, prefix: str) -> int:
    """The data directory's default collection written into the Qdrant node (see the module
    docstring); returns its number of points. Reused when the node already holds as many."""
    from qdrant_client import QdrantClient, models  # noqa: PLC0415

    spec_path = data / "collections" / DEFAULT_COLLECTION / "spec.json"
    spec = spec_from_json(json.loads(spec_path.read_text()), where=str(spec_path))
    shard = qe.EdgeShard.load(str(data / "collections" / DEFAULT_COLLECTION / "shard"))
    n = int(shard.count(qe.CountRequest(exact=True)))
    client = QdrantClient(url=args.qdrant_url, grpc_port=args.qdrant_grpc_port, timeout=600)
    qname = prefix + DEFAULT_COLLECTION
    store = QdrantStore(args.qdrant_url, grpc_port=args.qdrant_grpc_port, prefix=prefix, timeout=600)
    await store.open()
    try:
        if client.collection_exists(qname) and client.count(qname, exact=True).count == n:
            print(f"node: reusing {qname} ({n} points)", flush=True)
            shard.close()
            return n
        await store.drop_collection(DEFAULT_COLLECTION)
        await store.create_collection(spec)
        threshold = client.get_collection(qname).config.optimizer_config.indexing_threshold
        client.update_collection(qname, optimizers_config=models.OptimizersConfigDiff(indexing_threshold=0))
        t = time.perf_counter()
        gate = asyncio.Semaphore(4)
        offset: Any = None
        pending: list[asyncio.Task[None]] = []

        async def write(points: list[StoredPoint]) -> None:
            async with gate:
                await store.upsert(DEFAULT_COLLECTION, points)

        while True:
            records, offset = shard.scroll(
                qe.ScrollRequest(offset=offset, limit=1000, filter=None, with_payload=True, with_vector=True)
            )
            points = []
            for r in records:
                vec = r.vector or {}
                sp = vec.get(LEXICAL_VECTOR) if isinstance(vec, dict) else None
                if sp is not None and not isinstance(sp, qe.SparseVector):
                    raise SystemExit(f"point {r.id}: its {LEXICAL_VECTOR!r} vector is not sparse")
                dense = vec.get("") if isinstance(vec, dict) else vec
                points.append(
                    StoredPoint(
                        record_from_payload(r.id, DEFAULT_COLLECTION, r.payload or {}),
                        np.asarray(dense, dtype=np.float32),
                        SparseVector(tuple(sp.indices), tuple(sp.values)) if sp is not None else None,
                    )
                )
            await gate.acquire()  # (at most 4 batches built ahead of the node)
            gate.release()
            pending.append(asyncio.create_task(write(points)))
            if offset is None:
                break
        await asyncio.gather(*pending)
        shard.close()
        print(f"node: {n} points written in {time.perf_counter() - t:.0f} s; indexing", flush=True)
        t = time.perf_counter()
        client.update_collection(
            qname, optimizers_config=models.OptimizersConfigDiff(indexing_threshold=threshold or 10000)
        )
        while True:
            info = client.get_collection(qname)
            if info.status == models.CollectionStatus.GREEN and client.count(qname, exact=True).count == n:
                break
            await asyncio.sleep(2)
        print(f"node: indexed in {time.perf_counter() - t:.0f} s", flush=True)
        return n
    finally:
        await store.close()
        client.close()


def wait_green(client: Any, qname: str) -> None:
    """Until the node has finished optimizing the collection (rewritten points leave work)."""
    from qdrant_client import models  # noqa: PLC0415

    t = time.perf_counter()
    time.sleep(2)
    while client.get_collection(qname).status != models.CollectionStatus.GREEN:
        time.sleep(2)
    print(f"node: {qname} green again after {time.perf_counter() - t:.0f} s", flush=True)


def set_cues(args: argparse.Namespace, prefix: str, *, strip: bool) -> None:
    """Remove the cue fields from every point of the node's collection (``strip``), or write them
    back where they are missing (from each point's text)."""
    from qdrant_client import QdrantClient, models  # noqa: PLC0415

    from engram_server.adapters.storage.qdrant_cues import CUE_FIELDS, cue_payload  # noqa: PLC0415
    from engram_server.adapters.storage.qdrant_grpc import PACKED_FIELD  # noqa: PLC0415

    client = QdrantClient(url=args.qdrant_url, grpc_port=args.qdrant_grpc_port, timeout=600)
    qname = prefix + DEFAULT_COLLECTION
    try:
        if strip:
            having = models.Filter(
                must_not=[models.IsEmptyCondition(is_empty=models.PayloadField(key=CUE_FIELDS[0]))]
            )
            if client.count(qname, count_filter=having, exact=True).count:
                client.delete_payload(  # (and the packed ranking value, which holds the cue too)
                    qname,
                    keys=[*CUE_FIELDS, PACKED_FIELD],
                    points=models.FilterSelector(filter=having),
                    wait=True,
                )
                print("node: rescoring cue fields removed from every point", flush=True)
                wait_green(client, qname)
            return
        missing = models.Filter(
            must=[models.IsEmptyCondition(is_empty=models.PayloadField(key=CUE_FIELDS[0]))]
        )
        offset: Any = None
        written = 0
        while True:
            records, offset = client.scroll(
                qname, scroll_filter=missing, limit=1000, offset=offset, with_payload=["content"]
            )
            ops: list[models.UpdateOperation] = [
                models.SetPayloadOperation(
                    set_payload=models.SetPayload(  # (a packed ranking value would be stale: cleared)
                        payload={
                            **cue_payload(str((r.payload or {}).get("content") or "")),
                            PACKED_FIELD: None,
                        },
                        points=[r.id],
                    )
                )
                for r in records
            ]
            if ops:
                client.batch_update_points(qname, update_operations=ops, wait=True)
                written += len(ops)
            if offset is None:
                break
        if written:
            print(f"node: rescoring cue fields written back on {written} points", flush=True)
            wait_green(client, qname)
    finally:
        client.close()


def node_round(client: Any, qname: str, reqs: list[list[Any]], conc: int) -> dict[str, float]:
    """The engine side of the server path: the store's batch sent to the node directly."""
    lat = []
    for r in reqs:
        t = time.perf_counter()
        client.query_batch_points(qname, requests=r)
        lat.append((time.perf_counter() - t) * 1000)
    with ThreadPoolExecutor(conc) as ex:
        t = time.perf_counter()
        list(ex.map(lambda r: client.query_batch_points(qname, requests=r), reqs))
        wall = time.perf_counter() - t
    return {"p50_ms": p50(lat), "cpu_ms": 0.0, "rps": len(reqs) / wall}


def proc_cpu(pid: int) -> float:
    """CPU seconds a process has used so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))


def start_server(env: dict[str, str], tree: Path = ROOT) -> subprocess.Popen[bytes]:
    """``engram serve`` from the source tree ``tree`` (this checkout, or a baseline's)."""
    if tree != ROOT:
        env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH", "")]))}
    return subprocess.Popen([sys.executable, "-m", "engram_server", "serve"], cwd=tree, env=env)


def uptime() -> str:
    return subprocess.run(["uptime"], check=False, capture_output=True, text=True).stdout.strip()


def p50(xs: list[float]) -> float:
    return statistics.median(xs)


def engine_round(shard: Any, reqs: list[Any], conc: int) -> dict[str, float]:
    lat = []
    c0 = time.process_time()
    for r in reqs:
        t = time.perf_counter()
        shard.query_batch(r)
        lat.append((time.perf_counter() - t) * 1000)
    cpu_ms = (time.process_time() - c0) * 1000 / len(reqs)
    with ThreadPoolExecutor(conc) as ex:
        t = time.perf_counter()
        list(ex.map(shard.query_batch, reqs))
        wall = time.perf_counter() - t
    return {"p50_ms": p50(lat), "cpu_ms": cpu_ms, "rps": len(reqs) / wall}


async def engram_round(address: str, texts: list[str], conc: int, threads: ThreadCpu) -> dict[str, float]:
    async with grpc.aio.insecure_channel(address) as ch:
        stub = memory_service_pb2_grpc.MemoryServiceStub(ch)
        lat = []
        for q in texts:
            t = time.perf_counter()
            await stub.SearchMemories(s.SearchMemoriesRequest(query=q, limit=LIMIT))
            lat.append((time.perf_counter() - t) * 1000)
        todo = list(texts)

        async def caller() -> None:
            while todo:
                q = todo.pop()
                await stub.SearchMemories(s.SearchMemoriesRequest(query=q, limit=LIMIT))

        before = threads.read()
        t = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(conc)))
        wall = time.perf_counter() - t
        # the hits' access counters are written at most ``access_flush_seconds`` (1 s) after the
        # search: that write is part of the searches' cost (the server's and the node's), not of
        # whatever is measured next
        await asyncio.sleep(ACCESS_FLUSH_WAIT)
        spent = ThreadCpu.spent(before, threads.read())
    n = len(texts)
    return {
        "p50_ms": p50(lat),
        "rps": n / wall,
        "server_cpu_ms": sum(spent.values()) * 1000 / n,
        **{f"{k}_cpu_ms": v * 1000 / n for k, v in spent.items()},
    }


async def echo_round(address: str, request: bytes, n: int, conc: int, threads: ThreadCpu) -> dict[str, float]:
    """A bare grpc.aio unary round trip (``bench/grpc_echo.py``), measured as ``engram_round``."""
    async with grpc.aio.insecure_channel(address) as ch:
        call = grpc_echo.stub(ch)
        lat = []
        for _ in range(n):
            t = time.perf_counter()
            await call(request)
            lat.append((time.perf_counter() - t) * 1000)
        todo = n

        async def caller() -> None:
            nonlocal todo
            while todo > 0:
                todo -= 1
                await call(request)

        before = threads.read()
        t = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(conc)))
        wall = time.perf_counter() - t
        spent = ThreadCpu.spent(before, threads.read())
    return {"p50_ms": p50(lat), "rps": n / wall, "server_cpu_ms": sum(spent.values()) * 1000 / n}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="a data directory (bench/stages.py --keep)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--baseline",
        type=Path,
        help="the source tree of another revision (e.g. `git archive main | tar -x -C DIR`): its server "
        "runs too, on its own copy of the data, and each round measures the engine, the baseline "
        "and this checkout in turn (a before/after in one run)",
    )
    ap.add_argument(
        "--qdrant-url",
        help="a Qdrant server node (http://host:6333): the data is written into it and an Engram "
        "server on it is measured beside the embedded one, against the node queried directly",
    )
    ap.add_argument("--qdrant-grpc-port", type=int, default=6334)
    ap.add_argument("--qdrant-prefix", default="cpubench_", help="collection name prefix on the node")
    ap.add_argument("--qdrant-pid", type=int, help="the node's process id (adds its CPU per search)")
    ap.add_argument(
        "--qdrant-only",
        action="store_true",
        help="with --qdrant-url: measure only the servers on the node (no embedded Engram servers)",
    )
    ap.add_argument(
        "--without-cues",
        action="store_true",
        help="also a second copy of the data on the node without the rescoring cue fields (prefix "
        "'old_' + the prefix: not one the first server's prefix matches), as a release before them "
        "wrote the points (each search reads its best 50 candidates' texts to rescore), and a third "
        "Engram server on it: item 1's effect in one run",
    )
    args = ap.parse_args()
    rng = random.Random(11)
    texts = [query_text(rng, 7_000_000 + i) for i in range(args.queries)]

    tmp = Path(tempfile.mkdtemp(prefix="engram-cpu-"))
    procs: list[subprocess.Popen[bytes]] = []
    # (label, source tree, store): the baseline first in each round, then this checkout; with a
    # node, this checkout on the node last
    trees = [("baseline", args.baseline.resolve()), ("engram", ROOT)] if args.baseline else [("engram", ROOT)]
    if args.qdrant_only:
        if not args.qdrant_url:
            raise SystemExit("--qdrant-only needs --qdrant-url")
        trees = []
    if args.qdrant_url:
        if args.baseline:  # the baseline on the node too: the server path's before/after
            trees.append(("qdrant-baseline", args.baseline.resolve()))
        trees.append(("qdrant", ROOT))
        await fill_node(args, args.data, args.qdrant_prefix)
        set_cues(args, args.qdrant_prefix, strip=False)
        if args.without_cues:
            trees.append(("qdrant-old", ROOT))
            await fill_node(args, args.data, "old_" + args.qdrant_prefix)
            set_cues(args, "old_" + args.qdrant_prefix, strip=True)
    try:
        eng_dir = tmp / "engine"
        shutil.copytree(args.data, eng_dir)
        addresses: dict[str, str] = {}
        for label, tree in trees:
            srv_dir = tmp / f"server-{label}"
            port = free_port()
            env = {
                **os.environ,
                "ENGRAM_DATA_DIR": str(srv_dir),
                "ENGRAM_PORT": str(port),
                "ENGRAM_SEARCH_CACHE_ENTRIES": "0",
                "ENGRAM_NEAREST_LISTS": "0",
                "ENGRAM_QUERY_CACHE_SIZE": str(max(4096, 2 * args.queries)),
                "ENGRAM_RERANK": "off",  # a model's cost, like the embedder's: not Engram's own
            }
            if label.startswith("qdrant"):
                srv_dir.mkdir()
                env |= {
                    "ENGRAM_QDRANT_URL": args.qdrant_url,
                    "ENGRAM_QDRANT_GRPC_PORT": str(args.qdrant_grpc_port),
                    "ENGRAM_QDRANT_PREFIX": ("old_" if label == "qdrant-old" else "") + args.qdrant_prefix,
                }
            else:
                shutil.copytree(args.data, srv_dir)
            procs.append(start_server(env, tree))
            addresses[label] = f"127.0.0.1:{port}"
        embedder = LocalE5Embedder()
        vecs = await embedder.embed_queries(texts)
        await embedder.close()
        bm25 = Bm25Encoder()
        reqs = [engine_requests([float(x) for x in v], bm25, t) for v, t in zip(vecs, texts, strict=True)]
        shard = qe.EdgeShard.load(str(eng_dir / "collections" / DEFAULT_COLLECTION / "shard"))
        node: Any = None
        node_reqs: list[list[Any]] = []
        qname = args.qdrant_prefix + DEFAULT_COLLECTION
        if args.qdrant_url:
            from qdrant_client import QdrantClient  # noqa: PLC0415

            node = QdrantClient(
                url=args.qdrant_url, grpc_port=args.qdrant_grpc_port, prefer_grpc=True, timeout=600
            )
            params = QdrantStore(args.qdrant_url)._search_params  # what the store sends
            node_reqs = [
                node_requests([float(x) for x in v], bm25, t, params)
                for v, t in zip(vecs, texts, strict=True)
            ]
        for address in addresses.values():
            with grpc.insecure_channel(address) as ch:
                grpc.channel_ready_future(ch).result(timeout=600)
                stub = memory_service_pb2_grpc.MemoryServiceStub(ch)
                for q in texts:  # the query cache: the embedder costs nothing from here on
                    stub.SearchMemories(s.SearchMemoriesRequest(query=q, limit=LIMIT))
        # The bare gRPC floor: an echo server of its own, sent a search's request bytes and
        # answering with as many bytes as a search's answer.
        with grpc.insecure_channel(next(iter(addresses.values()))) as ch:
            stub = memory_service_pb2_grpc.MemoryServiceStub(ch)
            reply_bytes = stub.SearchMemories(s.SearchMemoriesRequest(query=texts[0], limit=LIMIT)).ByteSize()
        echo_request = s.SearchMemoriesRequest(query=texts[0], limit=LIMIT).SerializeToString()
        echo_port = free_port()
        echo_script = str(Path(__file__).with_name("grpc_echo.py"))
        echo = subprocess.Popen(  # noqa: ASYNC220 (a server process, ended in ``finally``)
            [sys.executable, echo_script, "serve", str(echo_port), str(reply_bytes)]
        )
        procs.append(echo)
        echo_address = f"127.0.0.1:{echo_port}"
        with grpc.insecure_channel(echo_address) as ch:
            grpc.channel_ready_future(ch).result(timeout=60)
        echo_threads = ThreadCpu(echo.pid)
        engine_round(shard, reqs[:20], args.concurrency)  # warm
        if node is not None:
            node_round(node, qname, node_reqs[:20], args.concurrency)
        await echo_round(echo_address, echo_request, 50, args.concurrency, echo_threads)  # warm
        threads = {label: ThreadCpu(p.pid) for (label, _), p in zip(trees, procs[: len(trees)], strict=True)}
        echoes: list[dict[str, Any]] = []
        rounds: list[dict[str, Any]] = []
        for i in range(args.rounds):
            engines = {"edge": engine_round(shard, reqs, args.concurrency)}
            if node is not None:
                engines["node"] = node_round(node, qname, node_reqs, args.concurrency)
            for label, _ in trees:
                on_node = label.startswith("qdrant")
                eng = engines["node" if on_node else "edge"]
                node_cpu = proc_cpu(args.qdrant_pid) if args.qdrant_pid and on_node else None
                ram = await engram_round(addresses[label], texts, args.concurrency, threads[label])
                row = {
                    "round": i,
                    "server": label,
                    "engine": eng,
                    "engram": ram,
                    "p50_ratio": ram["p50_ms"] / eng["p50_ms"],
                    "rps_ratio": ram["rps"] / eng["rps"],
                    # (the node's engine runs in its own process: the Engram process is all Engram)
                    "own_cpu_ms": ram["server_cpu_ms"] - eng["cpu_ms"],
                    "load": os.getloadavg()[0],
                }
                extra = ""
                if node_cpu is not None:
                    # the node's CPU over the whole round (c = 1 and c = 32 passes) per search
                    row["node_cpu_ms"] = (proc_cpu(args.qdrant_pid) - node_cpu) * 1000 / (2 * len(texts))
                    extra = f", node {row['node_cpu_ms']:.2f} ms/search"
                rounds.append(row)
                print(
                    f"round {i} {label}: p50 {ram['p50_ms']:.2f} vs engine {eng['p50_ms']:.2f} ms "
                    f"({row['p50_ratio']:.2f} x); "
                    f"c={args.concurrency} {ram['rps']:.0f} vs {eng['rps']:.0f} RPS "
                    f"({row['rps_ratio']:.2f} x); "
                    f"server CPU {ram['server_cpu_ms']:.2f} ms/search (loop {ram['loop_cpu_ms']:.2f}, "
                    f"storage {ram['storage_cpu_ms']:.2f}, other {ram['other_cpu_ms']:.2f}), "
                    f"engine {eng['cpu_ms']:.2f} -> Engram's own {row['own_cpu_ms']:.2f} ms{extra}; "
                    f"load {row['load']:.1f}",
                    flush=True,
                )
            bare = await echo_round(echo_address, echo_request, len(texts), args.concurrency, echo_threads)
            echoes.append({"round": i, "engine": engines["edge"], "grpc": bare})
            print(
                f"round {i} bare gRPC ({reply_bytes} B answers): p50 {bare['p50_ms']:.2f} ms; "
                f"c={args.concurrency} {bare['rps']:.0f} RPS; server CPU {bare['server_cpu_ms']:.2f} ms/call",
                flush=True,
            )
        shard.close()
        if node is not None:
            node.close()

        def med(k: str, label: str) -> float:
            return float(statistics.median(r[k] for r in rounds if r["server"] == label))

        def med_in(part: str, k: str, label: str) -> float:
            return float(statistics.median(r[part][k] for r in rounds if r["server"] == label))

        up = uptime()
        labels = [label for label, _ in trees]
        figures = [
            ("Search p50 c=1 / engine p50", "p50_ratio", "{:.2f} x", "<= 1.5 x"),
            (f"Search RPS c={args.concurrency} / engine RPS", "rps_ratio", "{:.2f} x", ">= 0.5 x"),
            ("Engram's own CPU per search", "own_cpu_ms", "{:.2f} ms", "<= 3 ms"),
        ]
        names = {
            "qdrant": "engram on the Qdrant node",
            "qdrant-old": "the same, points without cue fields",
            "qdrant-baseline": f"baseline ({args.baseline}) on the Qdrant node",
            "engram": "engram (embedded)" if args.qdrant_url else "engram",
        }
        head = " | ".join(
            f"{label} ({tree})" if label == "baseline" else names.get(label, label) for label, tree in trees
        )
        table = [
            f"\n| figure (median of {args.rounds} rounds, {args.queries} queries) | {head} | target |",
            "|---|" + "---|" * len(labels) + "---|",
            *(
                f"| {name} | " + " | ".join(fmt.format(med(k, label)) for label in labels) + f" | {target} |"
                for name, k, fmt, target in figures
            ),
            "| Search p50 c=1 (engine p50) | "
            + " | ".join(
                f"{med_in('engram', 'p50_ms', label):.2f} ms ({med_in('engine', 'p50_ms', label):.2f})"
                for label in labels
            )
            + " | |",
            f"| Search RPS c={args.concurrency} (engine RPS) | "
            + " | ".join(
                f"{med_in('engram', 'rps', label):.0f} ({med_in('engine', 'rps', label):.0f})"
                for label in labels
            )
            + " | |",
        ]
        if args.qdrant_pid:
            table.append(
                "| the node's CPU per search | "
                + " | ".join(
                    f"{med('node_cpu_ms', label):.2f} ms" if label.startswith("qdrant") else ""
                    for label in labels
                )
                + " | |"
            )
            table.append(
                "| Engram's own + the node's CPU per search | "
                + " | ".join(
                    f"{med('own_cpu_ms', label) + med('node_cpu_ms', label):.2f} ms"
                    if label.startswith("qdrant")
                    else ""
                    for label in labels
                )
                + " | |"
            )
        print("\n".join(table))

        def emed(side: str, k: str) -> float:
            return float(statistics.median(e[side][k] for e in echoes))

        eng_p50, grpc_p50 = emed("engine", "p50_ms"), emed("grpc", "p50_ms")
        eng_rps, grpc_rps = emed("engine", "rps"), emed("grpc", "rps")
        grpc_cpu = emed("grpc", "server_cpu_ms")
        eng_cpu = emed("engine", "cpu_ms")
        constraint = {
            "engine_p50_ms": eng_p50,
            "grpc_p50_ms": grpc_p50,
            "grpc_rps": grpc_rps,
            "grpc_server_cpu_ms": grpc_cpu,
            "engine_rps": eng_rps,
            "engine_cpu_ms": eng_cpu,
            "reply_bytes": reply_bytes,
            # p50 <= 1.5 x engine: what is left for Engram's own work once the engine and a bare
            # round trip are paid
            "p50_budget_ms": 1.5 * eng_p50 - eng_p50 - grpc_p50,
            # RPS >= 0.5 x engine on the same cores: the CPU a search may take in all
            "rps_budget_cpu_ms": 2 * eng_cpu - eng_cpu - grpc_cpu,
        }
        print(
            f"\n| the floor (median of {args.rounds} rounds) | figure |\n|---|---|\n"
            f"| the engine's p50 at c = 1 (in-process) | {eng_p50:.2f} ms |\n"
            f"| a bare grpc.aio unary round trip, p50 at c = 1 ({reply_bytes} B answer) | "
            f"{grpc_p50:.2f} ms |\n"
            f"| p50 left for Engram's own work under 1.5 x the engine (0.5 x engine - bare RPC) | "
            f"{constraint['p50_budget_ms']:.2f} ms |\n"
            f"| the engine's CPU per query / RPS at c = {args.concurrency} | "
            f"{eng_cpu:.2f} ms / {eng_rps:.0f} |\n"
            f"| a bare round trip: server CPU per call / RPS at c = {args.concurrency} | "
            f"{grpc_cpu:.2f} ms / {grpc_rps:.0f} |\n"
            f"| CPU left per search for Engram's own work at 0.5 x the engine's RPS "
            f"(2 x engine CPU - engine - bare RPC server side) | {constraint['rps_budget_cpu_ms']:.2f} ms |"
        )
        print(f"\n{up}")
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(
                json.dumps({"uptime": up, "rounds": rounds, "grpc": echoes, "floor": constraint}, indent=2)
            )
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
