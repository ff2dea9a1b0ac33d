"""Cross-lingual retrieval check: questions whose answer is stored in the other script.

    .venv/bin/python -m eval.crosslingual_retrieval

Data (hand-written calibration pairs, none taken from the regression taskset):

* ``eval/calibration/pairs_crosslingual.jsonl``: 15 English questions, each with the Chinese translation
  of an answering, a same-topic and an unrelated memory (EN -> ZH);
* ``eval/calibration/pairs_crosslingual_zh_en.jsonl``: 22 Chinese questions, each with the English
  translation of an answering, a same-topic and an unrelated memory (ZH -> EN);
* the English memories of the ``pairs_query.jsonl`` groups that have no translation (en-15 … en-22).

All 135 memories go into one collection (as insights: facts, so episode context plays no part) of an
in-process server on the real components (embedded Qdrant, the local model, hybrid search). Every
question is asked once; its answer competes with 3 × (other groups) memories in its own language that
may share words with the question, and with the other groups' translations. Reported per direction:
hit@1 / hit@3 / MRR of the answer (rank over the whole collection), and for the question's own
unrelated translation how often it is among the first 50 results and how often its relevance reaches
0.6 (the middle between same topic and answer on the calibrated query scale), to see that
cross-script memories are not lifted indiscriminately.

Split: the questions of even-numbered groups (en-00, en-02, …, zh-00, …) are the **tune** half, the
odd-numbered ones the **report** half (fixed before any ranking choice was measured on them); each
direction is reported per half and overall. Ranking choices are made on the tune half only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engram_client import AsyncEngramClient, NewMemory

HERE = Path(__file__).resolve().parent / "calibration"
EN_ZH = HERE / "pairs_crosslingual.jsonl"
ZH_EN = HERE / "pairs_crosslingual_zh_en.jsonl"
QUERY_PAIRS = HERE / "pairs_query.jsonl"
COLLECTION = "xlingual"
DEPTH = 50
BATCH = 64

Row = dict[str, Any]


def _rows(path: Path) -> list[Row]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def corpus() -> tuple[list[str], dict[str, list[Row]]]:
    """The memories of the collection and, per direction, the cross-lingual rows (3 per question)."""
    directions = {"en->zh": _rows(EN_ZH), "zh->en": _rows(ZH_EN)}
    translated = {r["group"] for rows in directions.values() for r in rows}
    extra = [r["memory"] for r in _rows(QUERY_PAIRS) if r["lang"] == "en" and r["group"] not in translated]
    memories = [r["memory"] for rows in directions.values() for r in rows] + extra
    return list(dict.fromkeys(memories)), directions


async def run(address: str) -> dict[str, dict[str, float]]:
    memories, directions = corpus()
    report: dict[str, dict[str, float]] = {}
    async with AsyncEngramClient(address, timeout=60) as client:
        # A text the write gate finds a near-copy of is not written twice: it maps to the stored one.
        stored: dict[str, str] = {}
        for i in range(0, len(memories), BATCH):
            batch = memories[i : i + BATCH]
            news = [NewMemory(t, type="insight") for t in batch]
            added = await client.add_many(news, collection=COLLECTION)
            stored.update((t, r.memory.id) for t, r in zip(batch, added, strict=True))
        for direction, rows in directions.items():
            groups: dict[str, dict[str, Row]] = {}
            for r in rows:
                groups.setdefault(r["group"], {})[r["label"]] = r
            ranks: list[int | None] = []
            unrelated: list[float | None] = []
            halves: list[str] = []
            for name, g in groups.items():
                halves.append(split_of(name))
                results = await client.search(g["answer"]["query"], collections=COLLECTION, limit=DEPTH)
                ids = [x.memory.id for x in results]
                answer = stored[g["answer"]["memory"]]
                ranks.append(ids.index(answer) + 1 if answer in ids else None)
                rel = {x.memory.id: x.score.relevance for x in results}
                unrelated.append(rel.get(stored[g["unrelated"]["memory"]]))
            for half in ("tune", "report", "all"):
                keep = [i for i, h in enumerate(halves) if half in ("all", h)]
                report[f"{direction} {half}"] = _measures(
                    [ranks[i] for i in keep], [unrelated[i] for i in keep]
                )
    return report


def split_of(group: str) -> str:
    """``"tune"`` for an even-numbered group ("en-00", "zh-14"), ``"report"`` for an odd one."""
    return "tune" if int(group.rsplit("-", 1)[1]) % 2 == 0 else "report"


def _measures(ranks: Sequence[int | None], unrelated: Sequence[float | None]) -> dict[str, float]:
    n = max(1, len(ranks))
    return {
        "questions": len(ranks),
        "hit@1": sum(1 for r in ranks if r is not None and r <= 1) / n,
        "hit@3": sum(1 for r in ranks if r is not None and r <= 3) / n,
        "mrr": sum(1.0 / r for r in ranks if r is not None) / n,
        "unrelated_in_top": sum(1 for u in unrelated if u is not None),
        "unrelated_at_0.6": sum(1 for u in unrelated if u is not None and u >= 0.6),
    }


async def run_in_process() -> dict[str, dict[str, float]]:
    from engram_server.testing import running_server  # noqa: PLC0415 - server only when in-process

    with tempfile.TemporaryDirectory(prefix="engram-xlingual-") as tmp:
        async with running_server(Path(tmp) / "data") as server:
            return await run(server.address)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.crosslingual_retrieval", description=__doc__)
    parser.parse_args(argv)
    report = asyncio.run(run_in_process())
    print(
        f"| direction, half | questions | hit@1 | hit@3 | MRR | unrelated in top {DEPTH} | unrelated ≥ 0.6 |"
    )
    print("|---|---|---|---|---|---|---|")
    for direction, r in report.items():
        print(
            f"| {direction} | {r['questions']:.0f} | {r['hit@1']:.3f} | {r['hit@3']:.3f} | {r['mrr']:.3f} "
            f"| {r['unrelated_in_top']:.0f} | {r['unrelated_at_0.6']:.0f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
