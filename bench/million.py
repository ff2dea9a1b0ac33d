"""One million memories through the batch RPC, then search latency and RSS on the default stack.

    .venv/bin/python bench/million.py --memories 1000000 --keep /work/scratch/m1   # ~1-2 h on 2 cores
    .venv/bin/python bench/million.py --memories 20000                               # a few minutes
    .venv/bin/python bench/million.py --serve-only DIR/data-1000000  # phase 2 on any data dir, e.g.
                                                   # one kept by bench/stages.py --memories 1000000 --keep DIR

Phase 1, **ingest**: an Engram server (in this process; real gRPC, servicer, batcher, write gate,
TTL, BM25, qdrant-edge storage, HNSW built in the background as the collection grows) receives
``--memories`` synthetic memories as ``AddMemories`` calls of ``--batch`` memories (the server's
default ``ENGRAM_MAX_BATCH_ITEMS`` = 64) from ``--concurrency`` concurrent callers in a **separate
client process** (the typed ``engram-client``, a request_id per memory). Only the model's forward
pass is replaced: the local model embeds ~37 texts/s here (1M would take ~7.5 h), so the corpus is
built the way ``bench/stages.py`` builds it — ``--base-texts`` template sentences embedded once by
the real local model, each memory a normalised mixture of three of those plus noise, with a text
re-filled from its main base — and the server's embedder answers a corpus text with its
precomputed vector (a dict lookup), anything else (queries) with the real model. The embedder
keeps the local model's id, so the collection is an ordinary default-stack collection.
Events get ``created_at`` in ~20-turn sessions over the last 2.7 days, other types within their TTL.
The rate is reported per ``--window`` memories (it falls as the collection grows: the gate queries
a growing collection), and whether the gate refused any as near-copies (then more are sent until
``--memories`` were created).

Phase 2, **serve**: the in-process server is stopped and ``engram serve`` is started as its own
process on the same data directory with nothing but ``ENGRAM_DATA_DIR`` / ``ENGRAM_PORT`` (and
``ENGRAM_EDGE_SEGMENTS`` when ``--edge-segments`` is given) set (the embedded defaults: the real
local model). Reported: its start-up time (it builds any HNSW index
still due before it listens), its RSS (``/proc/PID/status`` VmRSS) when idle and after the
samples, disk per memory, and over one gRPC channel, one call at a time, interleaved per round:
  - ``search_unique``: a new question each time (embedding + storage + ranking);
  - ``search_repeat``: the same question again, nothing written (the candidate cache answers);
  - ``search_after_write``: the same question right after an AddMemory (untimed) of a new memory:
    its embedding is cached, its cached candidates are stale, and the store patches its kept
    nearest list with the point written (before the nearest lists: the storage-bound path). The
    note's text carries a nonce of this run and the AddMemory is retried until it is CREATED: a
    note refused by the write gate writes nothing, and the search would be answered from the
    candidate cache (as happened when this phase was re-run on one data directory with the same
    notes before this check existed). The AddMemory outcomes are reported;
  - ``search_known``: a question asked once before the samples (its embedding is cached) with a
    filter that keeps every memory (a filtered search keeps no nearest list; its candidate list is
    cached under another key, and pushed out since by 300 other questions): the storage-bound path;
  - ``health``: the gRPC health check (the transport floor).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import math
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc
from stages import (  # bench/stages.py: the same synthetic corpus (run from bench/)
    TAGS,
    TEMPLATES,
    Vec,
    dir_bytes,
    make_bases,
    mix_vectors,
    numbers,
    query_text,
    summary,
)

from engram_server.adapters.embedding.batching import BatchingEmbedder
from engram_server.adapters.embedding.local import LocalE5Embedder
from engram_server.domain.model import MemoryType, StoreFilter, Vector
from engram_server.domain.ttl import DAY, ttl_seconds
from engram_server.testing import running_server

COLLECTION = "default"
#: Questions asked after each "known" one before the samples: more than the server's candidate
#: cache holds (256 by default), fewer than its query-embedding cache (4,096).
KNOWN_PUSHED_OUT = 300


# ----------------------------------------------------------------------------- corpus


def make_corpus(n: int, seed: int, base_vecs: Vec, bases: Sequence[Any]) -> tuple[list[dict[str, Any]], Vec]:
    """``n`` memories (unique texts) and their vectors."""
    rng = random.Random(seed)
    vectors, idx = mix_vectors(base_vecs, n, seed)
    now = time.time()
    seen: set[str] = set()
    session_start: dict[int, float] = {}
    items: list[dict[str, Any]] = []
    for i in range(n):
        main, other = bases[int(idx[i, 0])], bases[int(idx[i, 1])]
        sl = dict(main.slots)
        borrow = rng.choice(sorted(sl))
        sl[borrow] = other.slots[borrow]
        mtype, template = TEMPLATES[main.template]
        text = template.format(**sl, **numbers(rng))
        for _ in range(4):  # (templates without numbers repeat: then a suffix makes it unique)
            if text not in seen:
                break
            text = template.format(**sl, **numbers(rng))
        else:
            if text in seen:
                text = f"{text} (#{i})"
        seen.add(text)
        importance = rng.choices(range(1, 11), weights=[4, 6, 8, 10, 12, 12, 10, 8, 5, 3])[0]
        tags = sorted(set(rng.sample(TAGS, rng.choice([0, 0, 1, 1, 1, 2, 3]))))
        if mtype is MemoryType.EVENT:
            start = session_start.setdefault(i // 20, now - rng.uniform(600, 2.7 * DAY))
            created = start + (i % 20) * rng.uniform(5, 40)
        else:
            ttl = ttl_seconds(mtype, importance, tuple(tags))
            created = now - rng.uniform(60, 0.9 * min(ttl if ttl is not None else 180 * DAY, 180 * DAY))
        item: dict[str, Any] = {"c": text, "t": mtype.value, "i": importance, "g": tags, "a": created}
        if rng.random() < 0.5:
            item["m"] = {"session": f"s{i // 20}", "channel": rng.choice(["chat", "email", "voice"])}
        items.append(item)
    return items, vectors


class CorpusEmbedder:
    """The local model, except that a corpus text gets its precomputed vector (see the module doc)."""

    def __init__(self, inner: LocalE5Embedder, table: dict[str, int], vectors: Vec) -> None:
        self.inner = inner
        self.table = table
        self.vectors = vectors
        self.looked_up = 0
        self.embedded = 0

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    async def embed_documents(self, texts: Sequence[str]) -> Vector:
        rows = [self.table.get(t) for t in texts]
        if all(r is not None for r in rows):
            self.looked_up += len(rows)
            out: Vector = self.vectors[np.asarray(rows, dtype=np.int64)]
            return out
        self.embedded += len(texts)
        return await self.inner.embed_documents(texts)

    async def embed_queries(self, texts: Sequence[str]) -> Vector:
        self.embedded += len(texts)
        return await self.inner.embed_queries(texts)

    async def close(self) -> None:
        await self.inner.close()


# ----------------------------------------------------------------------------- the client process


async def client_main(args: argparse.Namespace) -> None:
    from engram_client import AddOutcome, AsyncEngramClient, NewMemory  # noqa: PLC0415

    lines = await asyncio.to_thread(lambda: Path(args.corpus).read_text(encoding="utf-8").splitlines())
    queue = list(range(args.resume_from, len(lines), args.batch))
    queue.reverse()
    done = args.resume_from  # corpus position: "sent" counts from the start of the corpus
    created = duplicates = 0
    started = time.perf_counter()
    next_report = args.resume_from + args.window

    def memory(raw: str) -> NewMemory:
        d = json.loads(raw)
        return NewMemory(
            d["c"],
            type=d["t"],
            importance=d["i"],
            tags=d["g"],
            metadata=d.get("m"),
            created_at=datetime.fromtimestamp(d["a"], UTC),
        )

    async with AsyncEngramClient(args.client, timeout=600) as engram:

        async def worker() -> None:
            nonlocal done, created, duplicates, next_report
            while queue and time.perf_counter() - started < args.stop_after_minutes * 60:
                start = queue.pop()
                batch = [memory(raw) for raw in lines[start : start + args.batch]]
                for added in await engram.add_many(batch, collection=COLLECTION):
                    created += added.outcome is AddOutcome.CREATED
                    duplicates += added.outcome is AddOutcome.DUPLICATE
                done += len(batch)
                if done >= next_report:
                    next_report += args.window
                    print(
                        json.dumps(
                            {
                                "done": done,
                                "created": created,
                                "duplicates": duplicates,
                                "seconds": time.perf_counter() - started,
                            }
                        ),
                        flush=True,
                    )

        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    print(
        json.dumps(
            {
                "done": done,
                "created": created,
                "duplicates": duplicates,
                "seconds": time.perf_counter() - started,
                "final": True,
            }
        ),
        flush=True,
    )


# ----------------------------------------------------------------------------- phase 1


def rss_of(pid: int | str = "self") -> int:
    return rss_parts(pid)["VmRSS"]


def _parts(parts: dict[str, float] | None) -> str:
    if not parts:
        return "parts not recorded"
    return f"anonymous {parts['RssAnon']:.2f} GB, mapped files {parts['RssFile']:.2f} GB"


def rss_parts(pid: int | str = "self") -> dict[str, int]:
    """VmRSS and its parts from /proc/PID/status, in bytes: RssAnon (the process's own memory),
    RssFile (file pages mapped in: the shard's memory-mapped segments, reclaimable page cache)
    and RssShmem."""
    out = {"VmRSS": 0, "RssAnon": 0, "RssFile": 0, "RssShmem": 0}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key = line.split(":", 1)[0]
        if key in out:
            out[key] = int(line.split()[1]) * 1024
    return out


async def ingest(args: argparse.Namespace, data_dir: Path, work: Path) -> dict[str, Any]:
    res: dict[str, Any] = {}
    model = LocalE5Embedder("original")
    rng = random.Random(args.seed)
    bases = make_bases(rng, args.base_texts)
    t = time.perf_counter()
    base_vecs = np.asarray(await model.embed_documents([b.text for b in bases]), dtype=np.float32)
    res["base_embed_s"] = time.perf_counter() - t
    t = time.perf_counter()
    items, vectors = make_corpus(args.memories, args.seed, base_vecs, bases)
    table = {it["c"]: i for i, it in enumerate(items)}
    corpus_file = work / "corpus.jsonl"
    with corpus_file.open("w", encoding="utf-8") as f:
        for it in items:
            f.write(json.dumps(it, ensure_ascii=False) + "\n")
    del items
    gc.collect()
    res["corpus_s"] = time.perf_counter() - t
    print(f"corpus of {args.memories:,} built in {res['corpus_s']:.0f} s", flush=True)

    embedder = CorpusEmbedder(model, table, vectors)
    batching = BatchingEmbedder(embedder, max_batch=32, max_wait_ms=2.0, query_cache_size=1024)
    timeline: list[dict[str, Any]] = []
    async with running_server(
        data_dir,
        embedder=batching,
        max_batch_items=args.batch,
        hnsw_background=args.hnsw_background,
        edge_segments=args.edge_segments,
    ) as srv:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--client", srv.address, "--corpus", str(corpus_file),
            "--batch", str(args.batch), "--concurrency", str(args.concurrency), "--window", str(args.window),
            "--stop-after-minutes", str(args.stop_after_minutes), "--resume-from", str(args.resume_from),
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert proc.stdout is not None
        last = {"done": args.resume_from, "seconds": 0.0}
        final: dict[str, Any] = {}
        while line := await proc.stdout.readline():
            row = json.loads(line)
            if row.get("final"):
                final = row
                if row["done"] == last["done"]:
                    continue
            row["rate"] = (row["done"] - last["done"]) / max(1e-9, row["seconds"] - last["seconds"])
            parts = rss_parts()
            row["server_rss_gb"] = parts["VmRSS"] / 1e9
            row["server_rss_anon_gb"] = parts["RssAnon"] / 1e9
            row["server_rss_file_gb"] = parts["RssFile"] / 1e9
            timeline.append(row)
            last = row
            print(
                f"  {row['done']:>9,} sent  {row['created']:>9,} created  {row['duplicates']:>6,} refused  "
                f"{row['seconds']:>7.0f} s  {row['rate']:>6.0f} memories/s",
                flush=True,
            )
        if await proc.wait() != 0:
            raise SystemExit(f"client process failed ({proc.returncode})")
        t = time.perf_counter()
        await srv.store.wait_optimized()  # type: ignore[attr-defined]
        res["index_wait_after_ingest_s"] = time.perf_counter() - t
        res["collection_points"] = await srv.store.count(COLLECTION, StoreFilter())
    res.update(
        sent=final["done"] - args.resume_from,
        created=final["created"],
        refused=final["duplicates"],
        ingest_s=final["seconds"],
        rate=(final["done"] - args.resume_from) / final["seconds"],
        looked_up=embedder.looked_up,
        model_embedded=embedder.embedded,
        timeline=timeline,
    )
    return res


# ----------------------------------------------------------------------------- phase 2


async def serve_and_measure(args: argparse.Namespace, data_dir: Path, memories: int) -> dict[str, Any]:
    from engram_client import AddOutcome, AsyncEngramClient, MemoryFilter  # noqa: PLC0415

    res: dict[str, Any] = {}
    port = args.port
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env.update(ENGRAM_DATA_DIR=str(data_dir), ENGRAM_PORT=str(port), ENGRAM_HOST="127.0.0.1")
    if args.edge_segments:  # serve the data as it was built (else the optimizer merges segments first)
        env["ENGRAM_EDGE_SEGMENTS"] = str(args.edge_segments)
    exe = Path(sys.executable).with_name("engram")
    t = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(str(exe), "serve", env=env, stderr=asyncio.subprocess.PIPE)
    warm = asyncio.Event()

    async def follow_log() -> None:  # forward the server's log; note when its ranking fields are loaded
        assert proc.stderr is not None
        while line := await proc.stderr.readline():
            sys.stderr.write(line.decode(errors="replace"))
            if b"ranking fields of collection" in line:
                warm.set()

    follower = asyncio.create_task(follow_log())
    try:
        address = f"127.0.0.1:{port}"
        channel = grpc.aio.insecure_channel(address)
        health = health_pb2_grpc.HealthStub(channel)
        while True:
            if proc.returncode is not None:
                raise SystemExit(f"engram serve exited with {proc.returncode}")
            try:
                r = await health.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    break
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.5)
        res["start_s"] = time.perf_counter() - t
        # The server loads every memory's ranking fields in the background after start-up;
        # searches are measured once that is done (it is reported).
        await asyncio.wait_for(warm.wait(), timeout=1800)
        res["ranking_fields_loaded_s"] = time.perf_counter() - t
        await asyncio.sleep(2.0)
        res["rss_idle_gb"] = rss_of(proc.pid) / 1e9
        res["rss_idle_parts_gb"] = {k: v / 1e9 for k, v in rss_parts(proc.pid).items()}
        print(f"engram serve ready in {res['start_s']:.0f} s, RSS {res['rss_idle_gb']:.2f} GB", flush=True)
        rng = random.Random(7)
        nonce = uuid.uuid4().hex[:8]  # new notes each run, even on a data directory served before
        res["after_write_adds"] = {}
        samples: dict[str, list[float]] = {}
        async with AsyncEngramClient(address, timeout=120) as engram:
            repeat = query_text(rng, 0)
            await engram.search(repeat, limit=10)
            for j in range(3):  # warm-up
                await engram.search(query_text(rng, 10_000 + j), limit=10)
            # Asked once now: embeddings cached (4,096 kept); filtered, so no nearest list is kept,
            # and the candidate lists are pushed out of the 256-entry cache by the later ones.
            known = [query_text(rng, 40_000 + j) for j in range(args.samples + KNOWN_PUSHED_OUT)]
            for q in known:
                await engram.search(q, limit=10, filter=MemoryFilter(min_importance=1))

            async def timed(name: str, coro: Any) -> None:
                t0 = time.perf_counter()
                await coro
                samples.setdefault(name, []).append((time.perf_counter() - t0) * 1000)

            for j in range(args.samples):
                steps = ["unique", "repeat", "after_write", "known", "health"]
                rng.shuffle(steps)
                for step in steps:
                    if step == "unique":
                        await timed("search_unique", engram.search(query_text(rng, 20_000 + j), limit=10))
                    elif step == "repeat":
                        await engram.search(repeat, limit=10)  # (cached from here on)
                        await timed("search_repeat", engram.search(repeat, limit=10))
                    elif step == "after_write":
                        for attempt in range(10):
                            note = query_text(rng, 30_000 + j + 7_919 * attempt)  # (another text per retry)
                            added = await engram.add(
                                f"Bench note {nonce}-{j}-{attempt}: {note}",
                                collection=COLLECTION,
                            )
                            name = added.outcome.name
                            res["after_write_adds"][name] = res["after_write_adds"].get(name, 0) + 1
                            if added.outcome is AddOutcome.CREATED:
                                break
                        else:
                            raise SystemExit(
                                "no note was CREATED: the after-write search would not be storage-bound"
                            )
                        await timed("search_after_write", engram.search(repeat, limit=10))
                    elif step == "known":
                        await timed("search_known", engram.search(known[j], limit=10))
                    else:
                        await timed("health", health.Check(health_pb2.HealthCheckRequest()))
        res["latency"] = {k: summary(v) for k, v in samples.items()}
        res["rss_after_gb"] = rss_of(proc.pid) / 1e9
        await channel.close()
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), timeout=120)
        await follower
    disk = dir_bytes(data_dir)
    res["disk_bytes_per_memory"] = disk["allocated"] / max(1, memories)
    return res


# ----------------------------------------------------------------------------- main


def report(res: dict[str, Any]) -> str:
    ing, srv = res["ingest"], res["serve"]
    segments = res["args"].get("edge_segments", "0")
    reached = int(res["args"].get("resume_from", "0")) + ing["sent"]
    lines = [
        f"## {ing.get('collection_points', ing['created']):,} memories through AddMemories "
        f"(batch {res['args']['batch']}, "
        f"{res['args']['concurrency']} callers"
        + (f", ENGRAM_EDGE_SEGMENTS={segments}" if segments != "0" else "")
        + ")",
        "",
        (
            f"- **stopped after {res['args']['stop_after_minutes']} min** (`--stop-after-minutes`): "
            f"{reached:,} of the {int(res['args']['memories']):,} memories were sent"
            if reached < int(res["args"]["memories"])
            else "- all memories were sent"
        ),
        (
            f"- **resumed** (`--resume-from {res['args']['resume_from']}`): this run sent the corpus from "
            f"memory {int(res['args']['resume_from']):,} on, into the collection an earlier run had filled; "
            f"the collection holds {ing.get('collection_points', 0):,} memories at the end"
            if res["args"].get("resume_from", "0") != "0"
            else ""
        ),
        f"- sent {ing['sent']:,}, created {ing['created']:,}, refused as near-copies {ing['refused']:,}; "
        f"{ing['ingest_s'] / 60:.1f} min = {ing['rate']:.0f} memories/s overall; index wait after the "
        f"last call {ing['index_wait_after_ingest_s']:.0f} s; vectors looked up {ing['looked_up']:,}, "
        f"embedded by the model {ing['model_embedded']:,}",
        "",
        "| memories sent | memories/s in the window | server RSS (GB, incl. the corpus table) "
        "| of which anonymous | of which mapped files |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['done']:,} | {r['rate']:.0f} | {r['server_rss_gb']:.2f} | "
        f"{r.get('server_rss_anon_gb', float('nan')):.2f} | {r.get('server_rss_file_gb', float('nan')):.2f} |"
        for r in ing["timeline"]
    ]
    lines += [
        "",
        f"`engram serve` on the result (default stack): ready in {srv['start_s']:.0f} s, ranking fields "
        f"loaded in the background after {srv.get('ranking_fields_loaded_s', float('nan')):.0f} s; RSS idle "
        f"{srv['rss_idle_gb']:.2f} GB ({_parts(srv.get('rss_idle_parts_gb'))}), after the samples "
        f"{srv['rss_after_gb']:.2f} GB; disk "
        f"{srv['disk_bytes_per_memory']:.0f} B/memory",
        "",
        "| call | n | p50 ms | p95 ms | p99 ms |",
        "|---|---|---|---|---|",
    ]
    for name, s in srv["latency"].items():
        lines.append(f"| {name} | {s['n']} | {s['p50_ms']:.2f} | {s['p95_ms']:.2f} | {s['p99_ms']:.2f} |")
    adds = srv.get("after_write_adds", {})
    lines += [
        "",
        "AddMemory outcomes before the after-write searches: "
        + (", ".join(f"{k} {v}" for k, v in adds.items()) or "none"),
    ]
    return "\n".join(lines)


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--memories", type=int, default=1_000_000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--window", type=int, default=50_000)
    p.add_argument("--base-texts", type=int, default=2000)
    p.add_argument("--samples", type=int, default=60)
    p.add_argument(
        "--hnsw-background",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="ENGRAM_HNSW_BACKGROUND during the import (default on: else the gate queries brute force)",
    )
    p.add_argument(
        "--edge-segments",
        type=int,
        default=0,
        help="ENGRAM_EDGE_SEGMENTS for the import and the server (default 0: the engine's choice)",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--stop-after-minutes",
        type=float,
        default=math.inf,
        help="stop sending after this long and measure what was ingested (reported as such)",
    )
    p.add_argument("--port", type=int, default=50091)
    p.add_argument("--keep", type=Path, help="keep the data directory here (else a temp dir)")
    p.add_argument("--skip-ingest", action="store_true", help="phase 2 only, on --keep")
    p.add_argument(
        "--serve-only",
        type=Path,
        metavar="DATA_DIR",
        help="phase 2 only, on any Engram data directory (e.g. one kept by bench/stages.py --keep); "
        "prints its figures as JSON",
    )
    p.add_argument(
        "--resume-from",
        type=int,
        default=0,
        help="continue an interrupted import on --keep: send the corpus from this memory on (a multiple "
        "of --batch; memories sent twice are refused by the gate as exact copies and counted as such)",
    )
    p.add_argument("--json", type=Path)
    p.add_argument("--md", type=Path)
    p.add_argument("--client", help=argparse.SUPPRESS)
    p.add_argument("--corpus", help=argparse.SUPPRESS)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("engram_server.adapters.storage.edge").setLevel(logging.INFO)  # index builds
    if args.client:
        await client_main(args)
        return
    if args.serve_only:
        from engram_server.adapters.storage.edge import EdgeStore  # noqa: PLC0415

        store = EdgeStore(args.serve_only)  # the server's defaults: counts the points
        await store.open()
        try:
            points = await store.count(COLLECTION, StoreFilter())
        finally:
            await store.close()
        served = await serve_and_measure(args, args.serve_only, points)
        print(json.dumps(served, indent=1))
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(served, indent=1))
        return
    work = args.keep or Path(tempfile.mkdtemp(prefix="engram-million-"))
    work.mkdir(parents=True, exist_ok=True)
    data_dir = work / "data"
    res: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    res["args"]["batch"], res["args"]["concurrency"] = args.batch, args.concurrency
    try:
        if args.skip_ingest:
            res["ingest"] = json.loads((work / "ingest.json").read_text())
        else:
            if args.resume_from:
                if not data_dir.exists():
                    raise SystemExit(f"--resume-from needs the earlier run's data under {data_dir}")
            elif data_dir.exists():
                shutil.rmtree(data_dir)
            res["ingest"] = await ingest(args, data_dir, work)
            (work / "ingest.json").write_text(json.dumps(res["ingest"], indent=1))
        gc.collect()
        points = res["ingest"].get("collection_points", res["ingest"]["created"])
        res["serve"] = await serve_and_measure(args, data_dir, int(points))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    md = report(res)
    print("\n" + md)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=1))
    if args.md:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(md + "\n")


if __name__ == "__main__":
    asyncio.run(main())
