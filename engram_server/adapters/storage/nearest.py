"""Nearest-point lists of recent queries, kept across writes (the embedded store).

A search's dense candidates are the ``n`` points nearest its query vector (among those its user
filter matches, if any). Between two searches with the same question an agent usually writes a
few memories, which makes the whole candidate list stale for a cache keyed by the collection's
generation; yet each write changes a handful of points only. :class:`NearestLists` keeps, per
recent query vector and user filter, the nearest list the engine returned and a log of the
points written since (upserted, deleted, or a payload field other than the access counters
set). A later search with the same vector and filter asks the engine for the scores of those
points alone (one query restricted to their ids and the filter) and merges them in
(:func:`patch`), instead of searching the graph again:

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
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import numpy as np

__all__ = ["NearestBudget", "NearestList", "NearestLists", "Row", "patch"]

#: One point of a list: (rank key, score, vector or None, the engine's id object or None).
Row = tuple[int, float, Any, Any]

_NO_SCORES: np.ndarray = np.empty(0, dtype=np.float64)

#: Changes remembered per collection (the last half to all of them); a list older than the log is
#: searched anew. Patching costs a few µs per changed point (measured at 100k: 1 changed 1.65 ms,
#: 256 2.78 ms, 1,024 6.72 ms, against 5.0 ms for a fresh search), so a longer log would not pay.
DEFAULT_LOG_LIMIT = 512


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


@dataclass(slots=True)
class Lookup:
    """A kept list and the points changed since it was made (rank key → engine id)."""

    entry: NearestList
    changed: dict[int, Any]


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
    """The nearest lists of one collection, and the log of its dense-vector changes."""

    def __init__(self, budget: NearestBudget, *, log_limit: int = DEFAULT_LOG_LIMIT) -> None:
        if log_limit < 1:
            raise ValueError("log_limit must be >= 1")
        self._budget = budget
        self._lists: dict[Hashable, NearestList] = {}
        self._log: list[tuple[int, Any]] = []
        self._base = 0  # change-log position of self._log[0]
        self._log_limit = log_limit
        self._epoch = 0

    def __len__(self) -> int:
        return len(self._lists)

    @property
    def enabled(self) -> bool:
        return self._budget.entries > 0

    @property
    def seq(self) -> int:
        """The current change-log position."""
        return self._base + len(self._log)

    @property
    def epoch(self) -> int:
        return self._epoch

    def changed(self, points: Iterable[tuple[int, Any]]) -> None:
        """Points (rank key, engine id) whose dense vector was written or deleted."""
        if not self._lists:
            return  # nothing to patch (a list made later starts from the current position)
        self._log.extend(points)
        if len(self._log) > self._log_limit:
            drop = len(self._log) - self._log_limit // 2
            del self._log[:drop]
            self._base += drop
            for key in [k for k, entry in self._lists.items() if entry.seq < self._base]:
                self._budget.dropped(self, key)  # older than the log: would be searched anew
                self.forget(key)

    def reset(self) -> None:
        """Drop every list (a change that the log cannot describe, e.g. a deletion by filter; a
        dropped collection)."""
        for key in self._lists:
            self._budget.dropped(self, key)
        self._lists.clear()
        self._base += len(self._log)
        self._log.clear()

    def invalidate(self) -> None:
        """Drop every list from another thread (an index build): lists of an older epoch are
        ignored and replaced."""
        self._epoch += 1

    def forget(self, key: Hashable) -> None:
        self._lists.pop(key, None)
        if not self._lists:  # nothing left to patch: the log is not needed either
            self._base += len(self._log)
            self._log.clear()

    def get(self, key: Hashable) -> Lookup | None:
        entry = self._lists.get(key)
        if entry is None:
            return None
        if entry.epoch != self._epoch or entry.seq < self._base:
            self._budget.dropped(self, key)
            self.forget(key)
            return None
        self._budget.used(self, key)
        changed = dict(self._log[entry.seq - self._base :])
        return Lookup(entry, changed)

    def put(self, key: Hashable, entry: NearestList) -> None:
        if self._budget.entries <= 0:
            return
        self._lists[key] = entry
        self._budget.used(self, key)

    def new(self, rows: list[Row], limit: int) -> NearestList:
        """A list from an engine answer to a query for ``limit`` nearest points."""
        floor = rows[-1][1] if len(rows) >= limit and rows else -math.inf
        return NearestList.of(rows, floor, self.seq, self._epoch)


def patch(entry: NearestList, limit: int, changed: Mapping[int, Any], fresh: list[Row]) -> list[Row] | None:
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
