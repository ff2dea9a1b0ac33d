"""A/B: two versions of the server side by side on identical data, requests alternated.

    git worktree add /tmp/engram-a main              # the baseline checkout
    .venv/bin/python bench/ab.py --a /tmp/engram-a --data DATA_DIR [--b .] [--rounds 100]

This machine's speed drifts by tens of percent within minutes, so two runs made one after the other
cannot tell a 5 % change from noise. Here both servers run at once, each on its own copy of
``--data`` (an Engram data directory, e.g. one kept by ``bench/stages.py --keep``), and every round
sends the same request to both in random order: searches after 100 ms idle, and the third of three
back to back. By default the search result caches are off (``ENGRAM_SEARCH_CACHE_ENTRIES=0``), so
every search queries storage while its query embedding is cached (the storage-bound path);
``--cache`` keeps the defaults. Prints p50 per side and B / A.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
QUERIES = [
    "what did Alice say about the quarterly report in Berlin",
    "who likes hiking in the mountains",
    "when is the dentist appointment",
    "favourite programming language of the team",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(code: Path, data: Path, port: int, *, cache: bool) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(code), "ENGRAM_DATA_DIR": str(data), "ENGRAM_PORT": str(port)}
    if not cache:
        env["ENGRAM_SEARCH_CACHE_ENTRIES"] = "0"
    return subprocess.Popen(
        [sys.executable, "-m", "engram_server", "serve"],
        env=env,
        cwd=code,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", type=Path, required=True, help="checkout of version A (the baseline)")
    ap.add_argument("--b", type=Path, default=ROOT, help="checkout of version B (default: this one)")
    ap.add_argument("--data", type=Path, required=True, help="an Engram data directory (copied twice)")
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--warm-seconds", type=float, default=15.0, help="wait after start-up (ranking fields)")
    ap.add_argument("--cache", action="store_true", help="keep the search result caches on")
    args = ap.parse_args()
    for side in (args.a, args.b):
        if not (side / "engram_server").is_dir():
            sys.exit(f"{side} is not an Engram checkout (no engram_server/)")
    if not (args.data / "collections").is_dir():
        sys.exit(f"{args.data} is not an Engram data directory (no collections/)")

    with tempfile.TemporaryDirectory(prefix="engram-ab-") as tmp:
        sides = {}
        for name, code in (("A", args.a), ("B", args.b)):
            data = Path(tmp) / name
            shutil.copytree(args.data, data)
            sides[name] = (code.resolve(), data, free_port())
        procs = [start(code, data, port, cache=args.cache) for code, data, port in sides.values()]
        try:
            stubs = {}
            for name, (_, _, port) in sides.items():
                channel = grpc.insecure_channel(f"127.0.0.1:{port}")
                grpc.channel_ready_future(channel).result(timeout=300)
                stubs[name] = memory_service_pb2_grpc.MemoryServiceStub(channel)
            time.sleep(args.warm_seconds)
            for stub in stubs.values():
                for q in QUERIES * 3:  # query embeddings cached
                    stub.SearchMemories(s.SearchMemoriesRequest(query=q, limit=10))
            samples: dict[tuple[str, str], list[float]] = {(n, m): [] for n in stubs for m in ("idle", "b2b")}
            rng = random.Random(1)
            for i in range(args.rounds):
                req = s.SearchMemoriesRequest(query=QUERIES[i % len(QUERIES)], limit=10)
                for name in rng.sample(sorted(stubs), 2):
                    stub = stubs[name]
                    time.sleep(0.1)
                    t = time.perf_counter()
                    stub.SearchMemories(req)
                    samples[(name, "idle")].append(time.perf_counter() - t)
                    for _ in range(2):
                        stub.SearchMemories(req)
                    t = time.perf_counter()
                    stub.SearchMemories(req)
                    samples[(name, "b2b")].append(time.perf_counter() - t)
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=60)
    caches = "on" if args.cache else "off (every search queries storage)"
    print(f"A = {args.a}, B = {args.b}; {args.rounds} rounds; search result caches {caches}")
    for mode, label in (("idle", "after 100 ms idle"), ("b2b", "third of three back to back")):
        a = statistics.median(samples[("A", mode)]) * 1000
        b = statistics.median(samples[("B", mode)]) * 1000
        print(f"  {label:28s} A p50 {a:6.2f} ms   B p50 {b:6.2f} ms   B / A {b / a:.3f}")


if __name__ == "__main__":
    main()
