"""The write gate on labelled pairs: different facts kept apart, restatements refused.

Each pair (``eval/pairs/*.jsonl``) is written through the gRPC API of a real server (embedded Qdrant,
the local embedding model, a real channel) into a collection of its own: ``a`` first, then ``b``
with ``AddMemory``. The gate's answer to ``b`` is scored:

* ``different_facts.jsonl`` — ``b`` states a different fact than ``a`` (a number, id, date, time,
  amount, name or negation differs). It must never be refused as a DUPLICATE; flagging it in the
  near-duplicate zone (so an agent can update instead) is right.
* ``restatements.jsonl`` — ``b`` restates ``a``'s claim in other words (same language, or translated
  zh↔en). It should be refused as a DUPLICATE ("gated"); "flagged" counts DUPLICATE or near
  duplicate.

Every pair carries a ``split``: ``tune`` pairs may be looked at while changing the gate; ``report``
pairs are held out and only reported. The ``rs-f-*`` and ``df-f-*`` pairs are a batch written
blind, by someone who had not read the gate's code, after the other pairs' methods were in place;
its odd-numbered pairs are ``tune``, its even-numbered ones ``report`` (split by number before any
of them was looked at). Reports go to
``<out>/gate_pairs.json`` and ``<out>/gate_pairs.md``.

    python -m eval.gate_pairs                    # in-process server, reports under results/eval/
    python -m eval.gate_pairs --address host:port
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_client import AddOutcome, AsyncEngramClient

PAIRS_DIR = Path(__file__).resolve().parent / "pairs"
SETS = {"different_facts": "kept_apart", "restatements": "gated"}

Json = dict[str, Any]


@dataclass
class PairResult:
    set: str
    id: str
    lang: str
    subclass: str
    split: str
    outcome: str  # duplicate / near_duplicate / created
    similarity: float  # calibrated similarity of b to a as the gate saw it (0 when not reported)
    reason: str  # the gate's reason, when the server gives one
    passed: bool


def load_pairs(path: Path) -> list[Json]:
    pairs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for p in pairs:
        missing = {"id", "lang", "subclass", "split", "a", "b", "reason"} - set(p)
        if missing:
            raise ValueError(f"{path.name}: {p.get('id')}: missing {sorted(missing)}")
        if p["split"] not in ("tune", "report"):
            raise ValueError(f"{path.name}: {p['id']}: split must be tune or report")
    return pairs


def _collection(prefix: str, pair_id: str) -> str:
    return (prefix + re.sub(r"[^a-z0-9_-]", "-", pair_id.lower()))[:64]


async def run_pairs(address: str, prefix: str = "gp-", *, cleanup: bool = False) -> list[PairResult]:
    out: list[PairResult] = []
    async with AsyncEngramClient(address, timeout=60) as client:
        for name, goal in SETS.items():
            for p in load_pairs(PAIRS_DIR / f"{name}.jsonl"):
                coll = _collection(prefix, p["id"])
                first = await client.add(p["a"], collection=coll)
                res = await client.add(p["b"], collection=coll)
                if res.outcome == AddOutcome.DUPLICATE:
                    outcome, sim = "duplicate", float(res.duplicate_similarity or 0.0)
                else:
                    near = {n.id: n.similarity for n in res.near_duplicates}
                    outcome = "near_duplicate" if first.memory.id in near else "created"
                    sim = float(near.get(first.memory.id, 0.0))
                reason = str(getattr(res, "gate_reason", "") or "")
                passed = outcome != "duplicate" if goal == "kept_apart" else outcome == "duplicate"
                meta = (p["id"], p["lang"], p["subclass"], p["split"])
                row = PairResult(name, *meta, outcome, sim, reason, passed)
                out.append(row)
                if cleanup:  # (deleted and purged: a trashed collection still counts against the limit)
                    await client.delete_collection(coll)
                    await client.purge_trash(collection=coll, purge_collection=True)
    return out


def summarise(results: Sequence[PairResult]) -> Json:
    """Counts per set, split, language and subclass."""
    table: dict[str, dict[str, Json]] = {}
    for set_name in SETS:
        rows = [r for r in results if r.set == set_name]
        groups: dict[str, list[PairResult]] = defaultdict(list)
        for r in rows:
            groups["all"].append(r)
            groups[f"split={r.split}"].append(r)
            groups[f"lang={r.lang}"].append(r)
            groups[f"subclass={r.subclass}"].append(r)
        table[set_name] = {
            key: {
                "pairs": len(g),
                "duplicate": sum(r.outcome == "duplicate" for r in g),
                "near_duplicate": sum(r.outcome == "near_duplicate" for r in g),
                "created": sum(r.outcome == "created" for r in g),
                "passed": sum(r.passed for r in g),
            }
            for key, g in sorted(groups.items(), key=lambda kv: (kv[0] != "all", kv[0]))
        }
    return table


def to_markdown(summary: Json, results: Sequence[PairResult], label: str) -> str:
    lines = [
        "# Write gate on labelled pairs",
        "",
        label,
        "",
        "`different_facts`: pass = not refused as DUPLICATE (target: 0 refused). "
        "`restatements`: pass = refused as DUPLICATE (target: ≥ 90 %). "
        "`tune` pairs may be looked at while changing the gate; `report` pairs are held out.",
        "",
    ]
    for set_name, groups in summary.items():
        head = "| group | pairs | duplicate | near | created | pass |"
        lines += [f"## {set_name}", "", head, "|---" * 6 + "|"]
        for key, g in groups.items():
            lines.append(
                f"| {key} | {g['pairs']} | {g['duplicate']} | {g['near_duplicate']} | {g['created']} | "
                f"{g['passed']}/{g['pairs']} |"
            )
        lines.append("")
    lines += ["## Pairs", "", "| set | id | split | outcome | similarity | reason | pass |", "|---" * 7 + "|"]
    for r in results:
        lines.append(
            f"| {r.set} | {r.id} | {r.split} | {r.outcome} | {r.similarity:.3f} | {r.reason} | "
            f"{'yes' if r.passed else '**no**'} |"
        )
    return "\n".join(lines) + "\n"


async def run_in_process(**settings: Any) -> list[PairResult]:
    from engram_server.testing import running_server  # noqa: PLC0415 - server only when in-process

    with tempfile.TemporaryDirectory(prefix="engram-gate-pairs-") as tmp:
        async with running_server(Path(tmp) / "data", **settings) as server:
            # Each pair's collection is dropped after it: the embedded store would otherwise keep
            # ~200 collections open (threads and mapped files) to the end.
            return await run_pairs(server.address, cleanup=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.gate_pairs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", help="run against this server instead of an in-process one")
    parser.add_argument("--out", type=Path, default=Path("results/eval"), help="report directory")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.address:
        results = asyncio.run(run_pairs(args.address, prefix=f"gp{uuid.uuid4().hex[:6]}-", cleanup=True))
        label = f"Run against {args.address}"
    else:
        from engram_server.config import env_overrides  # noqa: PLC0415 - server only when in-process

        results = asyncio.run(run_in_process(**env_overrides()))
        label = "Run against an in-process server (embedded Qdrant, local model)"
    label += f" at {datetime.now(UTC).isoformat(timespec='seconds')}; {time.perf_counter() - started:.1f} s."
    summary = summarise(results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gate_pairs.json").write_text(
        json.dumps({"summary": summary, "pairs": [asdict(r) for r in results]}, ensure_ascii=False, indent=1),
        encoding="utf-8",
    )
    (args.out / "gate_pairs.md").write_text(to_markdown(summary, results, label), encoding="utf-8")
    for set_name, groups in summary.items():
        g = groups["all"]
        print(
            f"{set_name:16s} pass {g['passed']:3d}/{g['pairs']:<3d} (duplicate {g['duplicate']}, "
            f"near {g['near_duplicate']}, created {g['created']})"
        )
        for key in ("split=tune", "split=report"):
            s = groups.get(key)
            if s:
                print(f"  {key:14s} pass {s['passed']:3d}/{s['pairs']:<3d} (duplicate {s['duplicate']})")
    for r in results:
        if not r.passed:
            print(f"FAIL {r.id} ({r.split}): {r.outcome} {r.similarity:.3f} {r.reason}")
    print(f"report: {args.out / 'gate_pairs.json'} {args.out / 'gate_pairs.md'}")
    # The hard invariant: a different fact is never refused (restatements are a rate, reported).
    return 1 if summary["different_facts"]["all"]["duplicate"] else 0


if __name__ == "__main__":
    sys.exit(main())
