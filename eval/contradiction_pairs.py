"""Contradictions on labelled pairs: does the write gate supersede exactly when it should?

Each pair of ``eval/pairs/contradictions.jsonl`` is written through the gRPC API of a real server
(embedded Qdrant, the local model, a real channel) into a collection of its own: ``a`` first, then
``b``. ``supersede: true`` pairs state a new value for the same subject ("moved from X to Y", a
changed number, date or name, a negation); ``supersede: false`` pairs both hold (two invoices, two
people, two runs on two days). A pair is predicted positive when ``b``'s answer lists ``a`` in
``conflicts`` with ``superseded`` set. Reported: precision and recall of superseding, by split
(``tune`` pairs may be looked at while changing the rules, ``report`` pairs are held out), and by
language.

    python -m eval.contradiction_pairs                 # in-process server, reports under results/eval/
    python -m eval.contradiction_pairs --address host:port
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_client import AsyncEngramClient

PAIRS = Path(__file__).resolve().parent / "pairs" / "contradictions.jsonl"


@dataclass
class PairResult:
    id: str
    lang: str
    subclass: str
    split: str
    expected: bool
    superseded: bool
    basis: str
    similarity: float
    explanation: str


def load_pairs(path: Path = PAIRS) -> list[dict[str, Any]]:
    pairs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for p in pairs:
        missing = {"id", "lang", "subclass", "split", "a", "b", "supersede"} - set(p)
        if missing:
            raise ValueError(f"{p.get('id')}: missing {sorted(missing)}")
    return pairs


async def run_pairs(address: str, prefix: str = "ct-") -> list[PairResult]:
    out: list[PairResult] = []
    async with AsyncEngramClient(address, timeout=60) as client:
        for p in load_pairs():
            coll = (prefix + re.sub(r"[^a-z0-9_-]", "-", p["id"].lower()))[:64]
            first = await client.add(p["a"], collection=coll)
            second = await client.add(p["b"], collection=coll)
            hit = next((c for c in second.conflicts if c.memory_id == first.memory.id), None)
            out.append(
                PairResult(
                    p["id"],
                    p["lang"],
                    p["subclass"],
                    p["split"],
                    bool(p["supersede"]),
                    hit is not None and hit.superseded,
                    hit.basis if hit else "",
                    round(hit.similarity, 3) if hit else 0.0,
                    hit.explanation if hit else "",
                )
            )
    return out


def scores(results: Sequence[PairResult]) -> dict[str, Any]:
    tp = sum(r.expected and r.superseded for r in results)
    fp = sum(not r.expected and r.superseded for r in results)
    fn = sum(r.expected and not r.superseded for r in results)
    return {
        "pairs": len(results),
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "precision": round(tp / (tp + fp), 3) if tp + fp else None,
        "recall": round(tp / (tp + fn), 3) if tp + fn else None,
    }


def summarise(results: Sequence[PairResult]) -> dict[str, Any]:
    groups: dict[str, Any] = {"all": scores(results)}
    for key in ("split", "lang"):
        for value in sorted({getattr(r, key) for r in results}):
            groups[f"{key}={value}"] = scores([r for r in results if getattr(r, key) == value])
    return groups


def to_markdown(summary: dict[str, Any], results: Sequence[PairResult], label: str) -> str:
    lines = [
        "# Contradiction pairs",
        "",
        label,
        "",
        "| group | pairs | superseded right | wrongly | missed | precision | recall |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, g in summary.items():
        cells = [name, g["pairs"], g["tp"], g["fp"], g["fn"], g["precision"], g["recall"]]
        lines.append("| " + " | ".join(str(x) for x in cells) + " |")
    lines += [
        "",
        "| pair | split | expected | superseded | basis | similarity |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        cells = [r.id, r.split, r.expected, r.superseded, r.basis, r.similarity]
        lines.append("| " + " | ".join(str(x) for x in cells) + " |")
    return "\n".join(lines) + "\n"


async def run_in_process(**settings: Any) -> list[PairResult]:
    from engram_server.testing import running_server  # noqa: PLC0415 - server only when in-process

    with tempfile.TemporaryDirectory(prefix="engram-contradictions-") as tmp:
        async with running_server(Path(tmp) / "data", **settings) as server:
            return await run_pairs(server.address)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.contradiction_pairs")
    parser.add_argument("--address", help="run against this server instead of an in-process one")
    parser.add_argument("--out", type=Path, default=Path("results/eval"), help="report directory")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.address:
        results = asyncio.run(run_pairs(args.address, prefix=f"ct{uuid.uuid4().hex[:6]}-"))
        label = f"Run against {args.address}"
    else:
        from engram_server.config import env_overrides  # noqa: PLC0415 - server only when in-process

        results = asyncio.run(run_in_process(**env_overrides()))
        label = "Run against an in-process server (embedded Qdrant, local model)"
    label += f" at {datetime.now(UTC).isoformat(timespec='seconds')}; {time.perf_counter() - started:.1f} s."
    summary = summarise(results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "contradiction_pairs.json").write_text(
        json.dumps({"summary": summary, "pairs": [asdict(r) for r in results]}, ensure_ascii=False, indent=1),
        encoding="utf-8",
    )
    (args.out / "contradiction_pairs.md").write_text(to_markdown(summary, results, label), encoding="utf-8")
    for name, g in summary.items():
        print(f"{name:14s} {g}")
    for r in results:
        if r.expected != r.superseded:
            print(f"WRONG {r.id} ({r.split}) expected {r.expected}: {r.basis} {r.similarity} {r.explanation}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
