"""Extra candidate queries for a LoCoMo question, replayed offline on a :mod:`eval.locomo_stages`
pickle: query decomposition (each part of a question that asks about several things), a
statement form of the question (question words and auxiliaries dropped), and WordNet relatives of
the question's words on the BM25 side. Each variant adds the extra queries' dense and BM25 top
candidates to the pool; the pool is then ranked as the server ranks it (:class:`Sim`: the FULL
question's relevance and BM25, episode evidence, fusion, rescoring) and the best 30 are reranked
with the cross-encoder (RRF, as ``Searching._reranked``). Prints pool recall and R@10 (plain and
reranked) by category with the paired difference to the baseline::

    .venv/bin/python -m eval.locomo_stages collect --conversations tune --out /tmp/stages.pkl
    .venv/bin/python -m eval.locomo_decompose /tmp/stages.pkl --ce /tmp/ce_pools.pkl --vectors /tmp/vec.pkl
"""

from __future__ import annotations

import argparse
import asyncio
import pickle
import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from eval import locomo
from eval.locomo_stages import MODEL_ID, Sim

Json = Any

_Q_WORDS = frozenset(
    [
        "what",
        "when",
        "where",
        "who",
        "whom",
        "whose",
        "which",
        "why",
        "how",
        "do",
        "does",
        "did",
        "is",
        "are",
        "was",
        "were",
        "has",
        "have",
        "had",
        "can",
        "could",
        "would",
        "will",
        "should",
        "shall",
        "may",
        "might",
        "must",
        "be",
        "been",
        "being",
        "am",
        "kind",
        "sort",
        "type",
        "of",
        "the",
        "a",
        "an",
    ]
)


def statement_form(q: str) -> str | None:
    """The question without its question words, auxiliaries and articles: "What does Tim do to
    escape reality?" → "Tim to escape reality". None when nothing is dropped."""
    words = re.findall(r"[\w'’-]+", q)
    kept = [w for w in words if w.lower() not in _Q_WORDS]
    if len(kept) == len(words) or not kept:
        return None
    return " ".join(kept)


_NP = r"(?:[A-Z][a-z]+|(?:her|his|their|my|our|your|the)\s+\w+)"
_COORD = re.compile(rf"\b({_NP})\s+and\s+({_NP})\b")
_LIST = re.compile(r"\b(\w+(?:\s\w+)?), (\w+(?:\s\w+)?),? and (\w+(?:\s\w+)?)\b")
_CLAUSE = re.compile(r"\s+and\s+|\s+as well as\s+|,\s+(?!\d)", re.I)
_HEAD = re.compile(
    r"^((?:what|which|who|when|where|how|why)\b(?:\s+\w+){0,3}?\s+"
    r"(?:do|does|did|is|are|was|were|has|have|had)\b\s+[A-Z][a-z]+)",
    re.I,
)


def parts(q: str) -> list[str]:
    """The parts of a question that asks about several things: a question naming two things joined
    by "and" ("Melanie and her kids", "Jon and Gina") or a list ("friends, family, and mentors")
    is asked once per thing; otherwise the clauses around "and" / "as well as" / a comma are
    asked apart, each with the question's opening ("When did Caroline") when it lost it. No
    parts (an empty list) for a question about one thing."""
    text = re.sub(r"\bboth\s+", "", q.strip().rstrip("?").strip())
    m = _LIST.search(text)
    if m:
        return [text[: m.start()] + g + text[m.end() :] for g in m.groups()]
    m = _COORD.search(text)
    if m:
        return [text[: m.start()] + g + text[m.end() :] for g in m.groups()]
    pieces = [p for p in _CLAUSE.split(text) if p.strip()]
    if len(pieces) < 2 or min(len(p.split()) for p in pieces) < 2:
        return []
    head = _HEAD.match(text)
    prefix = head.group(1) if head else ""
    out = [pieces[0]]
    for piece in pieces[1:]:
        own_opening = re.match(r"^(?:what|which|who|when|where|how|why)\b", piece, re.I)
        out.append(piece if own_opening or not prefix else f"{prefix} {piece}")
    return out


