"""Cross-lingual offset of a model's query-vs-memory cosine (``make``-free: run it directly).

    .venv/bin/python eval/calibration/crosslingual.py

``pairs_crosslingual.jsonl`` holds English questions with the Chinese translation of a memory that
answers them, one on the same topic and one unrelated (45 pairs), each beside the English original
(``same_language_memory``). For every class the script compares the raw cosine of the question with
the translation and with the original; the median gap, averaged over the three classes, is the
model's cross-script offset: search adds it to the raw cosine of a memory written in another script
than the query before calibrating (``CROSS_SCRIPT_OFFSET`` in engram_server/domain/calibration.py).
"""

from __future__ import annotations

import asyncio
import json
import statistics
from pathlib import Path

from engram_server.adapters.embedding.local import LocalE5Embedder

PAIRS = Path(__file__).with_name("pairs_crosslingual.jsonl")


async def main() -> None:
    rows = [json.loads(line) for line in PAIRS.read_text(encoding="utf-8").splitlines() if line.strip()]
    for variant in ("original", "enpt"):
        embedder = LocalE5Embedder(variant)
        queries = await embedder.embed_queries([r["query"] for r in rows])
        cross = await embedder.embed_documents([r["memory"] for r in rows])
        same = await embedder.embed_documents([r["same_language_memory"] for r in rows])
        gaps: dict[str, list[float]] = {}
        for i, r in enumerate(rows):
            gaps.setdefault(r["label"], []).append(float(same[i] @ queries[i]) - float(cross[i] @ queries[i]))
        medians = {label: statistics.median(v) for label, v in gaps.items()}
        offset = statistics.mean(medians.values())
        print(f"{embedder.model_id}: median gap same − cross by class {medians}; offset {offset:.4f}")
        await embedder.close()


if __name__ == "__main__":
    asyncio.run(main())
