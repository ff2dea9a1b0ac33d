"""Cross-lingual offsets of a model's query-vs-memory cosine, per direction (run it directly).

    .venv/bin/python eval/calibration/crosslingual.py

Two files of hand-written pairs (none taken from the regression taskset), each row a question, a memory
written in the other script than the question (``memory``) and the same memory in the question's own
script (``same_language_memory``), labelled answer / same_topic / unrelated:

* ``pairs_crosslingual.jsonl`` (latin -> cjk): 15 English questions of ``pairs_query.jsonl`` (en-00 …
  en-14) with the Chinese translation of an answering, a same-topic and an unrelated memory (45 rows);
* ``pairs_crosslingual_zh_en.jsonl`` (cjk -> latin): the 22 Chinese questions of ``pairs_query.jsonl``
  (zh-00 … zh-21) with the English translation of their three memories (66 rows).

For every direction and class the script compares the raw cosine of the question with the translation
and with the original; the median paired gap, averaged over the three classes, is the model's
cross-script offset in that direction: search adds it to the raw cosine of a memory written in another
script than the query before calibrating (``CROSS_SCRIPT_OFFSET`` in engram_server/domain/calibration.py).
The same figure over the ``fit`` and the ``test`` groups of ``pairs_query.jsonl`` separately shows how
stable it is.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from pathlib import Path
from typing import Any

from engram_server.adapters.embedding.local import LocalE5Embedder

HERE = Path(__file__).resolve().parent
DIRECTIONS = {
    ("latin", "cjk"): HERE / "pairs_crosslingual.jsonl",
    ("cjk", "latin"): HERE / "pairs_crosslingual_zh_en.jsonl",
}
QUERY_PAIRS = HERE / "pairs_query.jsonl"


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _offset(gaps: list[tuple[str, float]]) -> tuple[float, dict[str, float]]:
    by: dict[str, list[float]] = {}
    for label, gap in gaps:
        by.setdefault(label, []).append(gap)
    medians = {label: round(statistics.median(v), 4) for label, v in by.items()}
    return round(statistics.mean(medians.values()), 4), medians


async def main() -> None:
    split = {r["group"]: r["split"] for r in _rows(QUERY_PAIRS)}
    for variant in ("original", "enpt"):
        embedder = LocalE5Embedder(variant)
        offsets: dict[tuple[str, str], float] = {}
        for direction, path in DIRECTIONS.items():
            rows = _rows(path)
            queries = await embedder.embed_queries([r["query"] for r in rows])
            cross = await embedder.embed_documents([r["memory"] for r in rows])
            same = await embedder.embed_documents([r["same_language_memory"] for r in rows])
            gaps = [
                (r["label"], float(same[i] @ queries[i]) - float(cross[i] @ queries[i]), split[r["group"]])
                for i, r in enumerate(rows)
            ]
            offset, medians = _offset([(label, gap) for label, gap, _ in gaps])
            halves = {
                part: _offset([(label, gap) for label, gap, s in gaps if s == part])[0]
                for part in ("fit", "test")
            }
            print(
                f"{embedder.model_id} {direction[0]} -> {direction[1]} ({len(rows)} pairs): "
                f"median gap same − cross by class {medians}; offset {offset:.4f} "
                f"(fit groups {halves['fit']:.4f}, test groups {halves['test']:.4f})"
            )
            offsets[direction] = offset
        print(f"{embedder.model_id}: {offsets}")
        await embedder.close()


if __name__ == "__main__":
    asyncio.run(main())