def wordnet_terms(q: str) -> list[str]:
    """The question's content words' WordNet relatives (verb / adjective synonyms, noun
    hypernyms), tokenised as BM25 terms, minus the question's own terms."""
    from engram_server.adapters.lexical import tokenize  # noqa: PLC0415
    from engram_server.domain import wordnet  # noqa: PLC0415

    own = set(tokenize(q))
    out: list[str] = []
    for w in re.findall(r"[A-Za-z]+", q):
        if w[0].isupper() or len(w) < 3 or w in _Q_WORDS or not tokenize(w):
            continue
        for r in sorted(wordnet.relatives(w)):
            for t in tokenize(r):
                if t not in own and t not in out:
                    out.append(t)
    return out


async def _vectors(
    data: dict[str, Json], queries: set[str]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    from engram_server.app import build_embedder  # noqa: PLC0415
    from engram_server.config import Settings  # noqa: PLC0415

    emb = build_embedder(Settings())
    docs: dict[str, np.ndarray] = {}
    for cid, conv in data.items():
        ids = list(conv["questions"][0]["ids"])
        mat = await emb.embed_documents([conv["text"][m] for m in ids])
        docs[cid] = np.asarray(mat, dtype=np.float32)
        print("docs", cid, docs[cid].shape, flush=True)
    ql = sorted(queries)
    qv: dict[str, np.ndarray] = {}
    for i in range(0, len(ql), 64):
        mat = await emb.embed_queries(ql[i : i + 64])
        for t, v in zip(ql[i : i + 64], np.asarray(mat, dtype=np.float32), strict=True):
            qv[t] = v
    return docs, qv


class _Variants:
    """The candidate-stage variants compared on one collected conversation set. Each returns a
    question's ranking (positions into ``Sim.ids``, best first, the whole pool) and, for the
    injection variants, extra results with their own ranks for the reranked head."""

    def __init__(self, docs: dict[str, np.ndarray], qv: dict[str, np.ndarray]) -> None:
        self.docs, self.qv = docs, qv

    def cos(self, cid: str, text: str) -> np.ndarray:
        return np.asarray(self.docs[cid] @ self.qv[text], dtype=np.float64)

    @staticmethod
    def bm25(sim: Sim, text: str) -> np.ndarray:
        from engram_server.adapters.lexical import tokenize  # noqa: PLC0415

        return sim.bm25(dict.fromkeys(tokenize(text), 1.0))

    @staticmethod
    def subqueries(q: Json, kinds: str) -> list[str]:
        out = list(parts(q["q"])) if "p" in kinds else []
        st = statement_form(q["q"]) if "s" in kinds else None
        return [*out, st] if st else out

    def tops(self, cid: str, sim: Sim, texts: list[str], nd: int, nl: int) -> list[int]:
        out: list[int] = []
        for t in texts:
            out += np.argsort(-self.cos(cid, t), kind="stable")[:nd].tolist()
            b = self.bm25(sim, t)
            pos = np.flatnonzero(b > 0)
            out += pos[np.argsort(-b[pos], kind="stable")][:nl].tolist()
        return out

    def pool(self, kinds: str, nd: int, nl: int) -> Ranker:
        """The sub-queries' dense top ``nd`` and BM25 top ``nl`` added to the pool, every candidate
        scored by the full question."""

        def f(cid: str, sim: Sim, q: Json) -> tuple[list[int], list[tuple[int, int]]]:
            extra = self.tops(cid, sim, self.subqueries(q, kinds), nd, nl)
            arr = np.array(extra, dtype=int) if extra else None
            return sim.rank(q, n_dense=150, n_lex=50, extra=arr, depth=10**6), []

        return f

    def wordnet_pool(self, nl: int) -> Ranker:
        """A second BM25 query (the question's terms and their WordNet relatives): its top ``nl``
        added to the pool."""

        def f(cid: str, sim: Sim, q: Json) -> tuple[list[int], list[tuple[int, int]]]:
            from engram_server.adapters.lexical import tokenize  # noqa: PLC0415

            b = sim.bm25(dict.fromkeys([*tokenize(q["q"]), *wordnet_terms(q["q"])], 1.0))
            pos = np.flatnonzero(b > 0)
            extra = pos[np.argsort(-b[pos], kind="stable")][:nl]
            return sim.rank(q, n_dense=150, n_lex=50, extra=extra, depth=10**6), []

        return f

    def wordnet_scored(self, weight: float) -> Ranker:
        """The lexical side's query with the question's WordNet relatives at ``weight`` (the
        question's own terms at 1)."""

        def f(cid: str, sim: Sim, q: Json) -> tuple[list[int], list[tuple[int, int]]]:
            from engram_server.adapters.lexical import tokenize  # noqa: PLC0415

            terms = dict.fromkeys(tokenize(q["q"]), 1.0)
            for t in wordnet_terms(q["q"]):
                terms.setdefault(t, weight)
            return sim.rank(q, n_dense=150, n_lex=50, bm25=sim.bm25(terms), depth=10**6), []

        return f

    def best_of(self, kinds: str, delta: float) -> Ranker:
        """Each candidate's evidence the larger of the question's and, less ``delta``, its best
        sub-query's (:func:`rank_max`); the sub-queries' dense 50 / BM25 20 added to the pool."""

        def f(cid: str, sim: Sim, q: Json) -> tuple[list[int], list[tuple[int, int]]]:
            subs = self.subqueries(q, kinds)
            if not subs:
                return sim.rank(q, n_dense=150, n_lex=50, depth=10**6), []
            pc = [self.cos(cid, t) for t in subs]
            pb = [self.bm25(sim, t) for t in subs]
            return rank_max(sim, q, pc, pb, extra=self.tops(cid, sim, subs, 50, 20), delta=delta), []

        return f

    def inject(self, kinds: str, m: int, after: int = 0) -> Ranker:
        """The fused ranking, plus each sub-query's own best ``m`` (ranked as the question would
        be, with the sub-query's cosine and BM25) put into the reranked head with their rank there
        plus ``after`` as their own rank (``after`` = the head's depth: behind the head, so that
        only the cross-encoder can lift them)."""

        def f(cid: str, sim: Sim, q: Json) -> tuple[list[int], list[tuple[int, int]]]:
            head = sim.rank(q, n_dense=150, n_lex=50, depth=10**6)
            extra: list[tuple[int, int]] = []
            for t in self.subqueries(q, kinds):
                sub = {**q, "ids": sim.ids, "cos": self.cos(cid, t), "bm25": self.bm25(sim, t)}
                best = rank_max(sim, sub, [], [], extra=[], delta=0.0)[:m]
                extra += [(i, after + r) for r, i in enumerate(best)]
            return head, extra

        return f


Ranker = Callable[[str, Sim, Json], tuple[list[int], list[tuple[int, int]]]]


def main() -> None:
    from engram_server.domain.service.commands import Policy  # noqa: PLC0415

    p = argparse.ArgumentParser()
    p.add_argument("pickle", type=Path, help="made by `python -m eval.locomo_stages collect`")
    p.add_argument("--ce", type=Path, required=True, help="cache of cross-encoder logits (made if absent)")
    p.add_argument("--vectors", type=Path, required=True, help="cache of the turns' and sub-queries' vectors")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--show", type=int, default=0, help="print the parts of the first N questions that have parts"
    )
    a = p.parse_args()
    data: dict[str, Json] = pickle.loads(a.pickle.read_bytes())
    qtexts = [q["q"] for c in data.values() for q in c["questions"]]
    want = set(qtexts)
    for t in qtexts:
        want.update(parts(t))
        st = statement_form(t)
        if st:
            want.add(st)
    docs, qv = pickle.loads(a.vectors.read_bytes()) if a.vectors.exists() else ({}, {})
    if not docs or want - set(qv):
        docs, qv = asyncio.run(_vectors(data, want))
        a.vectors.write_bytes(pickle.dumps((docs, qv)))
    for t in [t for t in qtexts if parts(t)][: a.show]:
        print(t, "->", parts(t), "|", statement_form(t))
    sims = {cid: Sim(conv, MODEL_ID) for cid, conv in data.items()}
    c0 = next(iter(data))
    q0 = data[c0]["questions"][0]
    diff0 = np.abs(docs[c0] @ qv[q0["q"]] - np.asarray(q0["cos"])).max()
    print(f"the recomputed cosine against the store's: max difference {diff0:.1e}")
    v = _Variants(docs, qv)
    variants: dict[str, Ranker] = {
        "baseline: dense 150 ∪ BM25 50": v.pool("", 0, 0),
        "pool + parts (dense 50, BM25 20 each)": v.pool("p", 50, 20),
        "pool + parts (dense 100, BM25 50 each)": v.pool("p", 100, 50),
        "pool + statement form (dense 50)": v.pool("s", 50, 0),
        "pool + statement form (dense 150)": v.pool("s", 150, 0),
        "pool + WordNet-expanded BM25 (50)": v.wordnet_pool(50),
        "BM25 query + WordNet relatives at 0.2": v.wordnet_scored(0.2),
        "BM25 query + WordNet relatives at 0.5": v.wordnet_scored(0.5),
        "best of question and parts (δ 0)": v.best_of("p", 0.0),
        "best of question and parts (δ 0.03)": v.best_of("p", 0.03),
        "best of question and statement form (δ 0)": v.best_of("s", 0.0),
        "best of question and statement form (δ 0.03)": v.best_of("s", 0.03),
        "best of question, parts and statement form (δ 0.03)": v.best_of("ps", 0.03),
        "parts' best 5 into the reranked head": v.inject("p", 5),
        "parts' best 10 into the reranked head": v.inject("p", 10),
        "statement form's best 5 into the reranked head": v.inject("s", 5),
        "parts' best 5 behind the reranked head": v.inject("p", 5, 30),
        "statement form's best 10 behind the reranked head": v.inject("s", 10, 30),
    }
    depth = Policy().rerank_depth
    logits: dict[str, dict[str, float]] = pickle.loads(a.ce.read_bytes()) if a.ce.exists() else {}
    model: Any = None
    res: dict[str, dict[str, list[float]]] = {k: defaultdict(list) for k in variants}
    for cid, conv in data.items():
        sim = sims[cid]
        for qi, q in enumerate(conv["questions"]):
            if not q["ev"]:
                continue
            ev = set(q["ev"])
            multi = bool(parts(q["q"]))
            have = logits.setdefault(f"{cid}|{qi}", {})
            for name, fn in variants.items():
                ranking, injected = fn(cid, sim, q)
                top = ranking[:depth]
                own = list(range(len(top)))
                for i, r in injected:  # a sub-query's result: its best own rank in the head
                    if i in top:
                        own[top.index(i)] = min(own[top.index(i)], r)
                    else:
                        top.append(i)
                        own.append(r)
                need = [sim.ids[i] for i in top if sim.ids[i] not in have]
                if need:
                    model = model or _model(a.threads)
                    scores = model.score_sync(q["q"], [conv["text"][m] for m in need])
                    have.update(zip(need, map(float, scores), strict=True))
                # RRF (c = 10) of the own rank and the model's, as Searching._reranked
                ce = [have[sim.ids[i]] for i in top]
                ce_rank = {k: r for r, k in enumerate(sorted(range(len(top)), key=lambda k: (-ce[k], k)))}
                order = sorted(
                    range(len(top)), key=lambda k: (-(1 / (10 + own[k]) + 1 / (10 + ce_rank[k])), own[k], k)
                )
                rr = len(ev & {sim.dia[top[i]] for i in order[:10]}) / len(ev)
                pl = len(ev & {sim.dia[i] for i in ranking[:10]}) / len(ev)
                pr = len(ev & {sim.dia[i] for i in ranking}) / len(ev)
                for key in (str(q["cat"]), "all", "parts" if multi else "none"):
                    res[name]["rr|" + key].append(rr)
                    res[name]["plain|" + key].append(pl)
                    res[name]["pool|" + key].append(pr)
                res[name]["poolsize|all"].append(len(ranking))
                if name == next(iter(variants)):  # what a perfect order of the head / pool would give
                    in_head = len(ev & {sim.dia[i] for i in top})
                    in_pool = len(ev & {sim.dia[i] for i in ranking})
                    for key in (str(q["cat"]), "all"):
                        res[name]["oracle_head|" + key].append(min(in_head, 10) / len(ev))
                        res[name]["oracle_pool|" + key].append(min(in_pool, 10) / len(ev))
        print(cid, "done", flush=True)
    a.ce.write_bytes(pickle.dumps(logits))
    _report(res, next(iter(variants)))


