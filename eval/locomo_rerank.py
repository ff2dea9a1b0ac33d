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
    .venv/bin/python -m eval.locomo_rerank adaptive /tmp/dump.json /tmp/ce.json    # shorter heads
    .venv/bin/python -m eval.locomo_rerank truncation /tmp/dump.json /tmp/ce.json  # cut pairs

``adaptive`` replays rules that read fewer pairs (a shorter head, or none when the first result
leads clearly); ``truncation`` scores again the pairs longer than each cut. ``score`` cuts pairs
at ``--max-tokens`` (512 by default: uncut).
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
    dump: Json, convs: tuple[str, ...], depth: int, variant: str, threads: int, *, max_tokens: int
) -> dict[str, list[float]]:
    from engram_server.adapters.rerank import CrossEncoderReranker  # noqa: PLC0415

    model = CrossEncoderReranker(threads=threads, max_tokens=max_tokens, cache_pairs=0)
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


def adaptive(dump: Json, ce: dict[str, list[float]], convs: tuple[str, ...]) -> None:
    """Fewer pairs a search: R@10 and pairs read by rules that shorten or skip the head from the
    fused scores alone (the gap between the first two results; the results within δ of the first)."""
    server = recalls(dump, ce, convs, rrf(10.0), 30)
    qs = list(_questions(dump, convs))

    def head(finals: npt.NDArray[np.float64], rule: str, x: float, low: int) -> int:
        if rule == "depth":
            return int(x)
        if rule == "gap":  # none when the first leads the second by x or more
            return 0 if finals[0] - finals[1] >= x else 30
        return max(low, int((finals >= finals[0] - x).sum()))  # "within": those within x of the first

    def run(name: str, rule: str, x: float, low: int = 0) -> None:
        got, pairs = [], []
        for cid, qi, q in qs:
            hits = q["top50"]
            finals = np.asarray([h[1] for h in hits], dtype=np.float64)
            n = min(head(finals, rule, x, low), len(hits), 30)
            order = list(range(len(hits)))
            if n > 1:
                logits = np.asarray(ce[f"{cid}|{qi}"][:n], dtype=np.float64)
                order = rrf(10.0)(logits, finals[:n]) + order[n:]
            pairs.append(n if n > 1 else 0)
            got.append(locomo.recall(q["ev"], {hits[i][0] for i in order[:10]}))
        d = np.asarray(got) - server
        print(
            f"{name:30s} R@10 {np.mean(got):.4f}  vs server {d.mean():+.4f} {boot(d)}",
            f" pairs {np.mean(pairs):4.1f}",
        )

    for n in (10, 15, 20, 25, 30):
        run(f"depth {n}", "depth", n)
    for g in (0.02, 0.05, 0.1, 0.15):
        run(f"skip when gap(1st, 2nd) >= {g:g}", "gap", g)
    for delta in (0.1, 0.15, 0.2, 0.25):
        for low in (10, 20):
            run(f"within {delta:g} of the 1st, >= {low}", "within", delta, low)


def truncation(dump: Json, ce: dict[str, list[float]], convs: tuple[str, ...], cuts: list[int]) -> None:
    """R@10 with each pair cut at fewer tokens: only the pairs longer than the cut are scored again
    (the others read the same tokens). ``ce`` must be scored at the default cut or more."""
    from engram_server.adapters.rerank import CrossEncoderReranker  # noqa: PLC0415

    server = recalls(dump, ce, convs, rrf(10.0), 30)
    full = CrossEncoderReranker(max_tokens=512, cache_pairs=0)
    full.score_sync("warm up", ["warm up"])
    for cut in cuts:
        model = CrossEncoderReranker(max_tokens=cut, cache_pairs=0)
        out: dict[str, list[float]] = {}
        n = total = 0
        lengths: list[int] = []
        for cid, qi, q in _questions(dump, convs):
            text = {t[0]: _text(t, "plain") for t in dump[cid]["turns"]}
            texts = [text[h[0]] for h in q["top50"][:30]]
            lens = [len(e.ids) for e in full._tok.encode_batch([(q["q"], t) for t in texts])]
            lengths += lens
            logits = list(ce[f"{cid}|{qi}"])
            cut_here = [i for i, k in enumerate(lens) if k > cut]
            if cut_here:
                for i, x in zip(
                    cut_here, model.score_sync(q["q"], [texts[i] for i in cut_here]), strict=True
                ):
                    logits[i] = x
            out[f"{cid}|{qi}"] = logits
            n += len(cut_here)
            total += len(lens)
        d = recalls(dump, out, convs, rrf(10.0), 30) - server
        print(f"cut at {cut} tokens: {n}/{total} pairs cut; R@10 vs uncut {d.mean():+.4f} {boot(d)}")
    p = np.percentile(lengths, [50, 90, 99])
    print(f"pair lengths (tokens): p50 {p[0]:.0f}, p90 {p[1]:.0f}, p99 {p[2]:.0f}, max {max(lengths)}")


