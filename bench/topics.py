"""Cost of the topic index: keeping it current per write, and a full re-clustering, at N memories.

The index itself (engram_server.domain.topics.TopicIndex), fed synthetic memories shaped like real
ones: 384-dimension unit vectors made of a common direction (every sentence model has one) plus a
subject direction plus noise, in ``--subjects`` subjects, a quarter of the texts in Chinese (jieba
runs on them), so the work per memory is that of the server (script detection, words, centring,
nearest leaf, centroid updates, the geometric re-clusterings). Embedding and storage reads are not
included: the server pays those on the write path already (the index reads vectors the write stored).

    python -m bench.topics                 # 10k
    python -m bench.topics --n 100000      # 100k (minutes)

Reports: the mean cost per incremental write (re-clusterings included, amortised), the p50 / p99 of
single writes, a full re-clustering of the final index, and a delete. Run it on a quiet machine and
compare figures measured in one run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import numpy as np

from engram_server.domain.topics import TopicIndex

EN = "deploy cluster kubernetes pod node ingress recipe curry bake dough guitar chord fret scale run marathon knee budget fund invoice tax flight hotel train ticket".split()  # noqa: E501, SIM905
ZH = "部署 集群 容器 菜谱 烘焙 吉他 和弦 跑步 预算 基金 航班 酒店".split()  # noqa: SIM905


def corpus(n: int, subjects: int, dim: int, seed: int) -> tuple[np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    common = rng.normal(size=dim)
    common /= np.linalg.norm(common)
    centres = rng.normal(size=(subjects, dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    labels = rng.integers(0, subjects, size=n)
    vecs = 3.0 * common + 1.2 * centres[labels] + rng.normal(scale=0.9 / math.sqrt(dim), size=(n, dim)) * 8
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    texts = []
    for i, lab in enumerate(labels):
        words = [EN[(lab * 3 + k) % len(EN)] for k in range(3)] + [
            EN[int(x)] for x in rng.integers(0, len(EN), 4)
        ]
        if i % 4 == 0:
            texts.append("用户" + "".join(ZH[(lab + k) % len(ZH)] for k in range(3)) + "的问题。")
        else:
            texts.append("The user noted " + " ".join(words) + f" item {i}.")
    return vecs.astype(np.float32), texts


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.topics", description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--subjects", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    vecs, texts = corpus(args.n, args.subjects, 384, args.seed)
    index = TopicIndex(384)
    single: list[float] = []
    start = time.perf_counter()
    for i in range(args.n):
        t0 = time.perf_counter()
        index.upsert(f"m{i}", vecs[i], texts[i], valid_until=math.inf, updated_at=i, now=i, created_at=i)
        single.append(time.perf_counter() - t0)
    incremental = time.perf_counter() - start
    leaves, parents = index.topic_count()
    t0 = time.perf_counter()
    index.recluster(float(args.n))
    rebuild = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(0, min(args.n, 1000)):
        index.remove(f"m{i}")
    delete = (time.perf_counter() - t0) / min(args.n, 1000)
    single.sort()
    report = {
        "n": args.n,
        "leaf_topics": leaves,
        "parent_topics": parents,
        "write_mean_ms": round(incremental / args.n * 1000, 3),
        "write_p50_ms": round(single[len(single) // 2] * 1000, 3),
        "write_p99_ms": round(single[int(len(single) * 0.99)] * 1000, 3),
        "build_incrementally_s": round(incremental, 2),
        "full_recluster_s": round(rebuild, 2),
        "delete_mean_ms": round(delete * 1000, 3),
        "load_average": os.getloadavg(),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
