"""How much of the cross-script offset a mixed-script memory needs (run it directly).

    .venv/bin/python eval/calibration/mixed_offset.py

``pairs_crosslingual_mixed.jsonl``: the Chinese questions of the ``fit`` groups of
``pairs_query.jsonl`` with their three memories (answer / same topic / unrelated) written three ways:
in Chinese (``same_language_memory``), in English (``translation``, from
``pairs_crosslingual_zh_en.jsonl``) and code-switched, Chinese grammar with English content words
(``memory``: "server 的 disk usage 超过 eighty percent 时要 raise alert。"). No row is taken from
the regression taskset; the ``test`` groups have no mixed rows (nothing here is reported on them).

For every row whose mixed text is mainly Latin (``script_tag`` ``latin+cjk``: the memories search
gave the Chinese question's full cross-script offset) it takes the question's raw cosine with the
Chinese memory minus with the mixed one (the mixed gap). As ``crosslingual.py`` does for the full
offset, the median gap of each class, averaged over the three classes, is the offset such a
memory would need for a ``cjk`` question (measured, not applied: see docs/calibration.md). For
comparison it also fits ``k`` in ``gap_mixed ≈ k · latin_share · gap_full`` (least squares through
the origin; ``gap_full`` with the English translation, ``latin_share`` the mixed text's share of Latin
words): k ≈ 1 would mean interpolating the full offset by the share of English words is right.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from pathlib import Path

from engram_server.adapters.embedding.local import LocalE5Embedder
from engram_server.domain.text import script_tag, word_counts

HERE = Path(__file__).resolve().parent
PAIRS = HERE / "pairs_crosslingual_mixed.jsonl"


async def main() -> None:
    rows = [json.loads(line) for line in PAIRS.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [r for r in rows if script_tag(r["memory"]) == "latin+cjk"]
    embedder = LocalE5Embedder("original")
    q = await embedder.embed_queries([r["query"] for r in rows])
    zh = await embedder.embed_documents([r["same_language_memory"] for r in rows])
    mx = await embedder.embed_documents([r["memory"] for r in rows])
    en = await embedder.embed_documents([r["translation"] for r in rows])
    num = den = 0.0
    ratios: dict[str, list[float]] = {}
    mixed_gaps: dict[str, list[float]] = {}
    for i, r in enumerate(rows):
        cjk, latin = word_counts(r["memory"])
        share = latin / (cjk + latin)
        base = float(zh[i] @ q[i])
        g_mixed, g_full = base - float(mx[i] @ q[i]), base - float(en[i] @ q[i])
        num += g_mixed * share * g_full
        den += (share * g_full) ** 2
        ratios.setdefault(r["label"], []).append(g_mixed / g_full if g_full else 0.0)
        mixed_gaps.setdefault(r["label"], []).append(g_mixed)
        print(f"{r['id']:<22} latin share {share:.2f}  gap mixed {g_mixed:+.4f}  gap full {g_full:+.4f}")
    k = num / den
    medians = {label: round(statistics.median(v), 4) for label, v in mixed_gaps.items()}
    offset = statistics.mean(medians.values())
    ratio = {label: round(statistics.median(v), 3) for label, v in ratios.items()}
    print(
        f"{embedder.model_id} cjk -> latin+cjk ({len(rows)} rows): median mixed gap by class {medians}; "
        f"offset {offset:.4f}; k = {k:.3f}; median gap_mixed / gap_full by class {ratio}"
    )
    await embedder.close()


if __name__ == "__main__":
    asyncio.run(main())
