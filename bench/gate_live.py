"""The write gate's neighbour lookup: liveness decided by the engine or by the embedded store.

    .venv/bin/python bench/gate_live.py --data DIR [--batch 1,64] [--rounds 6]

``DIR`` is an Engram data directory holding a large collection (e.g. a copy of the one
``bench/stages.py --keep`` leaves); it is opened by ``EdgeStore`` and only queried. The lookups are
``EdgeStore.search_batch`` as the write gate sends it (top 8, the live filter, payloads), with query
vectors that are stored vectors plus a little noise (near copies, what the gate exists to catch).
Two ways, interleaved per call in one process: the embedded store's own (the engine asked for the
ids and scores of a margin more nearest points with no filter, liveness read from the ranking fields
kept in memory, the live ones read in full) and the engine filtering at every graph node (what the
store did before, and still does when too many of the nearest are dead). Reported per batch size:
p50 ms a call, process CPU ms a call, how many top-8 lists agree, and each way's recall@8 against
an exact search with the whole filter.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import qdrant_edge as qe

from engram_server.adapters.storage import edge
from engram_server.adapters.storage.edge import EdgeStore
from engram_server.adapters.storage.payload import as_vector, filter_plan
from engram_server.domain.model import StoreFilter

_STORE, _ENGINE = "liveness from the ranking fields", "the engine's filter"


async def run(args: argparse.Namespace) -> None:
    store = EdgeStore(args.data)
    await store.open()
    try:
        col = store._col(args.collection)
        while not col.warm:  # the ranking fields load in the background after open
            await store.count(args.collection, StoreFilter())  # (an io-thread job: lets the load run)
            await asyncio.sleep(0.2)
        rng = np.random.default_rng(7)
        picked, _ = col.shard.scroll(
            qe.ScrollRequest(limit=args.queries, with_payload=False, with_vector=True)
        )
        base = np.asarray([as_vector(p.vector) for p in picked], dtype=np.float32)
        noisy = base + rng.normal(scale=0.2 / np.sqrt(base.shape[1]), size=base.shape).astype(np.float32)
        queries = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)

        async def sync_run(fn: Callable[[], Any]) -> Any:
            return fn()

        store._run = sync_run  # type: ignore[method-assign]  # time the work, not the hop
        real_split = edge.split_live  # type: ignore[attr-defined]

        def use(way: str) -> None:
            edge.split_live = real_split if way == _STORE else (lambda _flt: None)  # type: ignore[attr-defined,assignment]

        async def lookup(way: str, rows: np.ndarray[Any, Any]) -> list[list[str]]:
            use(way)
            found = await store.search_batch(args.collection, rows, 8, StoreFilter(live_at=time.time()))
            return [[h.record.id for h in hits] for hits in found]

        for size in (int(x) for x in args.batch.split(",")):
            wall: dict[str, list[float]] = {_STORE: [], _ENGINE: []}
            cpu: dict[str, float] = {_STORE: 0.0, _ENGINE: 0.0}
            same = lists = 0
            for r in range(args.rounds):
                for k, start in enumerate(range(0, len(queries), size)):
                    rows = queries[start : start + size]
                    got: dict[str, list[list[str]]] = {}
                    for way in (_STORE, _ENGINE) if (k + r) % 2 else (_ENGINE, _STORE):
                        t, c = time.perf_counter(), time.process_time()
                        got[way] = await lookup(way, rows)
                        wall[way].append(time.perf_counter() - t)
                        cpu[way] += time.process_time() - c
                    same += sum(a == b for a, b in zip(got[_STORE], got[_ENGINE], strict=True))
                    lists += len(rows)
            print(f"batches of {size}:")
            for way in (_STORE, _ENGINE):
                ms = statistics.median(wall[way]) * 1e3
                per_call = cpu[way] / len(wall[way]) * 1e3
                print(f"  {way:34s} p50 {ms:8.3f} ms, process CPU {per_call:8.3f} ms a call")
            print(f"  the same top-8 list in {same} of {lists}")
        where = edge._edge_filter(filter_plan(StoreFilter(live_at=time.time())))
        exact_params = qe.SearchParams(exact=True)
        hits = {_STORE: 0, _ENGINE: 0}
        for row in queries:
            request = qe.QueryRequest(
                limit=8,
                query=qe.Query.Nearest(row.tolist()),
                filter=where,
                with_payload=False,
                with_vector=False,
                params=exact_params,
            )
            exact = {str(h.id) for h in col.shard.query(request)}
            for way in hits:
                hits[way] += len(exact & set((await lookup(way, row[None, :]))[0]))
        print(
            "recall@8 against an exact search: "
            + ", ".join(f"{w} {n / (8 * len(queries)):.4f}" for w, n in hits.items())
        )
        use(_STORE)
    finally:
        await store.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--collection", default="default")
    p.add_argument(
        "--batch", default="1,64", help="lookups per call (AddMemory sends 1, AddMemories up to 64)"
    )
    p.add_argument("--queries", type=int, default=256)
    p.add_argument("--rounds", type=int, default=6)
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