def _report(res: dict[str, dict[str, list[float]]], baseline: str) -> None:
    rng = np.random.default_rng(0)
    base = np.asarray(res[baseline]["rr|all"])
    cats = ["1", "2", "3", "4"]
    print(
        f"questions: {len(base)}, with parts: {len(res[baseline]['rr|parts'])}; categories "
        + ", ".join(f"{c} {locomo.CATEGORY_NAMES[int(c)]}" for c in cats)
    )
    b = res[baseline]
    print(
        "baseline R@10 if the reranked head were ordered perfectly: "
        f"{np.mean(b['oracle_head|all']):.3f} ("
        + " / ".join(f"{np.mean(b['oracle_head|' + c]):.3f}" for c in cats)
        + f"); if the whole pool were: {np.mean(b['oracle_pool|all']):.3f} ("
        + " / ".join(f"{np.mean(b['oracle_pool|' + c]):.3f}" for c in cats)
        + ")"
    )
    print(
        "| variant | pool size | pool recall (" + " / ".join(cats) + ") | R@10 without the reranker | "
        "R@10 reranked (" + " / ".join(cats) + "; questions with parts) | reranked, vs baseline (95 %) |"
    )
    print("|---|---|---|---|---|---|")
    for name, r in res.items():
        x = np.asarray(r["rr|all"])
        diff = x - base
        means = diff[rng.integers(0, len(diff), (2000, len(diff)))].mean(axis=1)
        lo, hi = np.percentile(means, [2.5, 97.5])
        print(
            f"| {name} | {np.mean(r['poolsize|all']):.0f} | {np.mean(r['pool|all']):.3f} ("
            + " / ".join(f"{np.mean(r['pool|' + c]):.2f}" for c in cats)
            + f") | {np.mean(r['plain|all']):.3f} | {x.mean():.3f} ("
            + " / ".join(f"{np.mean(r['rr|' + c]):.3f}" for c in cats)
            + f"; {np.mean(r['rr|parts']):.3f}) | {diff.mean():+.3f} ({lo:+.3f}, {hi:+.3f}) |"
        )


