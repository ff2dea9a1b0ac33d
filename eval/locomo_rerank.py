"""Offline replay of the cross-encoder reranking on a LoCoMo dump (:mod:`eval.locomo_dump`, made
with ``ENGRAM_RERANK=off`` so that its order is the fused ranking's).

``score`` reads each question's top ``--depth`` with the reranker Engram uses
(:class:`engram_server.adapters.rerank.CrossEncoderReranker`) and caches the logits;
``replay`` reorders the dump's top 50 by each method and prints R@10 (95 % bootstrap interval,
and the paired difference to the server's method), where the evidence sits (top 10 / 11–50 /
absent) by category, and the model's CPU per search by depth. Only the conversations named (by
default the tuning ones, conv-26/41/43) are read::

    ENGRAM_RERANK=off .venv/bin/python -m eval.locomo_dump --conversations tune --out /tmp/dump.json
    .venv/bin/python -m eval.locomo_rerank score /tmp/dump.json /tmp/ce.json --depth 50
    .venv/bin/python -m eval.locomo_rerank replay /tmp/dump.json /tmp/ce.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from eval import locomo

Json = Any
#: What the model reads of a turn: its text (``Speaker: words``), or the text after its date.
VARIANTS = ("plain", "date")


def _text(turn: list[Any], variant: str) -> str:
    _dia, _session, _speaker, content, created = turn
    if variant == "date":
        d = datetime.fromisoformat(created)
        return f"[{d.day} {d:%B %Y}] {content}"
    return str(content)


def _questions(dump: Json, convs: tuple[str, ...]) -> Iterator[tuple[str, int, Json]]:
    for cid in convs:
        for qi, q in enumerate(dump[cid]["questions"]):
            if q["ev"]:
                yield cid, qi, q


def score(
    dump: Json, convs: tuple[str, ...], depth: int, variant: str, threads: int
) -> dict[str, list[float]]:
    from engram_server.adapters.rerank import CrossEncoderReranker  # noqa: PLC0415

    model = CrossEncoderReranker(threads=threads)
    out: dict[str, list[float]] = {}
    for cid, qi, q in _questions(dump, convs):
        text = {t[0]: _text(t, variant) for t in dump[cid]["turns"]}
        out[f"{cid}|{qi}"] = model.score_sync(q["q"], [text[h[0]] for h in q["top50"][:depth]])
    return out


# --- reorderings of a head of n: each returns the head's positions, best first ---------------


def rrf(c: float, w: float = 1.0) -> Callable[[npt.NDArray[np.float64], npt.NDArray[np.float64]], list[int]]:
    """Reciprocal rank fusion of the own rank and the model's (what the server does, w = 1)."""

    def order(logits: npt.NDArray[np.float64], finals: npt.NDArray[np.float64]) -> list[int]:
        del finals
        n = len(logits)
        model_rank = np.empty(n)
        model_rank[np.argsort(-logits, kind="stable")] = np.arange(n)
        fused = 1.0 / (c + np.arange(n)) + w / (c + model_rank)
        return sorted(range(n), key=lambda i: (-fused[i], i))

    return order


def zmix(a: float) -> Callable[[npt.NDArray[np.float64], npt.NDArray[np.float64]], list[int]]:
    """Score interpolation: the z-scored logit plus ``a`` times the z-scored fused final."""

    def order(logits: npt.NDArray[np.float64], finals: npt.NDArray[np.float64]) -> list[int]:
        z = (logits - logits.mean()) / (logits.std() + 1e-9)
        zf = (finals - finals.mean()) / (finals.std() + 1e-9)
        mixed = z + a * zf
        return sorted(range(len(logits)), key=lambda i: (-mixed[i], i))

    return order


def model_only(logits: npt.NDArray[np.float64], finals: npt.NDArray[np.float64]) -> list[int]:
    del finals
    return sorted(range(len(logits)), key=lambda i: (-logits[i], i))


def recalls(
    dump: Json,
    ce: dict[str, list[float]],
    convs: tuple[str, ...],
    method: Callable[[npt.NDArray[np.float64], npt.NDArray[np.float64]], list[int]] | None,
    depth: int,
    *,
    k: int = 10,
) -> npt.NDArray[np.float64]:
    """Per-question R@k of the dump's top 50 with its best ``depth`` reordered by ``method``
    (None: the dump's own order)."""
    out = []
    for cid, qi, q in _questions(dump, convs):
        hits = q["top50"]
        order = list(range(len(hits)))
        if method is not None:
            n = min(depth, len(hits), len(ce[f"{cid}|{qi}"]))
            logits = np.asarray(ce[f"{cid}|{qi}"][:n], dtype=np.float64)
            finals = np.asarray([h[1] for h in hits[:n]], dtype=np.float64)
            order = method(logits, finals) + order[n:]
        got = {hits[i][0] for i in order[:k]}
        out.append(locomo.recall(q["ev"], got))
    return np.asarray(out)


