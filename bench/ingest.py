"""Ingest throughput: single AddMemory calls vs AddMemories batches vs the embedding model alone.

    .venv/bin/python bench/ingest.py                      # defaults: ~1–2 minutes on 2 cores
    .venv/bin/python bench/ingest.py --memories 384 --batch-sizes 32,64,128 --rounds 2

Starts one in-process server on the embedded defaults (qdrant-edge in a temp dir, the local model,
the default micro-batcher) and, side by side in the same run, measures memories per second for:
  - AddMemory, one memory per call, at each --concurrency (the typed async client, which sends a
    request_id with every add, as an application would);
  - AddMemories, --batch-sizes memories per call, one call at a time (the client's add_many, a
    request_id per memory);
  - the embedding model itself: embed_documents on batches of 1 and of each batch size, called
    directly on the model (no micro-batcher, no gRPC, no storage): the ceiling for ingestion.
Every measurement writes --memories fresh synthetic memories into its own empty collection; each
service path runs right after the model measurement it is compared with. Prints a Markdown table:
the median rate over --rounds, and the median per-round ratio to the model's rate at the same batch
size (single calls: batch 1) and to the model's best batch size. The machine may be shared: read
the ratios, which compare measurements taken moments apart, rather than the absolute rates.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from latency import synth  # bench/latency.py: the same synthetic memories (run from bench/)

from engram_client import AddOutcome, AsyncEngramClient, NewMemory
from engram_server.testing import running_server


@dataclass
class Row:
    name: str
    batch: int  # texts per model call this row is compared with
    rates: list[float] = field(default_factory=list)
    created: int = 0
    duplicates: int = 0

    @property
    def rate(self) -> float:
        return statistics.median(self.rates)


async def embed(model: Any, texts: list[str], size: int) -> None:
    for i in range(0, len(texts), size):
        await model.embed_documents(texts[i : i + size])


async def singles(
    engram: AsyncEngramClient, texts: list[str], collection: str, concurrency: int, row: Row
) -> None:
    queue = list(texts)

    async def worker() -> None:
        while queue:
            added = await engram.add(queue.pop(), collection=collection)
            row.created += added.outcome is AddOutcome.CREATED
            row.duplicates += added.outcome is AddOutcome.DUPLICATE

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def batches(engram: AsyncEngramClient, texts: list[str], collection: str, size: int, row: Row) -> None:
    for i in range(0, len(texts), size):
        for added in await engram.add_many(
            [NewMemory(t) for t in texts[i : i + size]], collection=collection
        ):
            row.created += added.outcome is AddOutcome.CREATED
            row.duplicates += added.outcome is AddOutcome.DUPLICATE


async def per_second(count: int, work: Awaitable[None]) -> float:
    start = time.perf_counter()
    await work
    return count / (time.perf_counter() - start)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memories", type=int, default=128, help="memories per measurement (default 128)")
    ap.add_argument("--batch-sizes", default="32,64", help="AddMemories / model batch sizes (default 32,64)")
    ap.add_argument("--concurrency", default="1,8", help="concurrent AddMemory calls (default 1,8)")
    ap.add_argument("--rounds", type=int, default=2, help="repeat every measurement; medians are shown")
    ap.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = ap.parse_args()
    sizes = [int(x) for x in args.batch_sizes.split(",") if x]
    concurrency = [int(x) for x in args.concurrency.split(",") if x]
    n = args.memories
    rng = random.Random(11)
    counter = iter(range(10**9))

    def texts(k: int) -> list[str]:
        return [synth(rng, next(counter)) for _ in range(k)]

    rows: dict[str, Row] = {}
    for b in [1, *sizes]:
        rows[f"model batch {b}"] = Row(f"model: embed_documents, batches of {b}", b)
    for c in concurrency:
        rows[f"single c{c}"] = Row(f"AddMemory, 1 per call, concurrency {c}", 1)
    for b in sizes:
        rows[f"batch {b}"] = Row(f"AddMemories, {b} per call", b)

    with tempfile.TemporaryDirectory() as tmp:
        # The default server, except that it accepts the largest batch asked for.
        async with running_server(Path(tmp), max_batch_items=max([64, *sizes])) as srv:
            model = getattr(srv.embedder, "inner", srv.embedder)  # past the micro-batcher
            async with AsyncEngramClient(srv.address, timeout=300) as engram:
                await engram.add("warm-up", collection="warmup")
                await model.embed_documents(texts(8))
                for r in range(args.rounds):
                    # Each service path runs right after the model at its batch size, so a ratio
                    # compares two measurements taken under the same load (the machine is shared).
                    for b in [1, *sizes]:
                        k = max(b, n // 4) if b == 1 else n  # batch 1 is slow: a quarter says enough
                        rows[f"model batch {b}"].rates.append(await per_second(k, embed(model, texts(k), b)))
                        if b == 1:
                            for c in concurrency:
                                row = rows[f"single c{c}"]
                                work = singles(engram, texts(n), f"single-c{c}-r{r}", c, row)
                                row.rates.append(await per_second(n, work))
                        else:
                            row = rows[f"batch {b}"]
                            work = batches(engram, texts(n), f"batch-{b}-r{r}", b, row)
                            row.rates.append(await per_second(n, work))

    models = [rows[f"model batch {b}"] for b in [1, *sizes]]
    best_model = max(models, key=lambda m: m.rate)

    def ratio(row: Row, model: Row) -> float:
        """Median over rounds of (this round's rate / the model's rate in the same round)."""
        return statistics.median(a / b for a, b in zip(row.rates, model.rates, strict=True))

    print(
        f"\n{n} memories per measurement, median of {args.rounds} round(s), embedded defaults, one server\n"
    )
    print("| path | memories/s | ÷ model, same batch size | ÷ model, best batch | created / gate-refused |")
    print("|---|---|---|---|---|")
    out: dict[str, Any] = {"memories": n, "rounds": args.rounds, "rows": {}}
    for key, row in rows.items():
        same = ratio(row, rows[f"model batch {row.batch}"])
        outcome = "" if key.startswith("model") else f"{row.created} / {row.duplicates}"
        print(f"| {row.name} | {row.rate:.1f} | {same:.2f} | {ratio(row, best_model):.2f} | {outcome} |")
        out["rows"][key] = {
            "per_second": row.rate,
            "rounds": row.rates,
            "ratio_same_batch": same,
            "ratio_best_model": ratio(row, best_model),
            "created": row.created,
            "duplicates": row.duplicates,
        }
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
