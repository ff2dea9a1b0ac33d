"""GetContext p50 at N memories: the context pack an agent loads at every session start.

    .venv/bin/python bench/context.py --memories 10000 --samples 50
    .venv/bin/python bench/context.py --memories 10000,100000 --samples 50 --json results/bench/context.json

For each size N the corpus of ``bench/stages.py`` is written straight into a fresh data dir (its
synthetic texts and vectors: ~2,000 template sentences embedded once with the real local model,
every memory a noisy mixture of three of them; mixed types and importance, ~25 % identity and
directive memories), plus what the pack reads: events in sessions of 20 (``session_id`` s<k>,
``agent_id`` one of four agents), 1 % of memories tagged ``trigger:<action>`` (12 actions, some
with a parent) and 1 % tagged ``pending``. Five slots are filled through UpdateSlot.

Then, over a real gRPC channel, one call at a time, in a shuffled order per round:

- ``pack``: GetContext, no task (core, triggers, open items, recent since the agent's last session);
- ``pack+task``: GetContext with a unique task (adds the relevant section: one query embedding
  and a search, as SearchMemories);
- ``search``: SearchMemories with a unique query, limit 10 (the reference point: the per-call cost
  the pack is compared with);
- ``triggers``: GetTriggers of one of the actions.

Each GetContext is checked: ``tokens_used <= token_budget`` (2,000) and ``tokens_used`` equal to
the tokenizer's count of the Markdown (budget adherence is reported as the worst ratio seen).
Ratios to ``search`` p50 are the figures to compare across machines: the machine is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.stages import (
    COLLECTION,
    make_bases,
    make_records,
    mix_vectors,
    query_text,
)
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.adapters.embedding.local import LOCAL_DIMENSION, LOCAL_VARIANTS, LocalE5Embedder
from engram_server.adapters.lexical import LEXICAL_ENCODER_ID, Bm25Encoder
from engram_server.adapters.storage.edge import EdgeStore
from engram_server.adapters.tokenizer import E5Tokenizer
from engram_server.domain.model import CollectionSpec, MemoryRecord, MemoryType, StoredPoint
from engram_server.domain.ttl import DAY
from engram_server.testing import running_server

ACTIONS = ["deploy", "deploy/prod", "deploy/staging", "git-push", "db-migration", "release", "rollback",
           "send-email", "delete-data", "rotate-keys", "book-travel", "pay-invoice"]  # fmt: skip
AGENTS = ["ada", "bob", "cyd", "dee"]
BUDGET = 2000


def session_records(records: list[MemoryRecord], rng: random.Random) -> list[MemoryRecord]:
    out = []
    for i, r in enumerate(records):
        tags = list(r.tags)
        roll = rng.random()
        if roll < 0.01:
            tags.append("trigger:" + rng.choice(ACTIONS))
        elif roll < 0.02:
            tags.append("pending")
        session = f"s{i // 20}" if r.type is MemoryType.EVENT else None
        out.append(
            replace(
                r,
                tags=tuple(sorted(set(tags))),
                session_id=session,
                agent_id=AGENTS[(i // 20) % len(AGENTS)] if session else None,
            )
        )
    return out


async def write(data_dir: Path, n: int, bases: Any, base_vecs: Any, seed: int) -> None:
    rng = random.Random(seed)
    now = time.time()
    vectors, idx = mix_vectors(base_vecs, n, seed)
    records = session_records(make_records(rng, bases, idx, now), rng)
    bm25 = Bm25Encoder()
    store = EdgeStore(data_dir)
    await store.open()
    try:
        spec = CollectionSpec(COLLECTION, LOCAL_VARIANTS["original"], LOCAL_DIMENSION, now - 200 * DAY,
                              lexical=LEXICAL_ENCODER_ID)  # fmt: skip
        await store.create_collection(spec)
        for start in range(0, n, 1000):
            chunk = range(start, min(n, start + 1000))
            await store.upsert(
                COLLECTION,
                [
                    StoredPoint(records[i], vectors[i], bm25.encode_document(records[i].content))
                    for i in chunk
                ],
            )
    finally:
        await store.close()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(n: int, samples: int, bases: Any, base_vecs: Any, seed: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="engram-bench-context-"))
    try:
        t = time.perf_counter()
        await write(root / "data", n, bases, base_vecs, seed)
        write_s = time.perf_counter() - t
        counter = E5Tokenizer()
        async with running_server(root / "data") as srv, grpc.aio.insecure_channel(srv.address) as ch:
            stub = memory_service_pb2_grpc.MemoryServiceStub(ch)
            for slot, text in [
                ("persona", "Terse and precise; cites sources."),
                ("user_preferences", "Prefers metric units and ISO dates."),
                ("project_context", "Project X: a Go service on Kubernetes."),
                ("pending_items", "Finish the quarterly report."),
                ("guidance", "Ask before spending money."),
            ]:
                await stub.UpdateSlot(s.UpdateSlotRequest(name=slot, content=text))
            rng = random.Random(seed + 1)
            times: dict[str, list[float]] = {"pack": [], "pack+task": [], "search": [], "triggers": []}
            worst = 0.0
            tokens: list[int] = []

            async def pack(task: str) -> None:
                nonlocal worst
                agent = rng.choice(AGENTS)
                req = s.GetContextRequest(
                    query=task, session_id=f"bench-{rng.randrange(10**9)}", agent_id=agent
                )
                t0 = time.perf_counter()
                resp = await stub.GetContext(req, timeout=120)
                times["pack+task" if task else "pack"].append((time.perf_counter() - t0) * 1000)
                assert resp.tokens_used <= resp.token_budget == BUDGET, resp.tokens_used
                assert counter.count_now(resp.markdown) == resp.tokens_used
                worst = max(worst, resp.tokens_used / resp.token_budget)
                tokens.append(resp.tokens_used)

            async def search() -> None:
                t0 = time.perf_counter()
                await stub.SearchMemories(
                    s.SearchMemoriesRequest(query=query_text(rng, rng.randrange(10**6)), limit=10)
                )
                times["search"].append((time.perf_counter() - t0) * 1000)

            async def triggers() -> None:
                t0 = time.perf_counter()
                await stub.GetTriggers(s.GetTriggersRequest(action=rng.choice(ACTIONS)))
                times["triggers"].append((time.perf_counter() - t0) * 1000)

            await pack("")  # warm-up (model, caches), not counted
            times["pack"].clear()
            for j in range(samples):
                calls = [
                    lambda: pack(""),
                    lambda j=j: pack(query_text(rng, 10**6 + j)),
                    search,
                    triggers,
                ]
                rng.shuffle(calls)
                for call in calls:
                    await call()
        p50 = {k: statistics.median(v) for k, v in times.items()}
        return {
            "memories": n,
            "samples": samples,
            "write_s": round(write_s, 1),
            "p50_ms": {k: round(v, 1) for k, v in p50.items()},
            "p95_ms": {k: round(pct(v, 0.95), 1) for k, v in times.items()},
            "ratio_to_search_p50": {k: round(v / p50["search"], 2) for k, v in p50.items()},
            "budget": BUDGET,
            "tokens_used_median": statistics.median(tokens),
            "worst_tokens_over_budget": round(worst, 3),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memories", default="10000", help="comma-separated sizes")
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--base-texts", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    bases = make_bases(rng, args.base_texts)
    embedder = LocalE5Embedder()
    try:
        base_vecs = await embedder.embed_documents([b.text for b in bases])
    finally:
        await embedder.close()
    results = []
    for n in (int(x) for x in args.memories.split(",")):
        result = await measure(n, args.samples, bases, base_vecs, args.seed)
        print(json.dumps(result), flush=True)
        results.append(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