def timing(dump: Json, convs: tuple[str, ...], questions: int = 20) -> None:
    from engram_server.adapters.rerank import CrossEncoderReranker  # noqa: PLC0415

    cid = convs[0]
    text = {t[0]: _text(t, "plain") for t in dump[cid]["turns"]}
    qs = dump[cid]["questions"][:questions]
    for threads in (1, 2):
        model = CrossEncoderReranker(threads=threads, cache_pairs=0)  # every depth read afresh
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
    # the pair cache: a question asked again, then again with one memory more
    model = CrossEncoderReranker()
    model.score_sync("warm up", ["warm up"])
    runs: dict[str, list[float]] = {"first (29 pairs)": [], "same again": [], "again, 1 new": []}
    for q in qs:
        texts = [text[h[0]] for h in q["top50"][:30]]
        for name, part in zip(runs, (texts[:29], texts[:29], texts), strict=True):
            c0 = time.process_time()
            model.score_sync(q["q"], part)
            runs[name].append(time.process_time() - c0)
    print("cache:", ", ".join(f"{k} p50 CPU {1000 * np.median(v):.2f} ms" for k, v in runs.items()))
    # the cost of a pair by its length (random token ids; batches of 8)
    model = CrossEncoderReranker(threads=1, cache_pairs=0)
    model.score_sync("warm up", ["warm up"])
    rng = np.random.default_rng(0)
    row = []
    for n in (32, 48, 64, 96, 128, 256):
        ids = rng.integers(1000, 20000, (8, n))
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        cpu = []
        for _ in range(5):
            c0 = time.process_time()
            model._session.run(["logits"], feed)
            cpu.append(time.process_time() - c0)
        row.append(f"{n} tokens {1000 * np.median(cpu) / 8:.1f} ms")
    print("CPU a pair by length, 1 thread:", ", ".join(row))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("score", "replay", "timing", "adaptive", "truncation"))
    p.add_argument("dump", type=Path)
    p.add_argument("scores", type=Path, nargs="?")
    p.add_argument("--conversations", default="tune", help="tune (default), report, or a comma list")
    p.add_argument("--depth", type=int, default=50)
    p.add_argument("--variant", choices=VARIANTS, default="plain")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=512, help="score: cut each pair at this many tokens")
    p.add_argument("--cuts", default="128,96,64,48", help="truncation: the cuts to replay")
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
        out = score(dump, tuple(convs), a.depth, a.variant, a.threads, max_tokens=a.max_tokens)
        a.scores.write_text(json.dumps(out), encoding="utf-8")
        print(f"{len(out)} questions in {time.perf_counter() - t0:.0f} s")
    elif a.action == "adaptive":
        adaptive(dump, json.loads(a.scores.read_text(encoding="utf-8")), tuple(convs))
    elif a.action == "truncation":
        cuts = [int(x) for x in a.cuts.split(",")]
        truncation(dump, json.loads(a.scores.read_text(encoding="utf-8")), tuple(convs), cuts)
    else:
        replay(dump, json.loads(a.scores.read_text(encoding="utf-8")), tuple(convs))


if __name__ == "__main__":
    main()
