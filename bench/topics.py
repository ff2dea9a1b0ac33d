"""Cost of the topic index at N memories: each incremental change (add, update, delete), the
re-clusterings it triggers, and a full rebuild — on clustered data built from real embeddings.

    .venv/bin/python -m bench.topics --n 10000,100000 --json results/bench/topics.json

**Data.** The 96 labelled memories of ``eval/topics/subjects.jsonl`` (8 subjects — cooking,
Kubernetes, a Japan trip, fitness, finance, Python style, family, guitar — a third of them in
Chinese) are embedded once with the real local model (e5 ``passage:`` path). Each of the N
memories takes one of them as its centre and gets the vector
``normalise(0.75 e(centre) + 0.25 e(other) + noise)``, ``other`` another memory of the same subject
and the noise Gaussian (σ = ``--noise`` per dimension, default 0.015), and the centre's text with
a serial number (so script detection, jieba and the salient terms do the server's work on real
words). Such data forms topics the size of a subject or of a part of one (the report gives the
number of leaf and top-level topics, their median size, and purity / NMI against the subjects),
which is what a real store of one user's memories looks like — not one topic per memory.

**Measured** on the index itself (``engram_server.domain.topics.TopicIndex``: what the server runs
on the write path's changes; the embedding and the store reads are paid by the write already):

- ``add``: N memories arrive one by one (shuffled), the automatic re-clusterings included
  (amortised in the mean; the p99 shows them);
- ``update``: 1,000 existing memories re-written with another centre's vector and text;
- ``delete``: 1,000 memories removed;
- ``rebuild``: a full re-clustering of the final index (``recluster``; what a restart without the
  persisted centroids pays, and what the automatic re-clustering costs when it fires).

Times are wall-clock; the CPU seconds of the build and of the rebuild are given too (on a shared
machine the wall-clock can be many times the CPU). Run it beside nothing else if you can, and
compare the figures of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engram_server.domain.topics import TopicIndex
from eval.topics import load_subjects, nmi, purity

CHANGES = 1_000


async def embed_subjects() -> tuple[list[str], list[str], np.ndarray]:
    from engram_server.adapters.embedding.local import LocalE5Embedder  # noqa: PLC0415

    _, texts, labels = load_subjects()
    embedder = LocalE5Embedder()
    try:
        vecs = await embedder.embed_documents(texts)
    finally:
        await embedder.close()
    return texts, labels, np.asarray(vecs, dtype=np.float64)


def corpus(
    n: int, texts: list[str], labels: list[str], base: np.ndarray, *, noise: float, rng: np.random.Generator
) -> tuple[np.ndarray, list[str], list[str]]:
    by_subject: dict[str, list[int]] = {}
    for i, lab in enumerate(labels):
        by_subject.setdefault(lab, []).append(i)
    centre = rng.integers(0, len(texts), size=n)
    other = np.array([rng.choice(by_subject[labels[c]]) for c in centre])
    vecs = 0.75 * base[centre] + 0.25 * base[other] + rng.normal(scale=noise, size=(n, base.shape[1]))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    out_texts = [f"{texts[c]} (#{i})" for i, c in enumerate(centre)]
    return vecs.astype(np.float32), out_texts, [labels[c] for c in centre]


def ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "mean_ms": round(statistics.fmean(values) * 1000, 3),
        "p50_ms": round(ordered[len(ordered) // 2] * 1000, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3),
    }


def measure(
    n: int, texts: list[str], labels: list[str], base: np.ndarray, *, noise: float, seed: int
) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    vecs, mem_texts, mem_labels = corpus(n, texts, labels, base, noise=noise, rng=rng)
    index = TopicIndex(base.shape[1])
    adds: list[float] = []
    cpu0 = time.process_time()
    for i in range(n):
        t0 = time.perf_counter()
        index.upsert(f"m{i}", vecs[i], mem_texts[i], valid_until=math.inf, updated_at=i, now=i, created_at=i)
        adds.append(time.perf_counter() - t0)
    build_cpu = time.process_time() - cpu0
    ids = [f"m{i}" for i in range(n)]
    leaves = [index.topic_of(i) or "" for i in ids]
    roots = []
    for leaf in leaves:
        v = index.view(leaf)
        roots.append((v.parent_id or v.id) if v else "")
    sizes = sorted(Counter(leaves).values())
    n_leaves, n_parents = index.topic_count()
    quality = {
        "leaf_topics": n_leaves,
        "parent_topics": n_parents,
        "top_level_topics": len(index.roots()),
        "leaf_size_median": sizes[len(sizes) // 2],
        "leaf_size_max": sizes[-1],
        "leaves_of_one_memory": sum(1 for x in sizes if x == 1),
        "leaf_purity": round(purity(mem_labels, leaves), 3),
        "leaf_nmi": round(nmi(mem_labels, leaves), 3),
        "top_purity": round(purity(mem_labels, roots), 3),
        "top_nmi": round(nmi(mem_labels, roots), 3),
    }
    pick = random.Random(seed)
    updates: list[float] = []
    extra, extra_texts, _ = corpus(CHANGES, texts, labels, base, noise=noise, rng=rng)
    for k, i in enumerate(pick.sample(range(n), min(CHANGES, n))):
        t0 = time.perf_counter()
        index.upsert(f"m{i}", extra[k], extra_texts[k], valid_until=math.inf, updated_at=n + k, now=n + k)
        updates.append(time.perf_counter() - t0)
    t0, cpu0 = time.perf_counter(), time.process_time()
    index.recluster(float(2 * n))
    rebuild, rebuild_cpu = time.perf_counter() - t0, time.process_time() - cpu0
    deletes: list[float] = []
    for i in pick.sample(range(n), min(CHANGES, n)):
        t0 = time.perf_counter()
        index.remove(f"m{i}")
        deletes.append(time.perf_counter() - t0)
    return {
        "memories": n,
        "noise": noise,
        **quality,
        "add": ms(adds),
        "build_incrementally_s": round(sum(adds), 2),
        "build_incrementally_cpu_s": round(build_cpu, 2),
        "update": ms(updates),
        "delete": ms(deletes),
        "full_rebuild_s": round(rebuild, 2),
        "full_rebuild_cpu_s": round(rebuild_cpu, 2),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.topics", description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", default="10000", help="comma-separated sizes")
    parser.add_argument("--noise", type=float, default=0.015)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    texts, labels, base = asyncio.run(embed_subjects())
    results = []
    for n in (int(x) for x in args.n.split(",")):
        result = measure(n, texts, labels, base, noise=args.noise, seed=args.seed)
        print(json.dumps(result), flush=True)
        results.append(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
