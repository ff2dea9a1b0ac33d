"""Engram's own search CPU on the Qdrant server path, this checkout's store against another
revision's, in one process: a steady before/after for changes to the server store.

    .venv/bin/python bench/cpu_server_ab.py /tmp/base 8          # the baseline tree, rounds
    .venv/bin/python bench/cpu_server_ab.py /tmp/base 1 new      # and a cProfile of "new" (or "base")
    .venv/bin/python bench/cpu_server_ab.py /tmp/base 8 --prefix s100_   # another collection

Two servers run in this process on a Qdrant node at 127.0.0.1:6433 (gRPC 6434) that
``bench/cpu.py --qdrant-url`` filled (collection ``--prefix`` + ``default``, by default
``cpubench_default``; a collection this tree's store wrote has each point's packed ranking value,
one the baseline wrote may not): one on the baseline
tree's ``QdrantStore`` (its ``qdrant.py``, ``qdrant_grpc.py`` and ``qdrant_cues.py`` loaded beside
this tree's, so only those may differ), one on this tree's. Candidate/record caches, nearest
lists and the reranker are off, the access counters' write is deferred past the run and the clock
stopped (a query sends the same requests each time). Every query is searched twice on each while
the stores' raw gRPC answers are recorded; from then on each call is answered from the record
(neither the node nor the transport is counted). Both servers' answers must be equal (records
and every score field); then the queries are searched round after round, the two servers
alternating query by query (so both share the machine's load), and the figure is the mean over
the queries of each one's least thread CPU time.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import importlib.util
import pstats
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_replay import replayed_calls
from stages import query_text

import engram_server.adapters.storage.qdrant as new_q
from engram_server.domain.clock import ManualClock
from engram_server.domain.service import SearchQuery
from engram_server.testing import running_server

_ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
_ap.add_argument("base", type=Path, help="the baseline revision's source tree")
_ap.add_argument("rounds", type=int, nargs="?", default=10)
_ap.add_argument("profile", nargs="?", choices=["new", "base"], help="add a cProfile of this server")
_ap.add_argument("--prefix", default="cpubench_", help="collection name prefix on the node")
ARGS = _ap.parse_args()
BASE = ARGS.base
ROUNDS = ARGS.rounds


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


STORAGE = "engram_server.adapters.storage."
saved = {k: sys.modules[k] for k in (STORAGE + "qdrant_grpc", STORAGE + "qdrant_cues")}
base_cues = load("base_qdrant_cues", BASE / "engram_server/adapters/storage/qdrant_cues.py")
sys.modules["engram_server.adapters.storage.qdrant_cues"] = base_cues
base_grpc = load("base_qdrant_grpc", BASE / "engram_server/adapters/storage/qdrant_grpc.py")
sys.modules["engram_server.adapters.storage.qdrant_grpc"] = base_grpc
base_q = load("base_qdrant", BASE / "engram_server/adapters/storage/qdrant.py")
sys.modules.update(saved)


def replaying(raw, state):
    real_next = raw._next
    rec = {}
    wrapped = None

    def _next():
        nonlocal wrapped
        if wrapped is None:
            wrapped = replayed_calls(real_next(), rec, state)
        return wrapped

    raw._next = _next


async def main():
    rng = random.Random(11)
    texts = [query_text(rng, 7_000_000 + i) for i in range(200)]
    queries = [SearchQuery(query=t, limit=10) for t in texts]
    state = {"replay": False, "misses": 0}
    clock = ManualClock(time.time())
    svcs = {}
    async with __import__("contextlib").AsyncExitStack() as stack:
        for label, mod in (("base", base_q), ("new", new_q)):
            st = mod.QdrantStore("http://127.0.0.1:6433", grpc_port=6434, prefix=ARGS.prefix)
            tmp = stack.enter_context(tempfile.TemporaryDirectory())
            srv = await stack.enter_async_context(
                running_server(
                    Path(tmp), clock=clock, store=st, search_cache_entries=0, nearest_lists=0, rerank="off"
                )
            )
            svc = srv.service
            svc.policy = dataclasses.replace(svc.policy, access_flush_seconds=3600.0)
            replaying(st._raw, state)
            svcs[label] = svc
        for _ in range(2):
            for q in queries:
                for svc in svcs.values():
                    await svc.search(q)
        state["replay"] = True
        # identical answers
        for q in queries:
            a, b = [await svc.search(q) for svc in svcs.values()]
            assert [(h.memory, h.score) for h in a] == [(h.memory, h.score) for h in b], q.query
        best = {k: [float("inf")] * len(queries) for k in svcs}
        tc = time.thread_time
        for r in range(ROUNDS):
            order = list(svcs.items()) if r % 2 == 0 else list(reversed(svcs.items()))
            for i, q in enumerate(queries):
                for label, svc in order:
                    c0 = tc()
                    await svc.search(q)
                    t = tc() - c0
                    best[label][i] = min(best[label][i], t)
        if ARGS.profile:
            prof = cProfile.Profile(time.thread_time)
            prof.enable()
            for _ in range(2):
                for q in queries:
                    await svcs[ARGS.profile].search(q)
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        m = {k: 1000 * sum(v) / len(v) for k, v in best.items()}
        base, new = m["base"], m["new"]
        print(f"service.search CPU (replayed node, each query's best of {ROUNDS} rounds):")
        print(f"base {base:.3f} ms, new {new:.3f} ms, new/base {new / base:.3f}; misses {state['misses']}")


asyncio.run(main())
