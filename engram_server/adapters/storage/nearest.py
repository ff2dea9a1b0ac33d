"""Nearest-point lists of recent queries, kept across writes (the embedded store).

A search's dense candidates are the ``n`` points nearest its query vector (among those its user
filter matches, if any). Between two searches with the same question an agent usually writes a
few memories, which makes the whole candidate list stale for a cache keyed by the collection's
generation; yet each write changes a handful of points only. :class:`NearestLists` keeps, per
recent query vector and user filter, the nearest list the engine returned and a log of the
points written since (upserted, deleted, or a payload field other than the access counters
set), with each upserted point's new dense vector. A later search with the same vector and
filter merges those points in (:func:`patch`) instead of searching the graph again: one matrix
product here finds the changed points that may enter the list (:meth:`Lookup.to_ask`: cosine
above the list's floor, less a rounding margin), and the engine is asked for the exact scores of
those few alone — one query restricted to their ids and the filter — and of any point whose
vector the log does not know (a payload field set, a failed write); deleted points just leave.

* every point (matching the filter) outside a list scores at most its ``floor`` (the last score
  the engine returned; ``-inf`` when the list holds every such point of the collection);
* a changed point is taken out of the list, and put back when it still exists, still matches
  and scores above the floor; a changed point at or below the floor stays outside, as the
  invariant allows;
* the list is cut back to ``n`` (the floor rises to the best point cut), and must still hold ``n``
  points unless it holds all of them: otherwise the caller searches anew.

So a patched list is the list a new exact search would return, given the old one; against an
HNSW index the engine's own answer to the same search is approximate either way. Liveness
(expiry, supersession, drafts) is not part of a list's filter: the store decides it, and
ranking, from its ranking fields at every search. Deletions are logged like any write, up to a
bound per deletion by filter; a larger one, and index builds, drop every list
(:meth:`NearestLists.reset`, :meth:`NearestLists.invalidate`).

All methods run on the store's io thread except :meth:`invalidate` (an index build's thread):
it only increments an integer that :meth:`get` compares.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Container, Hashable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import numpy as np

__all__ = ["NearestBudget", "NearestList", "NearestLists", "Row", "patch"]

#: One point of a list: (rank key, score, vector or None, the engine's id object or None).
Row = tuple[int, float, Any, Any]

_NO_SCORES: np.ndarray = np.empty(0, dtype=np.float64)

#: Changes remembered per collection (the last half to all of them, with the written vectors:
#: ≈ 1.5 kB each at 384 dimensions); a list older than the log is searched anew.
DEFAULT_LOG_LIMIT = 4096

#: How far below a list's floor the matrix product's cosine of a changed point may be and the
#: engine still be asked (the engine's float arithmetic differs from numpy's in the last bits).
PREFILTER_MARGIN = 1e-3

#: What a log slot knows of its point: its new vector, nothing (the engine is asked), or that it
#: was deleted.
_KNOWN = 1
_ASK = 2
_GONE = 3

#: Rows of vectors allocated at a time (192 kB at 384 dimensions).
_BLOCK = 128

#: Up to this many changes since a list, its changed points are handed over as a set.
_SMALL_CHANGE = 256


@dataclass(slots=True)
class NearestList:
    """The unfiltered nearest points of one query vector, best first.

    Kept compact (rank keys and a score array, ≈ 7 kB for 125 points instead of ≈ 25 kB as row
    tuples with the engine's id objects), since a store keeps thousands: :meth:`rows` makes the
    rows when a search uses the list (≈ 20 µs for 125)."""

    keys: list[int]
    scores: np.ndarray  # float64, one per key
    floor: float
    seq: int  # the change-log position the list reflects
    epoch: int
    #: Cosines of other points met by this query (BM25 hits beyond the list), by rank key.
    other_keys: list[int] = field(default_factory=list)
    other_scores: np.ndarray = field(default_factory=lambda: _NO_SCORES)

    @classmethod
    def of(cls, rows: Sequence[Row], floor: float, seq: int, epoch: int) -> NearestList:
        return cls([r[0] for r in rows], _scores(rows), floor, seq, epoch)

    def rows(self) -> list[Row]:
        """The list as rows (no vectors; engine ids ``None``: made from the key when needed)."""
        return list(zip(self.keys, self.scores.tolist(), repeat(None), repeat(None), strict=False))

    def set_rows(self, rows: Sequence[Row]) -> None:
        self.keys = [r[0] for r in rows]
        self.scores = _scores(rows)

    def others(self) -> dict[int, float]:
        return dict(zip(self.other_keys, self.other_scores.tolist(), strict=True))

    def set_others(self, others: Mapping[int, float]) -> None:
        self.other_keys = list(others)
        self.other_scores = np.fromiter(others.values(), dtype=np.float64, count=len(others))


def _scores(rows: Sequence[Row]) -> np.ndarray:
    return np.fromiter((r[1] for r in rows), dtype=np.float64, count=len(rows))


class Lookup:
    """A kept list and the points changed since it was made (a view of the log: use it before
    the next change)."""

    __slots__ = ("_log", "_since", "entry")

    def __init__(self, log: NearestLists, entry: NearestList) -> None:
        self._log = log
        self._since = entry.seq
        self.entry = entry

    @property
    def changed(self) -> AbstractSet[int] | Changed:
        """The rank keys of the points changed since (none of them is where the list says)."""
        log, since = self._log, self._since
        if log.seq - since <= _SMALL_CHANGE:  # (a set tests membership faster)
            return {log._keys[pos % log._cap] for pos in range(since, log.seq)}
        return Changed(log, since)

    def to_ask(self, query: np.ndarray) -> list[Any]:
        """Engine ids of the changed points that may now belong in the list: those scoring
        (cosine to ``query``) above its floor, and those whose vector the log does not know."""
        return self._log._to_ask(self._since, self.entry.floor, query)


class Changed:
    """The rank keys changed since a log position (``in``, ``bool``, iteration)."""

    __slots__ = ("_log", "_since")

    def __init__(self, log: NearestLists, since: int) -> None:
        self._log = log
        self._since = since

    def __contains__(self, key: object) -> bool:
        return isinstance(key, int) and self._log._latest.get(key, -1) >= self._since

    def __bool__(self) -> bool:
        return self._log.seq > self._since

    def __iter__(self) -> Iterator[int]:
        return (k for k, pos in self._log._latest.items() if pos >= self._since)


class NearestBudget:
    """How many nearest lists a store keeps, over all its collections (least recently used
    dropped first)."""

    def __init__(self, entries: int) -> None:
        if entries < 0:
            raise ValueError("entries must be >= 0 (0 = off)")
        self.entries = entries
        self._order: OrderedDict[tuple[int, Hashable], NearestLists] = OrderedDict()

    def __len__(self) -> int:
        return len(self._order)

    def used(self, owner: NearestLists, key: Hashable) -> None:
        self._order[(id(owner), key)] = owner
        self._order.move_to_end((id(owner), key))
        while len(self._order) > self.entries:
            (_, old), lists = self._order.popitem(last=False)
            lists.forget(old)

    def dropped(self, owner: NearestLists, key: Hashable) -> None:
        self._order.pop((id(owner), key), None)


class NearestLists:
    """The nearest lists of one collection, and the log of its changes.

    The log is a ring of ``log_limit`` slots (a change at log position ``p`` in slot
    ``p % log_limit``): each slot's rank key, engine id, kind (new vector known, unknown, deleted)
    and, for the known, the unit vector in a row of one matrix, so that a patch scores every
    changed point since a position in one product over at most two contiguous slices. A slot
    superseded by a later change of the same point is marked stale."""

    def __init__(self, budget: NearestBudget, *, log_limit: int = DEFAULT_LOG_LIMIT) -> None:
        if log_limit < 1:
            raise ValueError("log_limit must be >= 1")
        self._budget = budget
        self._lists: dict[Hashable, NearestList] = {}
        self._cap = log_limit
        self._base = 0  # the oldest change-log position held
        self._end = 0  # the next change-log position
        #: rank key → its latest log position (held positions only)
        self._latest: dict[int, int] = {}
        # by slot (allocated while something is logged)
        self._keys: list[int] = []
        self._pids: list[Any] = []
        self._kind = np.zeros(0, dtype=np.int8)
        self._stale = np.zeros(0, dtype=np.bool_)
        #: The known vectors by slot, in blocks of ``_BLOCK`` rows made as the log fills and
        #: released when it no longer holds any of their slots (a collection written a little
        #: between searches holds one block, not the whole ring).
        self._blocks: list[np.ndarray | None] = []
        self._epoch = 0

    def __len__(self) -> int:
        return len(self._lists)

    @property
    def enabled(self) -> bool:
        return self._budget.entries > 0

    @property
    def seq(self) -> int:
        """The current change-log position."""
        return self._end

    @property
    def epoch(self) -> int:
        return self._epoch

    def changed(
        self,
        points: Sequence[tuple[int, Any]],
        vectors: Sequence[Any] | None = None,
        *,
        gone: bool = False,
    ) -> None:
        """Points (rank key, engine id) whose dense vector or a filtered field was written: with
        their new dense ``vectors`` (one each, as stored), deleted (``gone``), or neither (a
        payload field set, or a write that failed: what the engine holds is not known here)."""
        if not self._lists:
            return  # nothing to patch (a list made later starts from the current position)
        m = len(points)
        if m > self._cap:
            self._end += m
            self.reset()  # every list would be older than the log
            return
        if self._end - self._base + m > self._cap:
            self._trim(self._end + m - max(self._cap // 2, m))
            if not self._lists:
                return
        if not self._keys:
            self._keys = [0] * self._cap
            self._pids = [None] * self._cap
            self._kind = np.zeros(self._cap, dtype=np.int8)
            self._stale = np.zeros(self._cap, dtype=np.bool_)
        slots = [(self._end + i) % self._cap for i in range(m)]
        kind = _GONE if gone else _ASK
        if vectors is not None:
            rows = np.asarray(
                [np.asarray(v, dtype=np.float32).reshape(-1) for v in vectors], dtype=np.float32
            )
            norms = np.linalg.norm(rows, axis=1, keepdims=True)
            rows = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)
            self._store_rows(slots, rows)
            kind = _KNOWN
        self._kind[slots] = kind
        self._stale[slots] = False
        latest, keys, pids = self._latest, self._keys, self._pids
        for (key, pid), slot in zip(points, slots, strict=True):
            before = latest.get(key)
            if before is not None:
                self._stale[before % self._cap] = True  # (one batch may name a point twice)
            latest[key] = self._end
            keys[slot] = key
            pids[slot] = pid
            self._end += 1

    def _store_rows(self, slots: list[int], rows: np.ndarray) -> None:
        if not self._blocks:
            self._blocks = [None] * -(-self._cap // _BLOCK)
        for i, slot in enumerate(slots):
            b, r = divmod(slot, _BLOCK)
            block = self._blocks[b]
            if block is None:
                block = self._blocks[b] = np.zeros((_BLOCK, rows.shape[1]), dtype=np.float32)
            block[r] = rows[i]

    def _scores(self, lo: int, hi: int, q: np.ndarray) -> np.ndarray:
        """Cosines to the unit vector ``q`` of slots ``lo`` to ``hi`` (0 where no vector)."""
        out = np.zeros(hi - lo, dtype=np.float32)
        for b in range(lo // _BLOCK, -(-hi // _BLOCK)):
            block = self._blocks[b] if self._blocks else None
            if block is None:
                continue
            start, stop = max(lo, b * _BLOCK), min(hi, (b + 1) * _BLOCK)
            out[start - lo : stop - lo] = block[start - b * _BLOCK : stop - b * _BLOCK] @ q
        return out

    def _trim(self, base: int) -> None:
        """Forget the changes before log position ``base``, and the lists older than it."""
        latest, keys = self._latest, self._keys
        for pos in range(self._base, base):
            key = keys[pos % self._cap]
            if latest.get(key) == pos:
                del latest[key]
        self._base = base
        held = {(pos % self._cap) // _BLOCK for pos in range(base, self._end, _BLOCK)}
        if self._end > base:
            held.add(((self._end - 1) % self._cap) // _BLOCK)
        for b in range(len(self._blocks)):
            if b not in held:
                self._blocks[b] = None
        for old in [k for k, entry in self._lists.items() if entry.seq < base]:
            self._budget.dropped(self, old)  # older than the log: would be searched anew
            self.forget(old)

    def _clear_log(self) -> None:
        self._base = self._end
        self._latest = {}
        self._keys, self._pids = [], []
        self._kind = np.zeros(0, dtype=np.int8)
        self._stale = np.zeros(0, dtype=np.bool_)
        self._blocks = []

    def _to_ask(self, since: int, floor: float, query: np.ndarray) -> list[Any]:
        n = self._end - since
        if n <= 0:
            return []
        start = since % self._cap
        spans = (
            [(start, start + n)]
            if start + n <= self._cap
            else [(start, self._cap), (0, start + n - self._cap)]
        )
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        norm = float(np.linalg.norm(q))
        q = q / norm if norm > 0 else q
        ask: list[Any] = []
        for lo, hi in spans:
            kind = self._kind[lo:hi]
            current = ~self._stale[lo:hi]
            wanted = current & (kind == _ASK)
            known = current & (kind == _KNOWN)
            if floor == -math.inf:
                wanted |= known
            elif known.any():
                wanted |= known & (self._scores(lo, hi, q) > floor - PREFILTER_MARGIN)
            ask.extend(self._pids[lo + i] for i in np.flatnonzero(wanted).tolist())
        return ask

    def reset(self) -> None:
        """Drop every list (a change that the log cannot describe, e.g. a deletion by filter; a
        dropped collection)."""
        for key in self._lists:
            self._budget.dropped(self, key)
        self._lists.clear()
        self._clear_log()

    def invalidate(self) -> None:
        """Drop every list from another thread (an index build): lists of an older epoch are
        ignored and replaced."""
        self._epoch += 1

    def forget(self, key: Hashable) -> None:
        self._lists.pop(key, None)
        if not self._lists:  # nothing left to patch: the log is not needed either
            self._clear_log()

    def get(self, key: Hashable) -> Lookup | None:
        entry = self._lists.get(key)
        if entry is None:
            return None
        if entry.epoch != self._epoch or entry.seq < self._base:
            self._budget.dropped(self, key)
            self.forget(key)
            return None
        self._budget.used(self, key)
        return Lookup(self, entry)

    def put(self, key: Hashable, entry: NearestList) -> None:
        if self._budget.entries <= 0:
            return
        self._lists[key] = entry
        self._budget.used(self, key)

    def new(self, rows: list[Row], limit: int) -> NearestList:
        """A list from an engine answer to a query for ``limit`` nearest points."""
        floor = rows[-1][1] if len(rows) >= limit and rows else -math.inf
        return NearestList.of(rows, floor, self.seq, self._epoch)


def patch(entry: NearestList, limit: int, changed: Container[int], fresh: list[Row]) -> list[Row] | None:
    """Merge into ``entry`` the current rows ``fresh`` of the ``changed`` points (those of them
    that still exist), in place, and return its rows. None when the list no longer holds
    ``limit`` points while points outside it may exist (the caller must search anew)."""
    rows = [r for r in entry.rows() if r[0] not in changed]
    floor = entry.floor
    rows.extend(r for r in fresh if r[1] > floor)
    rows.sort(key=lambda r: -r[1])
    if len(rows) > limit:
        floor = max(floor, rows[limit][1])
        del rows[limit:]
    elif len(rows) < limit and floor != -math.inf:
        return None
    entry.set_rows(rows)
    entry.floor = floor
    if entry.other_keys and any(k in changed for k in entry.other_keys):
        entry.set_others({k: v for k, v in entry.others().items() if k not in changed})
    return rows
