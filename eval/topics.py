"""Topic index quality against labels: purity and NMI of the leaf and top-level topics.

Two labelled sets:

- ``eval/topics/subjects.jsonl``: 96 memories written per subject (8 subjects: cooking,
  Kubernetes, a Japan trip, fitness, finance, Python style, family, guitar), a third of them in
  Chinese, so a good topic holds one subject in both languages;
- LoCoMo (``--locomo``, read at run time from ``../shared/data/locomo``, never copied here): each
  conversation's turns as memories, labelled by their session (a session talks about a few things,
  so this is a harder, noisier label).

The index is built the two ways the server builds it: incrementally (memories arrive one by one in
a shuffled order, as writes do) and by a full rebuild. Embeddings come from the configured embedder
(the local multilingual-e5-small by default)::

    python -m eval.topics                       # the subject set
    python -m eval.topics --sweep               # the subject set over a grid of thresholds
    python -m eval.topics --locomo ../shared/data/locomo --conversations 3

Purity: the share of memories whose topic's majority label is their own (1.0 when every topic
holds one label; many singleton topics also score high, hence NMI, which penalises both merging
and over-splitting, and the number of topics).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engram_server.domain.topics import TopicIndex, TopicParams

SUBJECTS = Path(__file__).resolve().parent / "topics" / "subjects.jsonl"
DEFAULT_LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo"


def purity(labels: Sequence[str], clusters: Sequence[str]) -> float:
    by: dict[str, Counter[str]] = defaultdict(Counter)
    for lab, c in zip(labels, clusters, strict=True):
        by[c][lab] += 1
    return sum(cnt.most_common(1)[0][1] for cnt in by.values()) / len(labels)


def nmi(labels: Sequence[str], clusters: Sequence[str]) -> float:
    """Normalised mutual information (arithmetic mean normalisation, as scikit-learn's default)."""
    n = len(labels)
    joint = Counter(zip(labels, clusters, strict=True))
    pl, pc = Counter(labels), Counter(clusters)
    mi = sum(c / n * math.log(c * n / (pl[a] * pc[b])) for (a, b), c in joint.items())
    hl = -sum(c / n * math.log(c / n) for c in pl.values())
    hc = -sum(c / n * math.log(c / n) for c in pc.values())
    denom = (hl + hc) / 2
    return mi / denom if denom > 0 else 1.0


def score(index: TopicIndex, ids: Sequence[str], labels: Sequence[str]) -> dict[str, Any]:
    leaves = [index.topic_of(i) or "" for i in ids]
    roots = []
    for leaf in leaves:
        v = index.view(leaf)
        roots.append(v.parent_id or v.id if v else "")
    n_leaves, n_parents = index.topic_count()
    return {
        "leaf_topics": n_leaves,
        "top_topics": len(index.roots()),
        "parents": n_parents,
        "leaf_purity": round(purity(labels, leaves), 3),
        "leaf_nmi": round(nmi(labels, leaves), 3),
        "top_purity": round(purity(labels, roots), 3),
        "top_nmi": round(nmi(labels, roots), 3),
    }


def evaluate(
    ids: Sequence[str],
    texts: Sequence[str],
    vectors: np.ndarray,
    labels: Sequence[str],
    *,
    params: TopicParams,
    seed: int = 7,
) -> dict[str, Any]:
    dim = vectors.shape[1]
    order = list(range(len(ids)))
    random.Random(seed).shuffle(order)
    inc = TopicIndex(dim, params)
    for k, i in enumerate(order):
        inc.upsert(ids[i], vectors[i], texts[i], valid_until=math.inf, updated_at=k, now=k, created_at=k)
    full = TopicIndex(dim, params)
    full.rebuild(
        [(ids[i], vectors[i], texts[i], math.inf, float(k), float(k)) for k, i in enumerate(order)], now=0.0
    )
    return {
        "incremental": score(inc, ids, labels),
        "rebuild": score(full, ids, labels),
        "names": [(v.name, v.size) for v in full.roots()[:12]],
    }


async def embed(texts: Sequence[str]) -> np.ndarray:
    from engram_server.app import build_embedder  # noqa: PLC0415
    from engram_server.config import Settings, env_overrides  # noqa: PLC0415

    embedder = build_embedder(Settings(**env_overrides()))
    try:
        out = [await embedder.embed_documents(list(texts[i : i + 64])) for i in range(0, len(texts), 64)]
    finally:
        await embedder.close()
    return np.concatenate(out).astype(np.float64)


def load_subjects() -> tuple[list[str], list[str], list[str]]:
    rows = [json.loads(line) for line in SUBJECTS.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [f"s{i}" for i in range(len(rows))], [r["content"] for r in rows], [r["subject"] for r in rows]


def load_locomo(path: Path, conversations: int) -> list[tuple[str, list[str], list[str], list[str]]]:
    from eval.locomo import data_paths, load_conversations  # noqa: PLC0415

    data, _ = data_paths(path, None)
    convs, _ = load_conversations(data, str(conversations))
    return [
        (
            c.sample_id,
            [t.dia_id for t in c.turns],
            [t.content for t in c.turns],
            [f"session_{t.session}" for t in c.turns],
        )
        for c in convs
    ]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m eval.topics", description=__doc__.split("\n\n")[0])
    parser.add_argument("--leaf", type=float, default=TopicParams().leaf_threshold)
    parser.add_argument("--parent", type=float, default=TopicParams().parent_threshold)
    parser.add_argument("--sweep", action="store_true", help="the subject set over a threshold grid")
    parser.add_argument("--locomo", type=Path, help="a LoCoMo file or directory (e.g. ../shared/data/locomo)")
    parser.add_argument("--conversations", type=int, default=3)
    args = parser.parse_args()
    params = TopicParams(leaf_threshold=args.leaf, parent_threshold=args.parent)
    report: dict[str, Any] = {"params": {"leaf": args.leaf, "parent": args.parent}}
    ids, texts, labels = load_subjects()
    vectors = asyncio.run(embed(texts))
    if args.sweep:
        grid = []
        for leaf in (0.15, 0.2, 0.25, 0.3, 0.35):
            for parent in (0.1, 0.15, 0.2):
                r = evaluate(
                    ids,
                    texts,
                    vectors,
                    labels,
                    params=TopicParams(leaf_threshold=leaf, parent_threshold=parent),
                )
                grid.append({"leaf": leaf, "parent": parent, **{k: r[k] for k in ("incremental", "rebuild")}})
        report["sweep"] = grid
    else:
        report["subjects"] = evaluate(ids, texts, vectors, labels, params=params)
    if args.locomo:
        rows = []
        for sample_id, cids, ctexts, clabels in load_locomo(args.locomo, args.conversations):
            cvec = asyncio.run(embed(ctexts))
            r = evaluate(cids, ctexts, cvec, clabels, params=params)
            rows.append(
                {"conversation": sample_id, "memories": len(cids), "sessions": len(set(clabels)), **r}
            )
        report["locomo"] = rows
    print(json.dumps(report, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
