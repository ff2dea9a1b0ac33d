"""The storage queries: a search's candidates (dense and BM25, the ranking columns kept beside
the engine, nearest lists patched with the points written since) and the gate's neighbours."""

from __future__ import annotations

import hashlib
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from operator import attrgetter, itemgetter
from typing import Any, cast

import numpy as np
import qdrant_edge as qe
from opentelemetry import metrics

from engram_server.adapters.storage.edge.engine import (
    DENSE_SEARCH_PARAMS,
    EdgeEngine,
    _Collection,
    _edge_filter,
    _engine_key,
)
from engram_server.adapters.storage.nearest import NearestList, Row, patch
from engram_server.adapters.storage.payload import (
    CANDIDATE_FIELDS,
    LEXICAL_VECTOR,
    CandidateBuilder,
    RankFields,
    as_vector,
    candidate_columns,
    canonical_ids,
    filter_plan,
    is_live,
    payload_cue,
    rank_fields,
    rank_key,
    record_from_payload,
    split_live,
)
from engram_server.domain.errors import StorageUnavailable
from engram_server.domain.model import (
    Candidates,
    ScoredPoint,
    SparseVector,
    StoreFilter,
    Vector,
)
from engram_server.domain.ranking import RescoreCue

_nearest_lists = metrics.get_meter("engram_server.storage").create_counter(
    "engram.storage.nearest_lists",
    unit="{search}",
    description="Candidate fetches by how their nearest list was had: reused as kept, patched with the "
    "points written since, or searched in the graph.",
)
#: A search without user filters asks the engine, unfiltered, for this many (at least; a quarter
#: of the limit for large limits) more nearest points than it needs and drops the dead ones itself.
_LIVENESS_MARGIN = 16
#: The payload fields ``texts`` reads.
_TEXT_FIELDS = ("content", "created_at", "superseded_by")
#: Queries restricted to a few ids: the original vectors (a score threshold applies to exact scores).
_EXACT_PARAMS = qe.SearchParams(quantization=qe.QuantizationSearchParams(ignore=True))
#: An engine hit's fields, and an engine id's integer (read column by column: ``hits``).
_ID, _SCORE, _VECTOR, _INT = attrgetter("id"), attrgetter("score"), attrgetter("vector"), attrgetter("int")


class _Hit:
    """A point read in full with the score a query gave it (what ``_scored`` reads)."""

    __slots__ = ("id", "payload", "score", "vector")

    def __init__(self, record: Any, score: float) -> None:
        self.id, self.payload, self.vector, self.score = record.id, record.payload, record.vector, score


def _know_ranks(col: _Collection, engine_ids: Mapping[int, Any]) -> None:
    """Read the ranking fields of the points (rank key → engine id) not yet in ``col.ranks``
    (they are loaded in the background after open)."""
    ranks = col.ranks
    missing = [pid for key, pid in engine_ids.items() if key not in ranks]
    if missing:
        for r in col.shard.retrieve(missing, list(CANDIDATE_FIELDS), False):
            ranks[_engine_key(r.id)] = rank_fields(str(r.id), r.payload, col.spec.name)
        if any(key not in ranks for key in engine_ids):  # cannot happen (one thread)
            raise StorageUnavailable(f"a point in collection {col.spec.name!r} vanished during a query")


def _scored(col: _Collection, hits: Sequence[Any], *, with_vectors: bool) -> list[ScoredPoint]:
    out = []
    for h in hits:
        pid = h.id  # (read once: an engine hit's id is a new ``uuid.UUID`` at each read)
        payload = col.counters(pid, h.payload)
        vector = h.vector if with_vectors else None
        out.append(
            ScoredPoint(
                record_from_payload(pid, col.spec.name, payload),
                float(h.score),
                as_vector(vector) if vector is not None else None,
                script=str(payload.get("script") or ""),
            )
        )
    return out


