"""Engram's own CPU per search on the Qdrant server path with the node's answers replayed: the
search's Python alone, steady on a loaded machine.

    .venv/bin/python bench/cpu_replay.py --qdrant-url http://127.0.0.1:6333 --qdrant-grpc-port 6334
    .venv/bin/python bench/cpu_replay.py … --baseline /tmp/base    # before/after, alternating

The node must already hold the corpus (``bench/cpu.py --qdrant-url …`` writes it: collection
``--qdrant-prefix`` + ``default``). A server runs in this process on the node
(``engram_server.testing.running_server``, candidate/record caches and nearest lists off, the
reranker off, the access counters' write deferred past the run, the clock stopped so that a query
sends the same requests each time), as ``bench/cpu.py`` runs it.
Every query is searched twice against the node while the store's raw gRPC calls (``QueryBatch``
and ``Get``: ``RawPoints``) are recorded, request bytes → answer bytes; from then on each call is
answered from the record (the recorded bytes parsed as the channel parses them), so a search
costs only Engram's own work: the service, candidate assembly, ranking, the winners' records,
request building and answer parsing (not the gRPC transport, the event loop's I/O nor the access
counters' write). ``--rounds`` passes over the queries, one search at a time, each search timed by the
thread's CPU clock; the figure is the mean over the queries of each query's least CPU time over
the passes (the least disturbed by other processes: a loaded machine's shared caches and cores
slow a search's own work too). ``--baseline DIR`` runs another revision's tree in a subprocess,
runs alternating.
``--profile N`` prints a cProfile (thread CPU time) of one more pass, top N by own time.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import json
import os
import pstats
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stages import query_text


def replayed_calls(
    calls: Any, recorded: dict[tuple[int, bytes], bytes], state: dict[str, Any]
) -> tuple[Any, ...]:
    """The raw store's gRPC calls with the first two (the candidate query and the records' read)
    recording their answers by request, and answering from the record once ``state["replay"]`` is
    set (a request not recorded goes to the node and counts in ``state["misses"]``); the rest
    (UpdateBatch) as they are."""
    wrapped = []
    for i, call in enumerate(calls):
        if i > 1:
            wrapped.append(call)
            continue
        parse = getattr(call, "_response_deserializer")  # noqa: B009

        def make(call: Any = call, i: int = i, parse: Any = parse) -> Any:
            async def replayed(request: Any, **kw: Any) -> Any:
                key = (i, request.SerializeToString())
                if state["replay"]:
                    data = recorded.get(key)
                    if data is not None:
                        return parse(data)
                    state["misses"] += 1
                response = await call(request, **kw)
                recorded[key] = response.SerializeToString()
                return response

            return replayed

        wrapped.append(make())
    return tuple(wrapped)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    from engram_server.adapters.storage import qdrant_grpc  # noqa: PLC0415
    from engram_server.domain.clock import ManualClock  # noqa: PLC0415
    from engram_server.domain.model import StoreFilter  # noqa: PLC0415
    from engram_server.domain.service import SearchQuery, searching  # noqa: PLC0415
    from engram_server.testing import running_server  # noqa: PLC0415

    rng = random.Random(11)
    texts = [query_text(rng, 7_000_000 + i) for i in range(args.queries)]
    recorded: dict[tuple[int, bytes], bytes] = {}
    state = {"replay": False, "misses": 0}
    real_next = qdrant_grpc.RawPoints._next

    def _next(self: Any) -> Any:
        calls = real_next(self)
        if getattr(self, "_bench_calls", None) is None or self._bench_base is not calls:
            self._bench_base = calls
            self._bench_calls = replayed_calls(calls, recorded, state)
        return self._bench_calls

    qdrant_grpc.RawPoints._next = _next  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory(prefix="engram-cpu-replay-") as tmp:
        async with running_server(
            Path(tmp),
            clock=ManualClock(time.time()),  # the same requests each pass (their live-at time)
            search_cache_entries=0,
            nearest_lists=0,
            rerank="off",
            qdrant_url=args.qdrant_url,
            qdrant_grpc_port=args.qdrant_grpc_port,
            qdrant_prefix=args.qdrant_prefix,
        ) as srv:
            svc = srv.service
            svc.policy = dataclasses.replace(svc.policy, access_flush_seconds=3600.0)
            queries = [SearchQuery(query=t, limit=10) for t in texts]
            for _ in range(2):
                for q in queries:
                    await svc.search(q)
            state["replay"] = True
            passes = []
            best = [float("inf")] * len(queries)
            clock = time.thread_time
            step = svc.search
            if args.stage == "candidates":  # the store's candidate batch alone, as a search asks
                store, vectors = svc._store, []
                for q in queries:
                    query = searching._Query(svc, q.query)
                    vectors.append((await query.dense(), query.sparse()))
                pol = svc.policy
                n = max(10 * pol.candidate_factor, pol.min_candidates)
                n_lexical = max(10 * pol.candidate_factor, pol.min_lexical_candidates)
                flt = dataclasses.replace(StoreFilter(), live_at=svc._clock.now())
                by_text = dict(zip((q.query for q in queries), vectors, strict=True))

                async def stage(q: Any) -> Any:
                    dense, sparse = by_text[q.query]
                    return await store.candidates(
                        "default", dense, n, flt, sparse=sparse, lexical_limit=n_lexical
                    )

                step = stage
                for q in queries:
                    await step(q)
            for _ in range(args.rounds):
                total = 0.0
                for i, q in enumerate(queries):
                    c0 = clock()
                    await step(q)
                    took = clock() - c0
                    total += took
                    best[i] = min(best[i], took)
                passes.append(1000 * total / len(queries))
            if args.profile:
                prof = cProfile.Profile(time.thread_time)
                prof.enable()
                for q in queries:
                    await svc.search(q)
                prof.disable()
                st = pstats.Stats(prof, stream=sys.stderr)
                st.sort_stats("tottime").print_stats(args.profile)
    return {"search_ms": 1000 * sum(best) / len(best), "passes": passes, "misses": state["misses"]}


def run_tree(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", "--rounds", str(args.rounds)]
    cmd += ["--queries", str(args.queries), "--qdrant-url", args.qdrant_url, "--stage", args.stage]
    cmd += ["--qdrant-grpc-port", str(args.qdrant_grpc_port), "--qdrant-prefix", args.qdrant_prefix]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, cwd=tree)
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qdrant-url", required=True)
    ap.add_argument("--qdrant-grpc-port", type=int, default=6334)
    ap.add_argument("--qdrant-prefix", default="cpubench_")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5, help="passes over the queries per run")
    ap.add_argument("--runs", type=int, default=1, help="runs per tree, alternating with the baseline")
    ap.add_argument("--baseline", type=Path)
    ap.add_argument("--profile", type=int, default=0, help="cProfile one more pass: top N")
    ap.add_argument(
        "--stage",
        choices=["search", "candidates"],
        default="search",
        help="time service.search, or the store's candidate batch alone",
    )
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(asyncio.run(measure(args))))
        return
    here = Path(__file__).resolve().parent.parent
    trees = [("baseline", args.baseline.resolve()), ("this", here)] if args.baseline else [("this", here)]
    best: dict[str, float] = {}
    for r in range(args.runs):
        for label, tree in trees:
            res = asyncio.run(measure(args)) if args.profile and label == "this" else run_tree(tree, args)
            passes = ", ".join(f"{x:.3f}" for x in res["passes"])
            ms, misses = res["search_ms"], res["misses"]
            print(f"run {r + 1} {label}: {ms:.3f} ms (passes: {passes}; misses {misses})")
            best[label] = min(best.get(label, float("inf")), res["search_ms"])
    for label, ms in best.items():
        print(f"{label}: {ms:.3f} ms of CPU per search (each query's best)")
    if "baseline" in best:
        print(f"this / baseline: {best['this'] / best['baseline']:.3f}")


if __name__ == "__main__":
    main()
