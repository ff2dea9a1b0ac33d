"""A/B: two versions of the server side by side on identical data, requests alternated.

    git worktree add /tmp/engram-a main              # the baseline checkout
    .venv/bin/python bench/ab.py --a /tmp/engram-a --data DATA_DIR [--b .] [--rounds 100]
    .venv/bin/python bench/ab.py --a . --data DATA_DIR --data-b OTHER_DIR   # one version, two layouts

This machine's speed drifts by tens of percent within minutes, so two runs made one after the other
cannot tell a 5 % change from noise. Here both servers run at once, each on its own copy of
``--data`` (an Engram data directory, e.g. one kept by ``bench/stages.py --keep``), and every round
sends the same request to both in random order: searches after 100 ms idle, and the third of three
back to back. By default the search result caches are off (``ENGRAM_SEARCH_CACHE_ENTRIES=0``,
``ENGRAM_NEAREST_LISTS=0``), so
every search queries storage while its query embedding is cached (the storage-bound path);
``--cache`` keeps the defaults. Prints p50 per side and B / A.

``--known N`` measures instead N passes per side, alternated, of 200 different questions each
(``--questions``)
(asked once before, untimed: their embeddings are cached), every pass right after one AddMemory
that writes (the caches stay on: no cached candidate list is reused as it was; since the nearest
lists, the embedded store patches each question's list with the point written — the same
questions asked again after a write; before them, the storage-bound path). Per pass: p50, and
the server's CPU per search from ``/proc/PID/task/*/stat`` — its main thread (the event loop) and
its other threads (on this path almost only the storage thread; the pass's access-count writes
included). Prints per-side medians / means and B / A pass by pass. ``--writes W`` writes W
memories before each pass instead of one (through ``AddMemories``, batches of 64; e.g. 1,000: more
changes than a nearest list could be patched with before the seventh session).
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
        env["ENGRAM_NEAREST_LISTS"] = "0"
    return subprocess.Popen(
        [sys.executable, "-m", "engram_server", "serve"],
        env=env,
        cwd=code,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def known_questions(n: int) -> list[str]:
    return [f"what did person {i} write about the tax return" for i in range(n)]


PEOPLE = ["Ann", "Bo", "Cy", "Dee", "Eli"]
THINGS = ["the car", "the desk", "the piano", "the boat", "the garden hose"]


def write_one(stub: memory_service_pb2_grpc.MemoryServiceStub, rng: random.Random) -> None:
    """An AddMemory that writes (the gate refuses near-copies: vary the text until one is created)."""
    for _ in range(50):
        text = f"{rng.choice(PEOPLE)} moved {rng.choice(THINGS)} to room {rng.randrange(10**6)}"
        if stub.AddMemory(s.AddMemoryRequest(content=text)).outcome == s.ADD_OUTCOME_CREATED:
            return
    raise RuntimeError("no AddMemory was created in 50 tries")


def write_many(stub: memory_service_pb2_grpc.MemoryServiceStub, rng: random.Random, n: int) -> None:
    """``n`` new memories through AddMemories (counted: the gate may refuse near-copies)."""
    created = 0
    while created < n:
        batch = [
            s.NewMemory(
                content=f"{rng.choice(PEOPLE)} lent {rng.choice(THINGS)} to {rng.choice(PEOPLE)} "
                f"on day {rng.randrange(10**6)} for {rng.randrange(10**4)} coins"
            )
            for _ in range(min(64, n - created))
        ]
        reply = stub.AddMemories(s.AddMemoriesRequest(memories=batch), timeout=300)
        created += sum(r.outcome == s.ADD_OUTCOME_CREATED for r in reply.results)
        if not reply.results:
            raise RuntimeError("AddMemories returned no results")


def thread_cpu(pid: int) -> tuple[float, float]:
    """(main thread, other threads) CPU seconds so far of process ``pid``."""
    tick = float(os.sysconf("SC_CLK_TCK"))
    main_s = other_s = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu = (int(fields[11]) + int(fields[12])) / tick
        if int(tid) == pid:
            main_s += cpu
        else:
            other_s += cpu
    return main_s, other_s


def known_passes(
    stubs: dict[str, memory_service_pb2_grpc.MemoryServiceStub],
    pids: dict[str, int],
    passes: int,
    questions: int,
    writes: int = 1,
) -> dict[str, dict[str, list[float]]]:
    known = known_questions(questions)
    for stub in stubs.values():
        for q in known:  # embeddings cached
            stub.SearchMemories(s.SearchMemoriesRequest(query=q, limit=10))
    out: dict[str, dict[str, list[float]]] = {n: {"p50": [], "loop": [], "other": []} for n in stubs}
    rng = random.Random(2)
    for i in range(passes + 1):  # the first pass warms up, untimed
        for name in rng.sample(sorted(stubs), len(stubs)):
            stub = stubs[name]
            if writes == 1:
                write_one(stub, rng)
            else:
                write_many(stub, rng, writes)
            time.sleep(1.3)  # the previous pass's access counters are written meanwhile
            before, lat = thread_cpu(pids[name]), []
            for q in known:
                t = time.perf_counter()
                stub.SearchMemories(s.SearchMemoriesRequest(query=q, limit=10))
                lat.append(time.perf_counter() - t)
            time.sleep(1.3)  # this pass's access counters: counted with it
            after = thread_cpu(pids[name])
            if i == 0:
                continue
            out[name]["p50"].append(statistics.median(lat) * 1000)
            out[name]["loop"].append((after[0] - before[0]) / len(known) * 1000)
            out[name]["other"].append((after[1] - before[1]) / len(known) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", type=Path, required=True, help="checkout of version A (the baseline)")
    ap.add_argument("--b", type=Path, default=ROOT, help="checkout of version B (default: this one)")
    ap.add_argument("--data", type=Path, required=True, help="an Engram data directory (copied twice)")
    ap.add_argument(
        "--data-b", type=Path, help="B's own data directory (copied; e.g. the same corpus in another layout)"
    )
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--warm-seconds", type=float, default=15.0, help="wait after start-up (ranking fields)")
    ap.add_argument("--cache", action="store_true", help="keep the search result caches on")
    ap.add_argument(
        "--known",
        type=int,
        metavar="N",
        help="N alternated passes of the known questions, each after a write (caches on), with CPU",
    )
    ap.add_argument("--questions", type=int, default=200, help="known questions a pass (with --known)")
    ap.add_argument("--writes", type=int, default=1, help="memories written before each pass (with --known)")
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
            shutil.copytree(args.data_b if name == "B" and args.data_b else args.data, data)
            sides[name] = (code.resolve(), data, free_port())
        caching = args.cache or args.known is not None
        procs = [start(code, data, port, cache=caching) for code, data, port in sides.values()]
        try:
            stubs = {}
            for name, (_, _, port) in sides.items():
                channel = grpc.insecure_channel(f"127.0.0.1:{port}")
                grpc.channel_ready_future(channel).result(timeout=300)
                stubs[name] = memory_service_pb2_grpc.MemoryServiceStub(channel)
            time.sleep(args.warm_seconds)
            if args.known is not None:
                pids = {name: proc.pid for name, proc in zip(sides, procs, strict=True)}
                report_known(args, known_passes(stubs, pids, args.known, args.questions, args.writes))
                return
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


def report_known(args: argparse.Namespace, got: dict[str, dict[str, list[float]]]) -> None:
    print(
        f"A = {args.a}, B = {args.b}; {args.known} passes of {args.questions} known questions,"
        f" each after {args.writes} write(s)"
    )
    for name in ("A", "B"):
        g = got[name]
        print(
            f"  {name}: p50 {statistics.median(g['p50']):6.2f} ms; CPU per search: event loop "
            f"{statistics.mean(g['loop']):.2f} ms, "
            f"other threads (storage) {statistics.mean(g['other']):.2f} ms"
        )
    for key, label in (("p50", "p50"), ("loop", "event-loop CPU"), ("other", "storage CPU")):
        ratios = [b / a for a, b in zip(got["A"][key], got["B"][key], strict=True) if a > 0]
        if ratios:
            print(
                f"  B / A {label:15s} median {statistics.median(ratios):.3f}  "
                + " ".join(f"{r:.2f}" for r in ratios)
            )


if __name__ == "__main__":
    main()
