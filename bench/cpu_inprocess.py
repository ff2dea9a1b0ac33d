"""Engram's CPU per search in one process, by the process's CPU clock: less sensitive to a loaded
machine than ``bench/cpu.py``'s requests/s at c = 32 (a process's CPU time does not count the
time it waits for a core).

    .venv/bin/python bench/cpu_inprocess.py --data results/bench/corpus/data-100000
    .venv/bin/python bench/cpu_inprocess.py --data … --baseline /tmp/base   # before/after, alternating

A server runs in this process (``engram_server.testing.running_server`` on a copy of the data,
candidate/record caches and nearest lists off, the reranker off, as ``bench/cpu.py`` runs it),
every query is searched once first (the query cache: the model costs nothing after), then per
round: ``--searches`` calls of ``service.search`` one at a time (the domain and the store, the
engine's work included), and as many SearchMemories calls through a real gRPC channel from this
process (client and server CPU together). ``--baseline DIR`` (another revision's source tree)
runs the same in a subprocess on that tree, rounds alternating with this checkout's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stages import query_text

ROOT = Path(__file__).resolve().parent.parent


async def measure(data: Path, searches: int, queries: int) -> dict[str, float]:
    from engram_client.proto.engram.v1 import memory_service_pb2 as s  # noqa: PLC0415
    from engram_client.proto.engram.v1 import memory_service_pb2_grpc  # noqa: PLC0415
    from engram_server.domain.service import SearchQuery  # noqa: PLC0415
    from engram_server.testing import running_server  # noqa: PLC0415

    rng = random.Random(11)
    texts = [query_text(rng, 7_000_000 + i) for i in range(queries)]
    tmp = Path(tempfile.mkdtemp(prefix="engram-cpu-inprocess-"))
    try:
        shutil.copytree(data, tmp / "data")
        async with running_server(tmp / "data", search_cache_entries=0, nearest_lists=0, rerank="off") as srv:
            svc = srv.service
            for t in texts:
                await svc.search(SearchQuery(query=t, limit=10))
            c0 = time.process_time()
            for i in range(searches):
                await svc.search(SearchQuery(query=texts[i % queries], limit=10))
            search_ms = 1000 * (time.process_time() - c0) / searches
            async with grpc.aio.insecure_channel(srv.address) as ch:
                stub = memory_service_pb2_grpc.MemoryServiceStub(ch)
                for t in texts[:20]:
                    await stub.SearchMemories(s.SearchMemoriesRequest(query=t, limit=10))
                c0 = time.process_time()
                for i in range(searches):
                    await stub.SearchMemories(s.SearchMemoriesRequest(query=texts[i % queries], limit=10))
                grpc_ms = 1000 * (time.process_time() - c0) / searches
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"search_ms": search_ms, "grpc_ms": grpc_ms}


def run_tree(tree: Path, args: argparse.Namespace) -> dict[str, float]:
    """One round on another source tree, in a subprocess with that tree first on the path."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")])),
    }
    cmd = [sys.executable, str(Path(__file__).resolve()), "--data", str(args.data.resolve()), "--one"]
    cmd += ["--searches", str(args.searches), "--queries", str(args.queries)]
    out = subprocess.run(cmd, cwd=tree, env=env, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--searches", type=int, default=400)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--baseline", type=Path, help="another revision's source tree, measured alternately")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(asyncio.run(measure(args.data, args.searches, args.queries))))
        return
    trees = ([("baseline", args.baseline.resolve())] if args.baseline else []) + [("this", ROOT)]
    got: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
    for r in range(args.rounds):
        for name, tree in trees:
            res = run_tree(tree, args)
            got[name].append(res)
            print(
                f"round {r} {name}: service.search {res['search_ms']:.3f} ms CPU, SearchMemories "
                f"(client + server) {res['grpc_ms']:.3f} ms CPU; load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    print("\n| CPU per search (median of rounds; range) | " + " | ".join(n for n, _ in trees) + " |")
    print("|---|" + "---|" * len(trees))
    for key, label in (("search_ms", "service.search"), ("grpc_ms", "SearchMemories, client + server")):
        cells = []
        for name, _ in trees:
            xs = [x[key] for x in got[name]]
            cells.append(f"{statistics.median(xs):.2f} ms ({min(xs):.2f}–{max(xs):.2f})")
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
