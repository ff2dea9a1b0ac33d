"""What the query-time rescoring of the best candidates costs per search, side by side.

Two servers in one process, the same memories and the same embedder (texts embedded once, shared):
one with the defaults (``ENGRAM_RESCORE_DEPTH`` = 50), one with it off (0). Every round asks both
the same new question (a unique query: no candidate cache) in a shuffled order, so both share the
machine's noise; the report gives each one's median and mean SearchMemories latency (limit 10,
through a real gRPC channel) and their ratio.

    .venv/bin/python bench/rescore_cost.py [--memories 600] [--queries 120]

The memories are synthetic chat turns (``"Name: …"``, a quarter of them questions) from templates.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path

from engram_client import AsyncEngramClient
from eval.locomo import MemoEmbedder

NAMES = ["Ava", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hugo"]
THINGS = ["guitar", "garden", "marathon", "novel", "bakery", "kayak", "exam", "puppy", "concert", "trip"]
PLACES = ["Lisbon", "Oslo", "Kyoto", "Denver", "Nairobi", "Lima"]
STATEMENTS = [
    "I finally finished the {t} project I told you about in {p}.",
    "Last week I started learning about the {t}, it is harder than I thought.",
    "We spent the weekend in {p} and talked about the {t} the whole time.",
    "My sister helped me with the {t}; we want to show it in {p} next month.",
]
QUESTIONS = ["How is the {t} going?", "Did you ever go back to {p}?", "What made you pick the {t}?"]


def corpus(n: int, rng: random.Random) -> list[str]:
    out = []
    for i in range(n):
        name, t, p = rng.choice(NAMES), rng.choice(THINGS), rng.choice(PLACES)
        tpl = rng.choice(QUESTIONS) if i % 4 == 0 else rng.choice(STATEMENTS)
        out.append(f"{name}: {tpl.format(t=t, p=p)} ({i})")
    return out


async def main(n_memories: int, n_queries: int) -> None:
    from engram_server.app import build_embedder  # noqa: PLC0415
    from engram_server.config import Settings  # noqa: PLC0415
    from engram_server.testing import running_server  # noqa: PLC0415

    rng = random.Random(7)
    texts = corpus(n_memories, rng)
    queries = [
        f"What did {rng.choice(NAMES)} say about the {rng.choice(THINGS)} in {rng.choice(PLACES)} ({i})?"
        for i in range(n_queries)
    ]
    embedder = MemoEmbedder(build_embedder(Settings()))
    await embedder.embed_documents(texts)
    await embedder.embed_queries(queries)
    times: dict[str, list[float]] = {"rescore 50 (default)": [], "rescore off": []}
    with tempfile.TemporaryDirectory(prefix="engram-rescore-") as tmp:
        async with (
            running_server(Path(tmp) / "on", embedder=embedder) as on,
            running_server(Path(tmp) / "off", embedder=embedder, rescore_depth=0) as off,
            AsyncEngramClient(on.address, timeout=60) as c_on,
            AsyncEngramClient(off.address, timeout=60) as c_off,
        ):
            for client in (c_on, c_off):
                for text in texts:
                    await client.add(text, type="insight", allow_duplicate=True)
            pairs = [("rescore 50 (default)", c_on), ("rescore off", c_off)]
            for q in queries:
                rng.shuffle(pairs)
                for label, client in pairs:
                    t0 = time.perf_counter()
                    await client.search(q, limit=10)
                    times[label].append((time.perf_counter() - t0) * 1000)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{n_memories} memories, {n_queries} unique queries each, SearchMemories limit 10")
    for k, v in times.items():
        print(f"  {k:22s} median {med[k]:7.2f} ms   mean {statistics.fmean(v):7.2f} ms")
    print(f"  ratio (median, on / off): {med['rescore 50 (default)'] / med['rescore off']:.2f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--memories", type=int, default=600)
    ap.add_argument("--queries", type=int, default=120)
    a = ap.parse_args()
    asyncio.run(main(a.memories, a.queries))
