"""Where Engram's own CPU per search goes, by stage, sampled with py-spy in a live server.

    .venv/bin/pip install py-spy          # (not a project dependency)
    .venv/bin/python bench/cpu_stages.py --data results/bench/corpus/data-20000 --seconds 20
    .venv/bin/python bench/cpu_stages.py --data … --tree DIR   # another revision's source tree

The set-up of ``bench/cpu.py`` (a server process on a copy of the data, candidate/record caches
and nearest lists off, every query's embedding in the query cache first), then 32 concurrent
callers search for ``--seconds`` while ``py-spy record --nonblocking --format raw`` samples every
thread of the server. Each sample is given to the first stage (innermost first) whose frame it
holds, and the stages' shares of the samples are printed with the server's CPU per search over
the same window (``/proc`` clocks), so share × CPU per search ≈ each stage's CPU per search. The
engine's own (native) work shows under the Python line that called it (``engine …`` rows).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpu import LIMIT, free_port, start_server
from load import ThreadCpu
from stages import query_text

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent

#: (stage, what a frame holds), the first that any frame of a sample holds wins.
STAGES: list[tuple[str, str]] = [
    ("rescore: cues kept by the store", "rescore_cues (engram_server/adapters/storage/edge/"),
    (
        "rescore: the rest (texts read where not kept, re-fuse, re-sort)",
        "_rescored (engram_server/domain/service/searching.py",
    ),
    ("candidates: hits -> rows -> columns", "work (engram_server/adapters/storage/edge/candidates.py"),
    ("ranking (relevance, fusion)", "_rank (engram_server/domain/service/searching.py"),
    ("winners' records (read, decode)", "_full_records (engram_server/domain/service/searching.py"),
    ("access counters", "add_access ("),
    ("reinforce", "_reinforce (engram_server/domain/service/searching.py"),
    ("rest of service.search", "search (engram_server/domain/service/searching.py"),
    ("servicer + proto conversion", "engram_server/api/"),
    ("storage thread: other", "engram_server/adapters/storage/edge/"),
]
#: Samples with no Engram frame, by their innermost frame.
LEAVES: list[tuple[str, str]] = [
    ("gRPC aio: its compiled callbacks on the event loop", "Handle._run (asyncio/events.py"),
    ("event loop: select", "EpollSelector.select ("),
    ("other threads (gRPC's poller, executors)", "Thread.run (threading.py"),
]
OTHER = "event loop and other Python (no Engram frame)"
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^:()]+):(?P<line>\d+)\)$")


@functools.lru_cache(maxsize=4096)
def _calls_engine(tree: Path, file: str, line: int) -> bool:
    """Whether source line ``file:line`` calls the engine (``….shard.…``): py-spy puts the
    engine's native time on the Python line that called it."""
    path = Path(file) if Path(file).is_absolute() else tree / file
    try:
        text = path.read_text(encoding="utf-8").splitlines()[line - 1]
    except (OSError, IndexError):
        return False
    return "shard." in text


def stage_of(stack: str, tree: Path = ROOT) -> str:
    frames = stack.split(";")
    leaf = _FRAME.match(frames[-1].strip())
    if leaf and _calls_engine(tree, leaf["file"], int(leaf["line"])):
        return f"engine (native), called from {leaf['func'].strip()} in {Path(leaf['file']).name}"
    for name, needle in STAGES:
        if any(needle in f for f in frames):
            return name
    for name, needle in LEAVES:
        if needle in frames[-1]:
            return name
    return OTHER


async def load(address: str, texts: list[str], seconds: float, conc: int) -> int:
    done = 0
    stop = time.monotonic() + seconds
    async with grpc.aio.insecure_channel(address) as ch:
        stub = memory_service_pb2_grpc.MemoryServiceStub(ch)

        async def caller() -> None:
            nonlocal done
            while time.monotonic() < stop:
                await stub.SearchMemories(s.SearchMemoriesRequest(query=random.choice(texts), limit=LIMIT))
                done += 1

        await asyncio.gather(*(caller() for _ in range(conc)))
    return done


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    ap.add_argument("--tree", type=Path, help="profile the server of this source tree (another revision)")
    ap.add_argument("--out", type=Path, help="also keep py-spy's raw (collapsed) stacks here")
    args = ap.parse_args()
    tree = args.tree.resolve() if args.tree else ROOT
    rng = random.Random(11)
    texts = [query_text(rng, 7_000_000 + i) for i in range(args.queries)]
    py_spy = Path(sys.executable).with_name("py-spy")
    tmp = Path(tempfile.mkdtemp(prefix="engram-cpu-stages-"))
    proc = None
    try:
        shutil.copytree(args.data, tmp / "server")
        port = free_port()
        env = {
            **os.environ,
            "ENGRAM_DATA_DIR": str(tmp / "server"),
            "ENGRAM_PORT": str(port),
            "ENGRAM_SEARCH_CACHE_ENTRIES": "0",
            "ENGRAM_NEAREST_LISTS": "0",
            "ENGRAM_RERANK": "off",  # a model's cost, like the embedder's: not Engram's own
            "ENGRAM_QUERY_CACHE_SIZE": str(max(4096, 2 * args.queries)),
        }
        proc = start_server(env, tree)
        address = f"127.0.0.1:{port}"
        with grpc.insecure_channel(address) as ch:
            grpc.channel_ready_future(ch).result(timeout=600)
            stub = memory_service_pb2_grpc.MemoryServiceStub(ch)
            for q in texts:  # the query cache: the embedder costs nothing from here on
                stub.SearchMemories(s.SearchMemoriesRequest(query=q, limit=LIMIT))
        await load(address, texts, 3.0, args.concurrency)  # warm
        raw = tmp / "stacks.txt"
        threads = ThreadCpu(proc.pid)
        spy_args = ["--rate", str(args.rate), "--duration", str(int(args.seconds)), "--output", str(raw)]
        spy = subprocess.Popen(  # noqa: ASYNC220 (it runs beside the load, waited for after it)
            [str(py_spy), "record", "--pid", str(proc.pid), "--nonblocking", "--format", "raw", *spy_args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        before = threads.read()
        n = await load(address, texts, args.seconds, args.concurrency)
        spent = ThreadCpu.spent(before, threads.read())
        spy.wait(timeout=120)
        if args.out:
            shutil.copy(raw, args.out)
        counts: collections.Counter[str] = collections.Counter()
        for line in raw.read_text().splitlines():
            stack, _, weight = line.rpartition(" ")
            if stack and weight.isdigit():
                counts[stage_of(stack, tree)] += int(weight)
        total = sum(counts.values())
        cpu_ms = sum(spent.values()) * 1000 / n
        print(
            f"{n} searches in {args.seconds:.0f} s at c={args.concurrency}: "
            f"server CPU {cpu_ms:.2f} ms/search ("
            + ", ".join(f"{k} {v * 1000 / n:.2f}" for k, v in spent.items())
            + ")"
            + f"; {total} samples; load {os.getloadavg()[0]:.1f}\n"
        )
        print("| stage | share of samples | ≈ CPU ms per search |\n|---|---|---|")
        for name, k in counts.most_common():
            print(f"| {name} | {100 * k / total:.1f} % | {cpu_ms * k / total:.2f} |")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