class EdgeCandidates(EdgeEngine):
    """The storage queries: neighbours (the gate's) and search candidates, with the
    ranking columns and nearest lists."""

    async def search(
        self,
        collection: str,
        vector: Vector,
        limit: int,
        flt: StoreFilter,
        *,
        with_vectors: bool = False,
    ) -> list[ScoredPoint]:
        if limit <= 0:
            return []
        query: list[float] = vector.reshape(-1).tolist()
        return await self._read(
            lambda: self._nearest_records(self._col(collection), [query], limit, flt, with_vectors)[0]
        )

    async def search_batch(
        self, collection: str, vectors: Vector, limit: int, flt: StoreFilter
    ) -> list[list[ScoredPoint]]:
        rows: list[list[float]] = np.asarray(vectors, dtype=np.float64).tolist()
        if limit <= 0 or not rows:
            return [[] for _ in rows]
        return await self._run(lambda: self._nearest_records(self._col(collection), rows, limit, flt, False))

    def _nearest_records(
        self, col: _Collection, rows: list[list[float]], limit: int, flt: StoreFilter, with_vectors: bool
    ) -> list[list[ScoredPoint]]:
        """The nearest ``limit`` points matching ``flt`` to each query row, read in full (the write
        gate, locating a memory, reflection's copy check), as one planned batch.

        As for ``candidates``, liveness is decided from the ranking fields kept beside the engine
        rather than by the engine at every graph node it visits: it is asked for the ids and scores
        of a margin more nearest points under the user's part of the filter, the first ``limit``
        live ones are read in full (one read for the batch), and a row with too few live ones among
        them is asked again with the whole filter (measured at 100k, the gate's 8 nearest: 1.12 vs
        1.67 ms for one vector, 61.5 vs 83.0 ms for 64)."""
        params = self._neighbour_params()
        want_vector: list[str] | bool = [""] if with_vectors else False

        def whole(some: list[list[float]]) -> list[list[ScoredPoint]]:
            where = _edge_filter(filter_plan(flt))
            found = col.shard.query_batch(
                qe.QueryBatchRequest(
                    [
                        qe.QueryRequest(
                            limit=limit,
                            query=qe.Query.Nearest(row),
                            filter=where,
                            with_payload=True,
                            with_vector=want_vector,
                            params=params,
                        )
                        for row in some
                    ]
                )
            )
            return [_scored(col, hits, with_vectors=with_vectors) for hits in found]

        split = split_live(flt)
        if split is None:
            return whole(rows)
        user, live_at = split
        where = _edge_filter(filter_plan(user))
        asked = limit + max(_LIVENESS_MARGIN, limit // 4)
        found = col.shard.query_batch(
            qe.QueryBatchRequest(
                [
                    qe.QueryRequest(
                        limit=asked,
                        query=qe.Query.Nearest(row),
                        filter=where,
                        with_payload=False,
                        with_vector=False,
                        params=params,
                    )
                    for row in rows
                ]
            )
        )
        ranks = col.ranks
        engine_ids: dict[int, Any] = {}
        answers: list[list[tuple[int, float]]] = []
        for hits in found:
            pairs = []
            for h in hits:
                key = _engine_key(h.id)
                engine_ids[key] = h.id
                pairs.append((key, h.score))
            answers.append(pairs)
        _know_ranks(col, engine_ids)
        chosen: list[list[tuple[int, float]] | None] = []
        wanted: dict[int, Any] = {}
        for pairs in answers:
            live = [(key, score) for key, score in pairs if is_live(ranks[key], live_at)]
            if len(live) < limit and len(pairs) >= asked:
                chosen.append(None)  # more dead than the margin among the nearest: the engine filters
                continue
            chosen.append(live[:limit])
            wanted.update((key, engine_ids[key]) for key, _ in live[:limit])
        read = col.shard.retrieve(list(wanted.values()), True, with_vectors) if wanted else []
        records = {_engine_key(r.id): r for r in read}
        redo = [i for i, pairs in enumerate(chosen) if pairs is None]
        redone = dict(zip(redo, whole([rows[i] for i in redo]), strict=True)) if redo else {}
        out: list[list[ScoredPoint]] = []
        for i, kept in enumerate(chosen):
            if kept is None:
                out.append(redone[i])
                continue
            if any(key not in records for key, _ in kept):  # cannot happen (one thread)
                raise StorageUnavailable(f"a point in collection {col.spec.name!r} vanished during a query")
            out.append(
                _scored(col, [_Hit(records[key], score) for key, score in kept], with_vectors=with_vectors)
            )
        return out

    async def rescore_cues(self, collection: str, ids: Sequence[str]) -> dict[str, tuple[RescoreCue, float]]:
        """By id, the rescoring cue of each point's text and its ``created_at``, from what is kept
        beside the engine (``_Collection.cues``, ``ranks``): no text is read or parsed here once
        the collection's fields are loaded (a point not yet loaded is read from the engine)."""
        keys: dict[str, int] = {}
        for pid in ids:
            try:
                # (the canonical form's hex digits: a fifth of ``rank_key``'s cost)
                keys[pid] = int(pid.replace("-", ""), 16) if len(pid) == 36 else rank_key(pid)
            except ValueError:  # (not a UUID: names no point)
                continue

        def known(col: _Collection) -> dict[str, tuple[RescoreCue, float]]:
            ranks, cues = col.ranks, col.cues
            out: dict[str, tuple[RescoreCue, float]] = {}
            for pid, key in keys.items():
                cue, fields = cues.get(key), ranks.get(key)
                if cue is not None and fields is not None:
                    out[pid] = (cue, fields[2])
            return out

        def work() -> dict[str, tuple[RescoreCue, float]]:
            col = self._col(collection)
            out = known(col)
            missing: list[int | uuid.UUID | str] = [pid for pid in keys if pid not in out]
            if missing:
                for r in col.shard.retrieve(missing, [*CANDIDATE_FIELDS, "content"], False):
                    key = _engine_key(r.id)
                    col.ranks.setdefault(key, rank_fields(str(r.id), r.payload, collection))
                    col.cues[key] = payload_cue(r.payload)
                out = known(col)
            return out

        # Known already (the usual case once the fields are loaded): read here, without waiting
        # for the io thread. These are reads of the kept dicts only (never the engine), so only a
        # write queued or running before them must go first (``_queued``), as ``_read`` orders it.
        col = self._cols.get(collection)
        if col is not None and not self._queued and self._io is not None:
            got = known(col)
            if len(got) == len(keys):
                return got
        return await self._read(work)

    async def texts(self, collection: str, ids: Sequence[str]) -> dict[str, tuple[str, float]]:
        """By id, each current point's ``content`` and ``created_at`` (``TextSource``): only
        those payload fields are read, and no record is decoded."""
        wanted = canonical_ids(ids)
        if not wanted:
            return {}
        # (the engine hands ids back as ``uuid.UUID``: keyed by ``.int``, as ``rank_key`` keys)
        by_key = {int(pid.replace("-", ""), 16): pid for pid in wanted}

        def work() -> dict[str, tuple[str, float]]:
            col = self._col(collection)
            out: dict[str, tuple[str, float]] = {}
            for r in col.shard.retrieve(list(wanted), list(_TEXT_FIELDS), False):
                p = r.payload or {}
                if p.get("superseded_by") is not None:
                    continue  # a history version (as ``retrieve`` callers skip them)
                try:
                    out[by_key[_engine_key(r.id)]] = (str(p["content"]), float(p["created_at"]))
                except (KeyError, ValueError, TypeError) as exc:
                    raise StorageUnavailable(
                        f"point {r.id} in collection {collection!r} has an unreadable payload: {exc!r}"
                    ) from exc
            return out

        return await self._read(work)

    async def candidates(
        self,
        collection: str,
        vector: Vector,
        limit: int,
        flt: StoreFilter,
        *,
        sparse: SparseVector | None = None,
        lexical_limit: int | None = None,
        with_vectors: bool = False,
    ) -> Candidates:
        query: list[float] = vector.reshape(-1).tolist()
        want_vector: list[str] | bool = [""] if with_vectors else False

        def work() -> Candidates:
            col = self._col(collection)
            if limit <= 0:
                return CandidateBuilder(collection, with_vectors=with_vectors).build()
            whole: list[qe.Filter | None] = []

            def edge_filter() -> qe.Filter | None:
                """The whole filter, as the engine takes it (built once, and only when asked: a
                search without user filters sends none)."""
                if not whole:
                    whole.append(_edge_filter(filter_plan(flt)))
                return whole[0]

            # A search wants the live current points only (and those its user filters match).
            # The engine pays for a filter at every graph node it visits (measured at 100k:
            # top-100 2.3 ms with the liveness filter, 1.3 ms for an unfiltered top-125), while
            # the ranking fields kept beside it (``col.ranks``) tell liveness for free: ask for a
            # margin more nearest points under the user's filter alone (none, mostly), and keep
            # the first ``limit`` live ones. Exact whenever that many are live among them (every
            # other live point is farther); otherwise the whole filter runs in the engine.
            split = split_live(flt)
            post = split is not None
            live_at = split[1] if split is not None else None
            user_filter = split[0] if split is not None else flt
            where = _edge_filter(filter_plan(user_filter)) if split is not None else edge_filter()
            dense_limit = limit + max(_LIVENESS_MARGIN, limit // 4) if post else limit

            # (converted once: each request takes a copy, and converting 384 floats is the cost)
            nearest_query = qe.Query.Nearest(query)

            def dense_request(n: int, where: qe.Filter | None) -> qe.QueryRequest:
                # Ids and scores only (each attribute read of an engine hit converts it anew:
                # read each once); the ranking fields come from ``col.ranks``.
                return qe.QueryRequest(
                    limit=n,
                    query=nearest_query,
                    filter=where,
                    with_payload=False,
                    with_vector=want_vector,
                    params=DENSE_SEARCH_PARAMS,
                )

            # The nearest list of this vector (under this user filter) kept from an earlier search,
            # if any: patched with the points written since instead of searching the graph again
            # (see ``nearest``).
            nearest = col.nearest if post and not with_vectors and col.nearest.enabled else None
            # (a 128-bit digest of the vector: 16 bytes kept instead of its 1.5 kB)
            list_key = (
                (hashlib.blake2b(vector.tobytes(), digest_size=16).digest(), dense_limit, user_filter)
                if nearest is not None
                else None
            )
            kept_list = nearest.get(list_key) if nearest is not None and list_key is not None else None
            # The changed points that may enter the list (and those whose vector is not known).
            changed_ids = kept_list.to_ask(vector) if kept_list is not None else []
            requests = [] if kept_list is not None else [dense_request(dense_limit, where)]
            lexical_n = limit if lexical_limit is None else lexical_limit
            lexical = bool(sparse) and col.spec.lexical is not None and lexical_n > 0
            # The BM25 side the same way: the user filter only, a margin, dead ones dropped here.
            lexical_limit_asked = lexical_n + max(_LIVENESS_MARGIN, lexical_n // 4) if post else lexical_n

            def sparse_request(n: int, where: qe.Filter | None) -> qe.QueryRequest:
                assert sparse is not None
                return qe.QueryRequest(
                    limit=n,
                    query=qe.Query.Nearest(
                        qe.SparseVector(list(sparse.indices), list(sparse.values)), using=LEXICAL_VECTOR
                    ),
                    filter=where,
                    with_payload=False,
                    with_vector=False,
                )

            def by_ids_request(
                ids: list[Any], also: qe.Filter | None = None, above: float | None = None
            ) -> qe.QueryRequest:
                # The exact cosine of these points (those that exist, match ``also`` and score at
                # least ``above``).
                must: list[Any] = [qe.HasIdCondition(set(ids))]
                if also is not None:
                    must.extend(also.must or ())
                return qe.QueryRequest(
                    limit=len(ids),
                    query=nearest_query,
                    filter=qe.Filter(must=must),
                    with_payload=False,
                    with_vector=want_vector,
                    score_threshold=above,
                    params=_EXACT_PARAMS,  # (a few points: their original vectors, not int8 codes)
                )

            if lexical:
                requests.append(sparse_request(lexical_limit_asked, where))
            if kept_list is not None and changed_ids:
                # Those that still match the user filter and may enter the list (score above its
                # floor: the engine drops the rest, however many points were written).
                floor = kept_list.entry.floor
                requests.append(by_ids_request(changed_ids, where, None if floor == -math.inf else floor))
            # One planned batch: the engine runs the dense and the sparse query together.
            results = iter(col.shard.query_batch(qe.QueryBatchRequest(requests)) if requests else [])
            dense_found = next(results) if kept_list is None else None
            lexical_found = next(results) if lexical else None
            changed_found = next(results) if changed_ids else None
            ranks = col.ranks

            def fetch_ranks(missing: list[Any], rows: list[Row]) -> None:
                """Read the ranking fields of the points ``missing`` (engine ids) from the engine
                into ``ranks`` (those loaded in the background after open are there already)."""
                for r in col.shard.retrieve(missing, list(CANDIDATE_FIELDS), False):
                    ranks[_engine_key(r.id)] = rank_fields(str(r.id), r.payload, collection)
                for k, _, _, _ in rows:
                    if k not in ranks:  # deleted under us cannot happen (one thread)
                        raise StorageUnavailable(
                            f"a point in collection {collection!r} vanished during a query"
                        )

            def known(rows: list[Row]) -> list[Row]:
                """``rows``, once the ranking fields of each are in ``ranks``."""
                missing = [
                    uuid.UUID(int=k) if pid is None else pid for k, _, _, pid in rows if k not in ranks
                ]
                if missing:
                    fetch_ranks(missing, rows)
                return rows

            def hits_known(found: Sequence[Any]) -> tuple[list[Row], list[RankFields]]:
                """(rank key, score, vector, engine id) of each hit, and its ranking fields (then
                in ``ranks``).
                Ids are read as ``.int`` (``str()`` of the engine's ``uuid.UUID`` costs more than
                a microsecond a hit); the canonical text id is the ranking fields' last one. Column
                by column, each a C-level pass (a fifth cheaper than a Python loop a hit); each
                attribute of an engine hit is read once (a read converts it anew), and each
                point's ranking fields are looked up once (the first touch of a large dict's
                entries is what costs)."""
                pids = list(map(_ID, found))
                keys = list(map(_INT, pids))
                vectors = list(map(_VECTOR, found)) if with_vectors else [None] * len(pids)
                rows: list[Row] = list(zip(keys, map(_SCORE, found), vectors, pids, strict=True))
                got = list(map(ranks.get, keys))
                if all(got):
                    return rows, cast(list[RankFields], got)
                fetch_ranks([pid for pid, f in zip(pids, got, strict=True) if f is None], rows)
                return rows, list(map(ranks.__getitem__, keys))

            def hits(found: Sequence[Any]) -> list[Row]:
                """``hits_known``'s rows."""
                return hits_known(found)[0]

            def live_first(
                rows: list[Row],
                n: int,
                asked: int,
                keep: Callable[[int], bool] | None,
                fields: list[RankFields] | None = None,
            ) -> list[Row] | None:
                """The first ``n`` live rows of an unfiltered answer to ``asked`` (and any later
                live ones ``keep`` wants); None when the margin held too few live ones (more dead
                than the margin among the nearest: the engine must filter). ``fields``: the rows'
                ranking fields when known (else looked up). (``is_live``, inlined: a call a row
                is a fifth of this loop.)"""
                assert live_at is not None
                at = live_at
                if fields is None:
                    live = [row for row in rows if (f := ranks[row[0]])[5] and f[3] > at]
                else:
                    live = [row for row, f in zip(rows, fields, strict=True) if f[5] and f[3] > at]
                if len(live) < n and len(rows) >= asked:
                    return None
                if keep is None or len(live) <= n:
                    return live[:n]
                return live[:n] + [row for row in live[n:] if keep(row[0])]

            lexical_score: dict[int, float] = {}
            lexical_id: dict[int, Any] = {}  # the engine's id objects (cheaper to send back than text)
            if lexical:
                assert lexical_found is not None
                if post:
                    # The first ``lexical_n`` hits first: when all are live (the usual case) the
                    # margin's hits are never read (each id read makes a ``uuid.UUID``).
                    found_lexical, known_fields = hits_known(lexical_found[:lexical_n])
                    kept = live_first(found_lexical, lexical_n, lexical_limit_asked, None, known_fields)
                    if kept is None or len(kept) < lexical_n:
                        more, more_fields = hits_known(lexical_found[lexical_n:])
                        kept = live_first(
                            found_lexical + more,
                            lexical_n,
                            lexical_limit_asked,
                            None,
                            known_fields + more_fields,
                        )
                    if kept is None:
                        kept = hits(col.shard.query(sparse_request(lexical_n, edge_filter())))
                    found_lexical = kept
                else:
                    found_lexical = hits(lexical_found)
                for k, score, _, pid in found_lexical:
                    if score > 0:
                        lexical_score[k] = score
                        lexical_id[k] = pid
            entry: NearestList | None = None
            how = "searched"
            dense_fields: list[RankFields] | None = None  # (of ``dense``'s rows, when read with them)
            if kept_list is not None:
                assert nearest is not None
                entry = kept_list.entry
                patched = (
                    patch(entry, dense_limit, kept_list.changed, hits(changed_found or []))
                    if kept_list.changed
                    else entry.rows()
                )
                if patched is None:
                    entry = None  # too few left (deletions): search anew
                    dense = hits(col.shard.query(dense_request(dense_limit, where)))
                else:
                    entry.seq = nearest.seq
                    dense = known(patched)
                    how = "patched" if kept_list.changed else "reused"
            else:
                assert dense_found is not None
                dense, dense_fields = hits_known(dense_found)
            if nearest is not None:
                _nearest_lists.add(1, {"engram.collection": collection, "engram.nearest_list": how})
                if entry is None:
                    entry = nearest.new(dense, dense_limit)
                    assert list_key is not None
                    nearest.put(list_key, entry)
            if post:
                # (nearest live ones past the first ``limit`` stay when BM25 found them too:
                # their cosine is known)
                kept = live_first(dense, limit, dense_limit, lexical_score.__contains__, dense_fields)
                if kept is None:
                    kept = hits(col.shard.query(dense_request(limit, edge_filter())))
                dense = kept
            if lexical:
                in_dense = {k for k, _, _, _ in dense}
                only_lexical = [k for k in lexical_score if k not in in_dense]
                if only_lexical:
                    # Their cosine, exactly, from the engine: a dense query restricted to these
                    # ids (cheaper than shipping their vectors to Python); all found: nothing
                    # writes between the queries (one thread). Kept with the nearest list: a
                    # point's cosine to this vector changes only when its vector does.
                    others = entry.others() if entry is not None else {}
                    extra = known([(k, others[k], None, None) for k in only_lexical if k in others])
                    ask = [lexical_id[k] for k in only_lexical if k not in others]
                    if ask:
                        fresh = hits(col.shard.query(by_ids_request(ask)))
                        if entry is not None:
                            if len(others) > 2 * lexical_limit_asked:
                                others.clear()
                            others.update((row[0], row[1]) for row in fresh)
                            entry.set_others(others)
                        extra += fresh
                    extra.sort(key=lambda row: -row[1])
                    dense = dense + extra
            if not dense:
                return CandidateBuilder(collection, with_vectors=with_vectors).build()
            # (column by column: each a C-level pass over the rows)
            keys, cosines, vectors, _ = zip(*dense, strict=True)
            fields = list(map(ranks.__getitem__, keys))
            return candidate_columns(
                collection,
                list(map(itemgetter(6), fields)),
                fields,
                cosines,
                list(map(lexical_score.get, keys, repeat(0.0))),
                vectors=vectors if with_vectors else None,
            )

        return await self._read(work)