def rank_max(
    sim: Sim,
    q: Json,
    part_cos: list[np.ndarray],
    part_bm25: list[np.ndarray],
    *,
    extra: list[int],
    delta: float,
    n_dense: int = 150,
    n_lex: int = 50,
) -> list[int]:
    """:meth:`Sim.rank` with each candidate's evidence the larger of the question's and, less
    ``delta``, the best of its parts' (each part's relevance, lexical and episode evidence over the
    same pool); relevance itself stays the question's."""
    from engram_server.domain.ranking import (  # noqa: PLC0415
        HybridParams,
        RescoreParams,
        Weights,
        evidence,
        fuse_array,
        recency_array,
        rescore_cues,
    )
    from eval.locomo_stages import _EVENT_DECAY  # noqa: PLC0415

    cos = sim.aligned(q, "cos")
    lex = sim.aligned(q, "bm25")
    pool = set(np.argsort(-cos, kind="stable")[:n_dense].tolist())
    pos_lex = np.flatnonzero(lex > 0)
    in_lex = set(pos_lex[np.argsort(-lex[pos_lex], kind="stable")][:n_lex].tolist())
    pool |= in_lex | set(extra)
    idx = np.array(sorted(pool))
    lx = np.array([lex[i] if i in in_lex else 0.0 for i in idx])
    ones = np.ones(len(idx), dtype=bool)
    comb = evidence(sim.cal.relevance_array(cos[idx]), lx, sim.created[idx], HybridParams(), ones).combined
    for pc, pb in zip(part_cos, part_bm25, strict=True):
        pos = np.flatnonzero(pb > 0)
        top = set(pos[np.argsort(-pb[pos], kind="stable")][:n_lex].tolist())
        plx = np.array([pb[i] if i in top else 0.0 for i in idx])
        pe = evidence(sim.cal.relevance_array(pc[idx]), plx, sim.created[idx], HybridParams(), ones).combined
        comb = np.maximum(comb, pe - delta)
    w = Weights()
    rec = recency_array(np.full(len(idx), _EVENT_DECAY), sim.created[idx], sim.conv["now"])
    final = fuse_array(comb, rec, np.full(len(idx), 5.0), w)
    order = sorted(range(len(idx)), key=lambda k: (-final[k], -sim.created[idx[k]], sim.ids[idx[k]]))
    head = order[:50]
    adj = rescore_cues(q["q"], [sim.cues[idx[k]] for k in head], RescoreParams())
    f2 = {k: final[k] + w.relevance * a for k, a in zip(head, adj.tolist(), strict=True)}
    head.sort(key=lambda k: (-f2[k], -sim.created[idx[k]], sim.ids[idx[k]]))
    return [int(idx[k]) for k in (head + order[50:])]


def _model(threads: int) -> Any:
    from engram_server.adapters.rerank import CrossEncoderReranker  # noqa: PLC0415

    return CrossEncoderReranker(threads=threads)


if __name__ == "__main__":
    main()