def boot(values: npt.NDArray[np.float64], n: int = 2000, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), (n, len(values)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return round(float(lo), 3), round(float(hi), 3)


def replay(dump: Json, ce: dict[str, list[float]], convs: tuple[str, ...]) -> None:
    names = locomo.CATEGORY_NAMES
    where: dict[str, list[int]] = {}
    for _cid, _qi, q in _questions(dump, convs):
        top10 = {h[0] for h in q["top50"][:10]}
        top50 = {h[0] for h in q["top50"]}
        for e in set(q["ev"]):
            row = where.setdefault(names[q["cat"]], [0, 0, 0])
            row[0 if e in top10 else 1 if e in top50 else 2] += 1
    print("evidence turns by category: [top 10, 11-50, not in the top 50]", where)
    base = recalls(dump, ce, convs, None, 0)
    r50 = recalls(dump, ce, convs, None, 0, k=50).mean()
    print(f"fused order: R@10 {base.mean():.4f} {boot(base)}; R@50 {r50:.4f}")
    server = recalls(dump, ce, convs, rrf(10.0), 30)
    print(f"server (RRF c=10, depth 30): R@10 {server.mean():.4f} {boot(server)}")
    width = max(len(v) for v in ce.values())
    for depth in (10, 15, 20, 25, 30, 40, 50):
        if depth > width:
            continue
        rows: list[tuple[str, npt.NDArray[np.float64]]] = [
            ("model only", recalls(dump, ce, convs, model_only, depth))
        ]
        rows += [(f"rrf c={c:g}", recalls(dump, ce, convs, rrf(c), depth)) for c in (5, 10, 20, 30, 60)]
        rows += [(f"z a={a:g}", recalls(dump, ce, convs, zmix(a), depth)) for a in (0.5, 1.0, 2.0)]
        for name, v in rows:
            d = v - server
            print(f"depth {depth:2d} {name:11s} R@10 {v.mean():.4f} {boot(v)}", end="")
            print(f"  vs server {d.mean():+.4f} {boot(d)}")
    by_cat: dict[str, list[float]] = {}
    for (_cid, _qi, q), r in zip(_questions(dump, convs), server, strict=True):
        by_cat.setdefault(names[q["cat"]], []).append(float(r))
    print("server by category:", {c: (round(float(np.mean(v)), 3), len(v)) for c, v in by_cat.items()})


def timing(dump: Json, convs: tuple[str, ...], questions: int = 20) -> None:
    from engram_server.adapters.rerank import CrossEncoderReranker  # noqa: PLC0415

    cid = convs[0]
    text = {t[0]: _text(t, "plain") for t in dump[cid]["turns"]}
    qs = dump[cid]["questions"][:questions]
    for threads in (1, 2):
        model = CrossEncoderReranker(threads=threads)
        model.score_sync("warm up", ["warm up"])
        for depth in (10, 20, 30):
            wall, cpu = [], []
            for q in qs:
                w0, c0 = time.perf_counter(), time.process_time()
                model.score_sync(q["q"], [text[h[0]] for h in q["top50"][:depth]])
                wall.append(time.perf_counter() - w0)
                cpu.append(time.process_time() - c0)
            print(
                f"threads {threads} depth {depth}: p50 wall {1000 * np.median(wall):.0f} ms, "
                f"p50 CPU {1000 * np.median(cpu):.0f} ms ({len(qs)} questions of {cid})"
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("score", "replay", "timing"))
    p.add_argument("dump", type=Path)
    p.add_argument("scores", type=Path, nargs="?")
    p.add_argument("--conversations", default="tune", help="tune (default), report, or a comma list")
    p.add_argument("--depth", type=int, default=50)
    p.add_argument("--variant", choices=VARIANTS, default="plain")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    convs = {"tune": locomo.TUNE, "report": locomo.REPORT}.get(a.conversations) or tuple(
        a.conversations.split(",")
    )
    dump = json.loads(a.dump.read_text(encoding="utf-8"))
    if a.action == "timing":
        timing(dump, tuple(convs))
        return
    if a.scores is None:
        p.error("score and replay need the scores file")
    if a.action == "score":
        t0 = time.perf_counter()
        out = score(dump, tuple(convs), a.depth, a.variant, a.threads)
        a.scores.write_text(json.dumps(out), encoding="utf-8")
        print(f"{len(out)} questions in {time.perf_counter() - t0:.0f} s")
    else:
        replay(dump, json.loads(a.scores.read_text(encoding="utf-8")), tuple(convs))


if __name__ == "__main__":
    main()
