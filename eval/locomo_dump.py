"""Dump Engram's top-N per LoCoMo question (through the API, as eval.locomo ingests) for offline
reranking experiments: ``python -m eval.locomo_dump --conversations tune --out /tmp/dump.json``."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from eval import locomo


async def dump(data: Path, select: str, depth: int) -> dict[str, object]:
    from engram_server.config import env_overrides  # noqa: PLC0415

    data_file, audit = locomo.data_paths(data, None)
    convs, _ = locomo.load_conversations(data_file, select, audit)
    out: dict[str, object] = {}
    async with locomo.serving(convs, env_overrides(), "engram-dump-") as (_server, client, clock, embedder):
        for conv in convs:
            clock.set(conv.ask_at.timestamp())
            col = locomo.collection_of(conv)
            await embedder.embed_documents([t.content for t in conv.turns])
            await embedder.embed_queries([q.question for q in conv.questions])
            for t in conv.turns:
                await locomo.add_turn(client, conv, t)
            qs = []
            for q in conv.questions:
                row: dict[str, object] = {
                    "q": q.question,
                    "cat": q.category,
                    "ev": list(q.evidence),
                }
                for lim in (10, depth):
                    hits = await client.search(q.question, collections=[col], limit=lim)
                    row[f"top{lim}"] = [
                        [
                            h.memory.metadata.get("dia_id", ""),
                            h.score.final,
                            h.score.relevance,
                            h.score.lexical,
                            h.score.episode,
                            h.score.recency,
                            h.score.raw_similarity,
                        ]
                        for h in hits
                    ]
                qs.append(row)
            out[conv.sample_id] = {
                "turns": [
                    [t.dia_id, t.session, t.speaker, t.content, t.created_at.isoformat()] for t in conv.turns
                ],
                "questions": qs,
            }
            print(conv.sample_id, len(qs), flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data", type=Path, default=locomo.DEFAULT_DATA)
    p.add_argument("--conversations", default="tune")
    p.add_argument("--depth", type=int, default=50)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    res = asyncio.run(dump(a.data, a.conversations, a.depth))
    a.out.write_text(json.dumps(res), encoding="utf-8")


if __name__ == "__main__":
    main()
