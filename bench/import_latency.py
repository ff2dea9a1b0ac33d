"""Search latency while an import runs, against one or more running servers (side by side).

    .venv/bin/python bench/import_latency.py --address HOST:PORT [--address HOST:PORT …]
        [--importers 1,2] [--batch 64] [--seconds 20] [--rounds 2] [--pause 0.2]

For each number of importers, each server in turn (alternated A B B A … per round, since this
machine's speed drifts), for ``--seconds``: ``importers`` callers send AddMemories of ``--batch``
new memories in a loop while one caller asks a new question (SearchMemories, limit 10), waits for
the answer, pauses ``--pause`` seconds and asks again. Then once more without the questions (the
import's own rate). Reported per server: the import's memories per second (each run) and the
searches' p50 / p95 / max. Every memory and question is new (random words), so every call embeds.
The servers' collections grow by what is imported: give each a copy of the same corpus.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import string
import time

from engram_client import AsyncEngramClient


def _words(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(n))


def _memory(rng: random.Random) -> str:
    return (
        f"imported note {_words(rng, 10)} about {_words(rng, 7)} and {_words(rng, 8)} "
        f"on day {rng.randint(1, 999)} with {_words(rng, 6)}"
    )


async def one_run(
    address: str, args: argparse.Namespace, importers: int, searching: bool, rng: random.Random
) -> tuple[float, list[float]]:
    """(memories imported per second, search latencies in ms) of one run against ``address``."""
    async with AsyncEngramClient(address, timeout=300) as client:
        stop = time.perf_counter() + args.seconds
        imported = 0
        latencies: list[float] = []

        async def importer() -> None:
            nonlocal imported
            while time.perf_counter() < stop:
                await client.add_many([_memory(rng) for _ in range(args.batch)])
                imported += args.batch

        async def searcher() -> None:
            await asyncio.sleep(0.5)  # (the import under way)
            while time.perf_counter() < stop:
                start = time.perf_counter()
                await client.search(
                    f"what did {_words(rng, 6)} write about {_words(rng, 5)} {rng.randint(1, 10**6)}",
                    limit=10,
                )
                latencies.append((time.perf_counter() - start) * 1e3)
                await asyncio.sleep(args.pause)

        began = time.perf_counter()
        await asyncio.gather(*(importer() for _ in range(importers)), *([searcher()] if searching else []))
        return imported / (time.perf_counter() - began), latencies


def _order(n: int, rounds: int) -> list[int]:
    """Server indices alternated: 0 1 … n-1 n-1 … 0, per round."""
    forth = list(range(n))
    return [i for _ in range(rounds) for i in forth + forth[::-1]]


async def run(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    names = [chr(ord("A") + i) for i in range(len(args.address))]
    for importers in args.importers:
        for searching in (True, False):
            how = f", a question every {args.pause:.1f} s" if searching else ", alone"
            label = f"{importers} importer(s){how}"
            rates: dict[int, list[float]] = {i: [] for i in range(len(args.address))}
            lat: dict[int, list[float]] = {i: [] for i in range(len(args.address))}
            for i in _order(len(args.address), args.rounds):
                rate, got = await one_run(args.address[i], args, importers, searching, rng)
                rates[i].append(rate)
                lat[i].extend(got)
                print(f"  {label} {names[i]}: {rate:.1f} memories/s, {len(got)} searches", flush=True)
            print(f"== {label}")
            for i, address in enumerate(args.address):
                line = f"  {names[i]} {address}: import {statistics.mean(rates[i]):.1f} memories/s ("
                line += ", ".join(f"{r:.1f}" for r in rates[i]) + ")"
                if lat[i]:
                    ordered = sorted(lat[i])
                    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
                    line += (
                        f"; search p50 {statistics.median(ordered):.0f} ms, p95 {p95:.0f} ms,"
                        f" max {ordered[-1]:.0f} ms (n = {len(ordered)})"
                    )
                print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--address", action="append", required=True, help="a server, HOST:PORT (repeat)")
    parser.add_argument(
        "--importers",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1, 2],
        help="numbers of importers to run (comma-separated; default 1,2)",
    )
    parser.add_argument("--batch", type=int, default=64, help="memories per AddMemories call (64)")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of one run (20)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the alternation (2)")
    parser.add_argument("--pause", type=float, default=0.2, help="seconds between questions (0.2)")
    parser.add_argument("--seed", type=int, default=11)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
