"""Search: candidates per collection (cached), ranking assembly (fusion, decay, recency, MMR),
full records and access counts."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import math
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final, TypeVar, cast

import numpy as np
from opentelemetry import metrics

from engram_server import telemetry
from engram_server.domain import crosslingual
from engram_server.domain.errors import (
    CollectionInTrash,
    CollectionNotFound,
    EmbeddingMismatch,
)
from engram_server.domain.model import (
    Candidates,
    CollectionSpec,
    MemoryRecord,
    MemoryType,
    SparseVector,
    StoreFilter,
    Vector,
)
from engram_server.domain.ranking import (
    DECAY_PER_HOUR,
    NO_CUE,
    RescoreCue,
    Score,
    Weights,
    decay_array,
    evidence,
    fuse_array,
    fuse_value,
    glossed_lexical,
    lexical_lift,
    make_score,
    mmr_order,
    model_ranking,
    recency_array,
    reinforced_recency,
    rescore_cue,
    rescore_cues,
    rrf_order,
)
from engram_server.domain.service.commands import SearchHit, SearchQuery, _Pool, _Ranked
from engram_server.domain.service.core import ServiceCore, _query_span, _tracer
from engram_server.domain.text import (
    cross_script,
    lexically_blind,
    reads_as_statement,
    script_of,
    word_scripts,
)
from engram_server.domain.validation import (
    Violations,
    check_collection,
    check_unit_interval,
    is_blank,
)
from engram_server.ports import RescoreCueSource, TextSource

T = TypeVar("T")

_meter = metrics.get_meter("engram_server.domain")
_candidate_cache = _meter.create_counter(
    "engram.search.candidate_cache",
    unit="{lookup}",
    description="Search candidate lists reused (hit) or fetched (miss), per collection.",
)


#: ``_Ranked``'s slots' own setters, in field order (see :func:`_make_ranked`).
_RANKED_SLOTS: Final = tuple(
    _Ranked.__dict__[name].__set__
    for name in ("collection", "id", "score", "vector", "script", "lexical_norm")
)


def _make_ranked(  # noqa: PLR0917 - positional, as the dataclass's own __init__ takes them
    collection: str, pid: str, score: Score, vector: Vector | None, script: str, lexical_norm: float
) -> _Ranked:
    """``_Ranked(collection, pid, score, vector, script, lexical_norm)``: the same object, built
    in half the time (as :func:`engram_server.domain.ranking.make_score`)."""
    ranked: _Ranked = object.__new__(_Ranked)
    a, b, c, d, e, f = _RANKED_SLOTS
    a(ranked, collection)
    b(ranked, pid)
    c(ranked, score)
    d(ranked, vector)
    e(ranked, script)
    f(ranked, lexical_norm)
    return ranked


#: Query texts whose BM25 vector is kept (``ServiceCore._sparse_cache``).
_SPARSE_CACHE_ENTRIES: Final = 1024


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


class _Query:
    """A search's query: its text, script, and vectors — computed once, and only if a collection's
    candidates are not cached."""

    __slots__ = ("_dense", "_sparse", "_svc", "as_document", "cached", "script", "text", "word_scripts")

    def __init__(self, svc: ServiceCore, text: str, as_statement: bool | None = None) -> None:
        self._svc = svc
        self.text = text
        self.script = script_of(text)
        self.word_scripts = word_scripts(text)
        # A statement is compared as the write gate compares two memories: embedded as a document,
        # read on the document scale (its relevance is the gate's similarity for the pair).
        self.as_document = reads_as_statement(text) if as_statement is None else as_statement
        self.cached = 0  # collections whose candidates came from the cache
        self._dense: Vector | None = None
        self._sparse: tuple[SparseVector | None] | None = None

    async def dense(self) -> Vector:
        if self._dense is None:
            self._dense = (await self._svc._embed([self.text], query=not self.as_document))[0]
        return self._dense

    def sparse(self) -> SparseVector | None:
        if self._sparse is None:
            lexical = self._svc._lexical
            if lexical is None:
                self._sparse = (None,)
                return None
            cache = self._svc._sparse_cache
            vector = cache.get(self.text)
            if vector is None:
                vector = cache[self.text] = lexical.encode_query(self.text)
                if len(cache) > _SPARSE_CACHE_ENTRIES:
                    cache.popitem(last=False)
            else:
                cache.move_to_end(self.text)
            self._sparse = (vector,)
        return self._sparse[0]


async def _gather(*aws: Coroutine[Any, Any, T]) -> list[T]:
    """asyncio.gather, without wrapping a lone awaitable in a task (the usual one-collection case)."""
    if len(aws) == 1:
        return [await aws[0]]
    return list(await asyncio.gather(*aws))


#: Which memory types take part in episode context (see :func:`hybrid_relevance`).
_IS_EVENT: Final[dict[MemoryType, bool]] = {t: t is MemoryType.EVENT for t in MemoryType}


class Searching(ServiceCore):
    """Search, ranking assembly and access counts."""

    # ------------------------------------------------------------ search

    async def search(self, q: SearchQuery) -> list[SearchHit]:
        pol = self.policy
        v = Violations()
        if is_blank(q.query):
            v.add("query", "must not be empty")
        elif len(q.query) > pol.limits.max_content_chars:
            v.add("query", f"at most {pol.limits.max_content_chars} characters")
        names = list(dict.fromkeys(q.collections))
        if len(names) > pol.limits.max_collections_per_search:
            v.add("collections", f"at most {pol.limits.max_collections_per_search} collections")
        for i, name in enumerate(names):
            check_collection(v, f"collections[{i}]", name)
        limit = q.limit or 5
        if not 1 <= limit <= pol.limits.max_search_limit:
            v.add("limit", f"must be between 1 and {pol.limits.max_search_limit} (got {q.limit})")
        flt = self._check_filter(v, "filter", q.filter)
        weights = q.weights or pol.weights
        for name, value in (
            ("relevance", weights.relevance),
            ("recency", weights.recency),
            ("importance", weights.importance),
        ):
            if not (value >= 0 and math.isfinite(value)):
                v.add(f"weights.{name}", "must be a finite number ≥ 0")
        lam = pol.mmr_lambda if q.mmr_lambda is None else q.mmr_lambda
        check_unit_interval(v, "mmr_lambda", lam)
        check_unit_interval(v, "min_relevance", q.min_relevance)
        if not 0 <= q.max_per_session <= pol.limits.max_search_limit:
            v.add(
                "max_per_session",
                f"must be between 0 (no cap) and {pol.limits.max_search_limit} (got {q.max_per_session})",
            )
        v.raise_if_any()
        # The privacy filter, as on writes: a secret in a query is not embedded (nor cached).
        redacted = pol.privacy.redact(q.query)
        if redacted.changed:
            if is_blank(redacted.text):
                return []  # the query was private through and through
            q = replace(q, query=redacted.text)

        specs = await self._search_specs(names, q.readable)
        if not specs:
            return []
        query = _Query(self, q.query, q.as_statement)
        if len(specs) > 1:
            await query.dense()  # once, before the collections are searched concurrently
        now = self._clock.now()
        asked, flt = flt, replace(flt, live_at=now)
        rerank = (
            q.rerank is not False
            and self.reranker is not None
            and pol.rerank_depth > 0
            and query.word_scripts == {"latin"}
        )
        pool = pol.min_reranked_candidates if rerank else pol.min_candidates
        n_candidates = max(limit * pol.candidate_factor, pool)
        n_lexical = max(limit * pol.candidate_factor, pol.min_lexical_candidates)
        per_collection = await _gather(
            *(
                self._candidates(
                    s.name,
                    query,
                    limit=n_candidates,
                    lexical_limit=n_lexical,
                    flt=flt,
                    asked=asked,
                    lexical=self._uses_lexical(s),
                    with_vectors=q.diversify,
                )
                for s in specs
            )
        )
        n_found = sum(len(p.found) for p in per_collection)
        capped = q.max_per_session > 0
        with telemetry.span(
            _tracer,
            "engram.rank",
            attributes={"engram.candidates": n_found, "engram.candidates.cached": query.cached},
        ) as span:
            resc = pol.rescore
            depth = max(limit, resc.depth) if resc.enabled else limit
            if rerank:
                depth = max(depth, pol.rerank_depth)
            ranked = self._rank(
                per_collection,
                now,
                weights,
                q.min_relevance,
                keep=None if q.diversify or capped else depth,
            )
            if len(ranked) > 1:
                lexical = {s.name for s in specs if self._uses_lexical(s)}
                ranked = await self._cross_scripted(ranked, query, depth, weights, lexical)
            if resc.enabled and len(ranked) > 1:
                ranked = await self._rescored(ranked, q.query, weights)
            if rerank and len(ranked) > 1:
                ranked = await self._reranked(ranked, q.query)
            if q.diversify and len(ranked) > 1:
                order = mmr_order(
                    [r.score.final for r in ranked],
                    [r.vector for r in ranked if r.vector is not None],
                    len(ranked) if capped else limit,
                    lam,
                    self._cal.similarity_array,
                )
                ranked = [ranked[i] for i in order]
            top = ranked if capped else ranked[:limit]
            span.set_attribute("engram.returned", min(len(top), limit))
        if capped:
            results = await self._session_capped(top, limit, q.max_per_session)
        else:
            # Candidates carried only what ranking needs; read the winners in full (a memory deleted
            # or replaced since the query is dropped, as if the search had run a moment later).
            full = await self._full_records(top)
            results = [SearchHit(full[r.id], r.score) for r in top if r.id in full]
        if not q.diversify:
            results = self._reinforce(results, now, weights)
        self._note_access([r.memory for r in results], now)
        return results

    async def _cross_scripted(
        self,
        ranked: list[_Ranked],
        query: _Query,
        depth: int,
        weights: Weights,
        lexical: set[str],
    ) -> list[_Ranked]:
        """The best ``depth`` of ``ranked`` with lexical credit for the query's words they match
        across scripts (:func:`engram_server.domain.ranking.glossed_lexical`), re-sorted as
        :meth:`_rank` sorts; the candidates below them follow in their order.

        Only when the query has words in one script and one of these candidates has words in the
        other (its script tag), in a collection searched with a lexical side (``lexical``): those
        candidates' texts are read and matched through CC-CEDICT, and the other candidates' texts
        only when one of them matches across scripts. Relevance is never changed; the lexical lift
        of a candidate the lexical side is blind to (a memory written in a script the query has no
        word in) is its stand-in credit or the dictionary's, whichever is larger."""
        other = {"cjk": "latin", "latin": "cjk"}
        wanted = {other[sc] for sc in query.word_scripts if sc in other}
        head, tail = ranked[:depth], ranked[depth:]
        usable = [r for r in head if r.collection in lexical]
        # Only a memory with words in a script the query has none in can match a query word
        # across scripts (``cross_matches``: an English word through a Chinese word's glosses or
        # reading, a Chinese word through an English word): those are read first, and the others
        # (whose direct matches weigh the query's words) only when one of them does match.
        crossing: list[_Ranked] = []
        if wanted:
            # (by script tag: a search's candidates carry a few)
            crosses = {sc: not wanted.isdisjoint(sc.split("+")) for sc in {r.script for r in usable}}
            crossing = [r for r in usable if crosses[r.script]]
        if not crossing:
            return ranked
        if not crosslingual.loaded():
            await asyncio.to_thread(crosslingual.warm)  # read once per process, off the event loop
        q = crosslingual.glossed(query.text)
        texts = await self._texts(crossing)
        matched = {
            r.id: crosslingual.cross_matches(q, crosslingual.glossed(texts[r.id][0]))
            for r in crossing
            if r.id in texts
        }
        if not any(across for _, across in matched.values()):
            return ranked
        texts.update(await self._texts([r for r in usable if r.id not in texts]))
        usable = [r for r in usable if r.id in texts]
        matches = [
            matched[r.id]
            if r.id in matched
            else crosslingual.cross_matches(q, crosslingual.glossed(texts[r.id][0]))
            for r in usable
        ]
        norms = glossed_lexical(np.array([r.lexical_norm for r in usable]), matches, q.units)
        lifts = lexical_lift(np.array([r.score.relevance for r in usable]), norms, self.policy.hybrid)
        changed: dict[str, _Ranked] = {}
        for r, lift in zip(usable, lifts.tolist(), strict=True):
            if lexically_blind(query.word_scripts, r.script):
                lift = max(lift, r.score.lexical)  # noqa: PLW2901 - the stand-in stays a floor
            if lift == r.score.lexical:
                continue
            s0 = r.score
            final = fuse_value(
                s0.relevance + lift + s0.episode + s0.rescore,
                s0.recency,
                s0.importance * 10.0,
                weights,
                mode=self.policy.hybrid.fusion,
            )
            sc = replace(s0, final=final, lexical=lift)
            changed[r.id] = replace(r, score=sc)
        if not changed:
            return ranked
        created = {r.id: texts[r.id][1] if r.id in texts else 0.0 for r in head}
        out = [changed.get(r.id, r) for r in head]
        out.sort(key=lambda r: (-r.score.final, -created.get(r.id, 0.0), r.id))
        return out + tail

    async def _texts(self, ranked: Sequence[_Ranked]) -> dict[str, tuple[str, float]]:
        """The text and ``created_at`` of the current memories among ``ranked``, by id: read as
        just those fields where the store offers it (:class:`TextSource`) and recent records are
        not kept (``search_cache_entries`` 0), otherwise from their full records (cached ones
        reused)."""
        if not ranked:
            return {}
        if self.policy.search_cache_entries > 0 or getattr(self._store, "texts", None) is None:
            return {i: (r.content, r.created_at) for i, r in (await self._full_records(ranked)).items()}
        source = cast(TextSource, self._store)
        by_collection: dict[str, list[str]] = {}
        for r in ranked:
            by_collection.setdefault(r.collection, []).append(r.id)
        out: dict[str, tuple[str, float]] = {}
        for name, ids in by_collection.items():
            out.update(await source.texts(name, ids))
        return out

    async def _rescored(self, ranked: list[_Ranked], query: str, weights: Weights) -> list[_Ranked]:
        """The best ``rescore.depth`` of ``ranked`` read in full and rescored from their text
        (:func:`engram_server.domain.ranking.rescore`: a lead label the query names, the share of
        question sentences), re-sorted as :meth:`_rank` sorts; the candidates below them follow in
        their order. A memory deleted since the query gets no rescore (it is dropped when the
        winners are read)."""
        pol = self.policy
        head, tail = ranked[: pol.rescore.depth], ranked[pol.rescore.depth :]
        kept = await self._rescore_cues(head)
        if kept is not None:
            # The store keeps each text's cues beside its ranking fields: no record is read.
            cues = [kept[r.id][0] if r.id in kept else NO_CUE for r in head]
            created = {r.id: kept[r.id][1] if r.id in kept else 0.0 for r in head}
        else:
            full = await self._full_records(head)
            cues = [rescore_cue(full[r.id].content) if r.id in full else NO_CUE for r in head]
            created = {r.id: full[r.id].created_at if r.id in full else 0.0 for r in head}
        adj = rescore_cues(query, cues, pol.rescore)
        out: list[_Ranked] = []
        for r, a in zip(head, adj.tolist(), strict=True):
            if a == 0.0:
                out.append(r)
                continue
            # (built directly: ``dataclasses.replace`` costs microseconds a call; fuse_value is
            # fuse_array's operations on plain floats, the same bits)
            s0 = r.score
            final = fuse_value(
                s0.relevance + s0.lexical + s0.episode + a,  # (Score.evidence, in its order)
                s0.recency,
                s0.importance * 10.0,
                weights,
                mode=pol.hybrid.fusion,
            )
            # (final, relevance, recency, importance, raw_similarity, lexical, episode, rescore, rerank)
            sc = make_score(
                final,
                s0.relevance,
                s0.recency,
                s0.importance,
                s0.raw_similarity,
                s0.lexical,
                s0.episode,
                a,
                0.0,
            )
            out.append(_make_ranked(r.collection, r.id, sc, r.vector, r.script, r.lexical_norm))
        out.sort(key=lambda r: (-r.score.final, -created.get(r.id, 0.0), r.id))
        return out + tail

    async def _reranked(self, ranked: list[_Ranked], query: str) -> list[_Ranked]:
        """The best ``rerank_depth`` of ``ranked`` (an English query) reordered by reciprocal
        rank fusion of their rank and the cross-encoder's (:func:`rrf_order`); the candidates below
        them follow in their order. Only memories with no Chinese words are read by the model; the
        others keep their own rank as the model's. ``final`` stays monotonic with the order: the
        head's own finals are handed out, best first, in the new order; ``rerank`` carries the
        model's judgement (sigmoid of its logit). Relevance is never changed."""
        reranker = self.reranker
        assert reranker is not None
        head, tail = ranked[: self.policy.rerank_depth], ranked[self.policy.rerank_depth :]
        full = await self._full_records(head)
        english = [i for i, r in enumerate(head) if r.id in full and "cjk" not in r.script.split("+")]
        if not english:
            return ranked
        with _tracer.start_as_current_span("engram.rerank", attributes={"engram.reranked": len(english)}):
            scores = await reranker.score(query, [full[head[i].id].content for i in english])
        logits: list[float | None] = [None] * len(head)
        for i, logit in zip(english, scores, strict=True):
            logits[i] = logit
        order = rrf_order(model_ranking(logits))
        finals = sorted((r.score.final for r in head), reverse=True)
        out: list[_Ranked] = []
        for final, i in zip(finals, order, strict=True):
            r, y = head[i], logits[i]
            sc = replace(r.score, final=final, rerank=0.0 if y is None else _sigmoid(y))
            out.append(_Ranked(r.collection, r.id, sc, r.vector, r.script, r.lexical_norm))
        return out + tail

    async def _rescore_cues(self, head: Sequence[_Ranked]) -> dict[str, tuple[RescoreCue, float]] | None:
        """The rescoring cues and ``created_at`` of ``head`` by id, as the store keeps them (one
        call per collection); None when this store does not keep them (its records are read)."""
        source = getattr(self._store, "rescore_cues", None)
        if source is None:
            return None
        keeper = cast(RescoreCueSource, self._store)
        by_collection: dict[str, list[str]] = {}
        for r in head:
            by_collection.setdefault(r.collection, []).append(r.id)
        out: dict[str, tuple[RescoreCue, float]] = {}
        for name, ids in by_collection.items():
            out.update(await keeper.rescore_cues(name, ids))
        return out

    async def _session_capped(self, ranked: Sequence[_Ranked], limit: int, cap: int) -> list[SearchHit]:
        """The best ``limit`` of ``ranked`` (in order) with at most ``cap`` from one session (the
        session is on the full record, read in chunks of the ranking until ``limit`` are found or
        the candidates run out; memories without a session are not capped)."""
        results: list[SearchHit] = []
        per_session: dict[str, int] = {}
        step = max(limit * 2, 20)
        for start in range(0, len(ranked), step):
            chunk = ranked[start : start + step]
            full = await self._full_records(chunk)
            for r in chunk:
                record = full.get(r.id)
                if record is None:
                    continue
                if record.session_id is not None:
                    seen = per_session.get(record.session_id, 0)
                    if seen >= cap:
                        continue
                    per_session[record.session_id] = seen + 1
                results.append(SearchHit(record, r.score))
                if len(results) == limit:
                    return results
        return results

    def _reinforce(self, hits: list[SearchHit], now: float, weights: Weights) -> list[SearchHit]:
        """The hits with the recency of each recalled memory slowed by its access count
        (:func:`engram_server.domain.ranking.reinforced_recency`), re-sorted as :meth:`_rank` sorts.
        Applied to the returned memories (their access counts are read with them), so it orders
        them; which memories are returned is decided by the unreinforced ranking."""
        if not any(h.memory.access_count for h in hits):
            return hits
        out: list[SearchHit] = []
        for h in hits:
            sc = h.score
            if h.memory.access_count:
                hours = (now - h.memory.created_at) / 3600.0
                rec = reinforced_recency(DECAY_PER_HOUR[h.memory.type], hours, h.memory.access_count)
                final = fuse_value(
                    sc.evidence,
                    rec,
                    sc.importance * 10.0,
                    weights,
                    mode=self.policy.hybrid.fusion,
                )
                # (built directly: ``dataclasses.replace`` costs microseconds a call)
                # (Score's fields in order: final, relevance, recency, importance, raw_similarity,
                # lexical, episode, rescore, rerank)
                sc = make_score(
                    final,
                    sc.relevance,
                    rec,
                    sc.importance,
                    sc.raw_similarity,
                    sc.lexical,
                    sc.episode,
                    sc.rescore,
                    sc.rerank,
                )
            out.append(SearchHit(h.memory, sc))
        out.sort(key=lambda h: (-h.score.final, -h.memory.created_at, h.memory.id))
        return out

    async def _search_specs(
        self, names: Sequence[str], readable: Callable[[str], bool] | None
    ) -> list[CollectionSpec]:
        """The collections a search looks in. Named ones must all exist: a name that does not
        (a typo) is NOT_FOUND, never an empty answer that reads as "no memories". With none named,
        every existing collection the caller may read (``readable``; all when None), as the
        reference design searches every collection."""
        if not names:
            found: list[CollectionSpec] = []
            for stored in await self._store.list_collections():
                if readable is not None and not readable(stored.name):
                    continue
                try:
                    spec = await self._existing(stored.name)
                except (EmbeddingMismatch, CollectionInTrash):
                    continue  # built with another model (this server cannot search it), or trashed
                if spec is not None:
                    found.append(spec)
            return found
        specs = [await self._existing(n) for n in names]
        missing = [n for n, spec in zip(names, specs, strict=True) if spec is None]
        if missing:
            raise CollectionNotFound(
                f"collection {missing[0]!r} does not exist"
                + (f" (nor {', '.join(repr(m) for m in missing[1:])})" if len(missing) > 1 else ""),
                metadata={"collection": missing[0], "missing": ",".join(missing)},
            )
        return [spec for spec in specs if spec is not None]

    def _prepare(self, found: Candidates, query: _Query) -> _Pool:
        """Relevance of one collection's candidates (semantic, lexical and episode evidence; the
        lexical side is normalised by the collection's best BM25 score) and their decay factors."""
        n = len(found)
        raw = found.cosine
        # The cross-lingual offset lifts translations on the query scale; a statement is read as the
        # gate reads a pair (no offset), so its relevance stays the gate's similarity.
        off = None if query.as_document else self._cross_script_offset
        tags = set(found.scripts)  # script tags (see engram_server.domain.text.script_tag)
        if off and query.script and n:
            shift = {sc: off.get((query.script, cross_script(query.script, sc)), 0.0) for sc in tags}
            raw = raw + np.fromiter(map(shift.__getitem__, found.scripts), dtype=np.float64, count=n)
        blind = {sc: lexically_blind(query.word_scripts, sc) for sc in tags}
        parts = evidence(
            (self._cal.similarity_array if query.as_document else self._cal.relevance_array)(raw),
            found.lexical,
            found.created_at,
            self.policy.hybrid,
            np.fromiter(map(_IS_EVENT.__getitem__, found.types), dtype=bool, count=n),
            blind=np.fromiter(map(blind.__getitem__, found.scripts), dtype=bool, count=n),
        )
        return _Pool(found, parts, decay_array(found.types))

    def _rank(
        self,
        pools: Sequence[_Pool],
        now: float,
        weights: Weights,
        min_relevance: float,
        *,
        keep: int | None = None,
    ) -> list[_Ranked]:
        """The best ``keep`` (all when None) candidates at or above ``min_relevance``, best first (equal
        scores: the newer first, then by id), with their scores. Recency and the fusion are computed
        for all candidates at once; a score object is made only for the candidates kept."""
        pools = [p for p in pools if len(p.found)]
        if not pools:
            return []
        if len(pools) == 1:
            (one,) = pools
            relevance, lexical, episode = one.evidence.relevance, one.evidence.lexical, one.evidence.episode
            decay, ids = one.decay, one.found.ids
            created, importance = one.found.created_at, one.found.importance
        else:
            relevance = np.concatenate([p.evidence.relevance for p in pools])
            lexical = np.concatenate([p.evidence.lexical for p in pools])
            episode = np.concatenate([p.evidence.episode for p in pools])
            decay = np.concatenate([p.decay for p in pools])
            ids = [i for p in pools for i in p.found.ids]
            created = np.concatenate([p.found.created_at for p in pools])
            importance = np.concatenate([p.found.importance for p in pools])
        rec = recency_array(decay, created, now)
        final = fuse_array(
            relevance + lexical + episode, rec, importance, weights, mode=self.policy.hybrid.fusion
        )
        chosen = np.flatnonzero(relevance >= min_relevance)
        if keep is not None and keep < len(chosen):
            # Only those at or above the keep-th best score can be kept (ties included).
            scores = final[chosen]
            cut = len(scores) - keep
            chosen = chosen[scores >= np.partition(scores, cut)[cut]]
        fl, cl = final.tolist(), created.tolist()
        # Best first; equal scores (e.g. equally relevant memories whose recency has decayed to 0):
        # the newer first, then by id, so the order never depends on the store's.
        order = sorted(chosen.tolist(), key=lambda k: (-fl[k], -cl[k], ids[k]))
        if keep is not None:
            order = order[:keep]
        starts = np.cumsum([0] + [len(p.found) for p in pools]).tolist()
        best_bm25 = [float(p.found.lexical.max()) if len(p.found.lexical) else 0.0 for p in pools]
        # (plain lists: reading a numpy array an element at a time costs ≈ 0.1 µs a read)
        rel, lex, epi = relevance.tolist(), lexical.tolist(), episode.tolist()
        recs, imp = rec.tolist(), importance.tolist()
        cosines = [p.found.cosine.tolist() for p in pools]
        bm25 = [p.found.lexical.tolist() for p in pools]
        ranked: list[_Ranked] = []
        for k in order:
            j = 0 if len(pools) == 1 else bisect.bisect_right(starts, k) - 1
            c, i = pools[j].found, k - starts[j]
            ranked.append(
                _make_ranked(
                    c.collection,
                    c.ids[i],
                    # (final, relevance, recency, importance, raw_similarity, lexical, episode,
                    # rescore, rerank)
                    make_score(
                        fl[k], rel[k], recs[k], imp[k] / 10.0, cosines[j][i], lex[k], epi[k], 0.0, 0.0
                    ),
                    None if c.vectors is None else c.vectors[i],
                    c.scripts[i],
                    bm25[j][i] / best_bm25[j] if best_bm25[j] > 0 else 0.0,
                )
            )
        return ranked

    async def _candidates(
        self,
        collection: str,
        query: _Query,
        *,
        limit: int,
        lexical_limit: int,
        flt: StoreFilter,
        asked: StoreFilter,
        lexical: bool,
        with_vectors: bool,
    ) -> _Pool:
        """The collection's candidates for ``query`` under ``flt`` (``asked`` plus the live-at time):
        reused from a recent identical search while the store reports the collection unchanged (same
        generation) and none of them has expired since — exactly what the storage would return now —
        otherwise fetched (and kept, LRU-bounded)."""
        now = flt.live_at if flt.live_at is not None else self._clock.now()
        entries = self.policy.search_cache_entries
        generation = self._store.generation(collection) if entries > 0 else None
        key: tuple[Any, ...] | None = None
        if generation is not None:
            key = (
                collection,
                query.text,
                query.as_document,
                limit,
                lexical_limit,
                asked,
                lexical,
                with_vectors,
            )
            hit = self._candidate_cache.get(key)
            if hit is not None:
                gen, fetched_at, expires_at, cached = hit
                # (Time going backwards could revive memories expired at fetch time: refetch.)
                if gen == generation and fetched_at <= now < expires_at:
                    self._candidate_cache.move_to_end(key)
                    _candidate_cache.add(1, {"engram.collection": collection, "engram.cache.result": "hit"})
                    query.cached += 1
                    return cached
                del self._candidate_cache[key]
        vector = await query.dense()
        sparse = query.sparse() if lexical else None
        with _query_span(collection, limit, lexical=bool(sparse)) as span:
            found = await self._store.candidates(
                collection,
                vector,
                limit,
                flt,
                sparse=sparse or None,
                lexical_limit=lexical_limit,
                with_vectors=with_vectors,
            )
            span.set_attribute("db.response.returned_rows", len(found))
        pool = self._prepare(found, query)
        if key is not None and generation is not None:
            _candidate_cache.add(1, {"engram.collection": collection, "engram.cache.result": "miss"})
            expires_at = float(found.valid_until.min()) if len(found) else math.inf
            self._candidate_cache[key] = (generation, now, expires_at, pool)
            while len(self._candidate_cache) > entries:
                self._candidate_cache.popitem(last=False)
        return pool

    async def _full_records(self, top: Sequence[_Ranked]) -> dict[str, MemoryRecord]:
        """The current records of the winners, by id (one read per collection; records of recent
        results are reused while their collection is unchanged, counters included)."""
        out: dict[str, MemoryRecord] = {}
        missing: dict[str, list[str]] = {}
        caching = self.policy.search_cache_entries > 0
        cache = self._record_cache
        changed: dict[tuple[str, int], frozenset[str] | None] = {}
        for r in top:
            generation = self._store.generation(r.collection) if caching else None
            if generation is not None:
                key = (r.collection, r.id)
                hit = cache.get(key)
                if hit is not None:
                    if hit[0] != generation:
                        # Written since? (other points' writes leave this record as it was)
                        since = (r.collection, hit[0])
                        if since not in changed:
                            changed[since] = self._store.changed_since(r.collection, hit[0])
                        written = changed[since]
                        if written is None or r.id in written:
                            missing.setdefault(r.collection, []).append(r.id)
                            continue
                        hit = (generation, hit[1])
                        cache[key] = hit
                    cache.move_to_end(key)
                    out[r.id] = hit[1]
                    continue
            missing.setdefault(r.collection, []).append(r.id)
        if not missing:
            return out
        before = {c: (self._store.generation(c), self._access_epoch.get(c, 0)) for c in missing}
        fetched = await _gather(*(self._store.retrieve(c, ids) for c, ids in missing.items()))
        bound = 16 * self.policy.search_cache_entries
        for collection, points in zip(missing, fetched, strict=True):
            generation, epoch = before[collection]
            keep = (
                caching
                and generation is not None
                and (generation, epoch)
                == (self._store.generation(collection), self._access_epoch.get(collection, 0))
            )
            for p in points:
                if not p.record.is_current:
                    continue
                out[p.record.id] = p.record
                if keep and generation is not None:
                    cache[(collection, p.record.id)] = (generation, p.record)
        while len(cache) > bound:
            cache.popitem(last=False)
        return out

    def _note_access(self, records: Sequence[MemoryRecord], now: float) -> None:
        """Count the search hits; the counters are written in one batch per collection, at most
        ``access_flush_seconds`` later (and at drain/shutdown), off the search's path."""
        for record in records:
            entry = self._pending_access.setdefault(record.collection, {}).setdefault(record.id, [0, now])
            entry[0] += 1
            entry[1] = max(entry[1], now)
        if records and not self._access_flush_scheduled:
            self._access_flush_scheduled = True
            self._spawn(self._flush_access())

    async def _flush_access(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._flush_now.wait(), self.policy.access_flush_seconds)
        self._access_flush_scheduled = False
        pending, self._pending_access = self._pending_access, {}
        for collection, counts in pending.items():
            async with self._lock(collection):
                # The store adds to what is stored now (concurrent searches add up; a memory
                # updated or deleted since it was found is skipped: its history version keeps the
                # old counters). Records cached for search results carry the counters: they get
                # the new ones (a read racing with the write is not cached: the epoch).
                self._access_epoch[collection] = self._access_epoch.get(collection, 0) + 1
                written: dict[str, tuple[int, float]] = {}
                try:
                    written = await self._store.add_access(
                        collection, {mid: (int(n), float(at)) for mid, (n, at) in counts.items()}
                    )
                finally:
                    self._access_epoch[collection] += 1
                    self._recount_records(collection, counts, written)

    def _recount_records(
        self, collection: str, counted: Iterable[str], written: Mapping[str, tuple[int, float]]
    ) -> None:
        """Cached records of memories whose counters were just written get the new counters; the
        others counted (skipped by the store, or the write failed) are dropped."""
        cache = self._record_cache
        for mid in counted:
            hit = cache.get((collection, mid))
            if hit is None:
                continue
            new = written.get(mid)
            if new is None:
                del cache[(collection, mid)]
            else:
                cache[(collection, mid)] = (
                    hit[0],
                    replace(hit[1], access_count=new[0], last_accessed_at=new[1]),
                )
