"""LoCoMo evidence recall before and after consolidation: does a consolidated store answer the same
questions with fewer memories?

Per conversation (its own collection, one ``event`` memory per turn, ingested as
:mod:`eval.locomo` does: the session's date as ``created_at``, TTL taken out, a ManualClock at the
moment the questions are asked), every question of categories 1–4 is asked with
``SearchMemories(limit=k)``; then ``RunConsolidation(force=True)`` runs (the server's
``ENGRAM_CONSOLIDATION_*`` settings, rule-based merge unless an LLM is configured) and every
question is asked again. Evidence recall@k = |E ∩ C| / |E|, C the ``dia_id`` of the retrieved
memories; a retrieved consolidation insight stands for the turns it was merged from (its
``derived_from``), and a memory the gate refused or superseded stands for nothing else (as the
official metric). Reported: live memories before/after and R@k before/after (mean over questions),
per conversation and overall. Also reported: turns superseded at ingest by contradictions
(``ENGRAM_CONTRADICTIONS``, default supersede; ``=off`` to compare).

    python -m eval.locomo_consolidation --data ../shared/data/locomo/locomo_dev.json --conversations report
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from engram_client import AddOutcome, AsyncEngramClient
from eval.locomo import data_paths, load_conversations, recall


async def run(data: Path, select: str, ks: Sequence[int]) -> dict[str, Any]:
    from engram_server.config import env_overrides  # noqa: PLC0415
    from engram_server.domain.clock import ManualClock  # noqa: PLC0415
    from engram_server.testing import running_server  # noqa: PLC0415

    data_file, audit = data_paths(data, None)
    convs, _ = load_conversations(data_file, select, audit)
    clock = ManualClock(start=convs[0].ask_at.timestamp())
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="engram-locomo-consolidation-") as tmp:
        async with (
            running_server(Path(tmp) / "data", clock=clock, **env_overrides()) as server,
            AsyncEngramClient(server.address, timeout=300) as client,
        ):
            for conv in convs:
                clock.set(conv.ask_at.timestamp())
                collection = f"locomo-{conv.sample_id}".lower()
                keep_until = conv.ask_at + timedelta(days=3650)
                dia_of: dict[str, str] = {}
                refused = superseded = 0
                t0 = time.perf_counter()
                for t in conv.turns:
                    res = await client.add(
                        t.content,
                        collection=collection,
                        type="event",
                        importance=5,
                        created_at=t.created_at,
                        valid_until=keep_until,
                        metadata={"dia_id": t.dia_id},
                    )
                    if res.outcome == AddOutcome.DUPLICATE:
                        refused += 1
                    else:
                        dia_of[res.memory.id] = t.dia_id
                        superseded += sum(c.superseded for c in res.conflicts)
                ingest = time.perf_counter() - t0

                async def ask(k: int) -> list[float]:
                    out = []
                    for q in conv.questions:  # noqa: B023
                        if not q.evidence:
                            continue
                        hits = await client.search(q.question, collections=[collection], limit=k)  # noqa: B023
                        found = {dia_of.get(h.memory.id, "") for h in hits}  # noqa: B023
                        for h in hits:
                            found |= {dia_of.get(src, "") for src in h.memory.derived_from}  # noqa: B023
                        out.append(recall(q.evidence, found))
                    return out

                before = {k: await ask(k) for k in ks}
                count_before = await _count(client, collection)
                t0 = time.perf_counter()
                report = await client.run_consolidation(collection=collection, force=True)
                consolidate = time.perf_counter() - t0
                after = {k: await ask(k) for k in ks}
                count_after = await _count(client, collection)
                rows.append(
                    {
                        "conversation": conv.sample_id,
                        "turns": len(conv.turns),
                        "refused_at_ingest": refused,
                        "superseded_at_ingest": superseded,
                        "memories_before": count_before,
                        "memories_after": count_after,
                        "clusters": len(report.clusters),
                        "merged": sum(len(c.source_ids) for c in report.clusters),
                        "questions": len(before[ks[0]]),
                        "recall_before": {k: _mean(v) for k, v in before.items()},
                        "recall_after": {k: _mean(v) for k, v in after.items()},
                        "_before": before,
                        "_after": after,
                        "ingest_seconds": round(ingest, 1),
                        "consolidation_seconds": round(consolidate, 1),
                    }
                )
                print(json.dumps({k: v for k, v in rows[-1].items() if not k.startswith("_")}), flush=True)
    overall = {
        "memories_before": sum(r["memories_before"] for r in rows),
        "memories_after": sum(r["memories_after"] for r in rows),
        "recall_before": {k: _mean([x for r in rows for x in r["_before"][k]]) for k in ks},
        "recall_after": {k: _mean([x for r in rows for x in r["_after"][k]]) for k in ks},
    }
    for r in rows:
        del r["_before"], r["_after"]
    return {"conversations": rows, "overall": overall}


async def _count(client: AsyncEngramClient, collection: str) -> int:
    return len([m async for m in client.iter_memories(collection=collection, page_size=500)])


def _mean(values: Sequence[float]) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.locomo_consolidation")
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--conversations", default="report")
    parser.add_argument("--k", type=int, nargs="+", default=[10])
    parser.add_argument("--out", type=Path, default=Path("results/locomo"))
    args = parser.parse_args(argv)
    result = asyncio.run(run(args.data, args.conversations, args.k))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"consolidation-{args.conversations}.json"
    path.write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(json.dumps(result["overall"]))
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
