"""Rescoring cues on the Qdrant server store: kept in each point's payload, returned by the search.

A search rescores its best candidates from two cues of their text (the lead label and the share of
question sentences, :class:`engram_server.domain.ranking.RescoreCue`). The server store writes both
into payload fields (``rescore_questions``, ``rescore_label``) when a point's text is written
(``upsert``, or ``set_fields`` of ``content``), and the search's own candidate query returns them
beside the ranking fields (on a server, inside the packed ranking value that holds both:
``qdrant_grpc.PACKED_FIELD``). What a query returned is remembered in a small bounded memo
(:class:`CueMemo`), which ``QdrantStore.rescore_cues`` answers from: a search reads no record to
rescore. (Two flat fields, not one nested object: the client decodes every payload value of every
candidate, and a nested object costs one more recursion per point.)

Points written by a release without the fields (no ``rescore_questions`` in their payload) are not
remembered; ``rescore_cues`` reads their text (one ``retrieve`` of those ids only) and computes the
cue from it, as the search did before, so they rank identically. Rewriting such a point's text
gives it the fields.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from itertools import repeat
from typing import Any, Final, cast

from engram_server.domain.ranking import NO_CUE, RescoreCue, rescore_cue

__all__ = ["CUE_FIELDS", "CUE_MEMO_ENTRIES", "CueMemo", "cue_payload", "stored_cue"]

#: The share of the text's sentences that are questions; present on every point written with cues.
QUESTIONS_FIELD: Final = "rescore_questions"
#: The text's lead label (absent when it has none).
LABEL_FIELD: Final = "rescore_label"
#: The payload fields of a point's rescoring cue.
CUE_FIELDS: Final = (QUESTIONS_FIELD, LABEL_FIELD)

#: Points whose cue (and ``created_at``) the memo holds: a search asks for at most its
#: ``rescore_depth`` best candidates (50) right after its candidate query, so this covers hundreds
#: of searches in flight; an id pushed out is read from Qdrant (the fallback).
CUE_MEMO_ENTRIES: Final = 16384


def cue_payload(content: str) -> dict[str, Any]:
    """The cue payload fields of a text (a label of None clears a stored one)."""
    label, share = rescore_cue(content)
    return {QUESTIONS_FIELD: float(share), LABEL_FIELD: label}


def stored_cue(payload: Mapping[str, Any] | None) -> RescoreCue | None:
    """The cue kept in a payload; None when the point has none (written before the fields)."""
    p = payload or {}
    share = p.get(QUESTIONS_FIELD)
    if share is None:
        return None
    share = float(share)
    label = p.get(LABEL_FIELD)
    if label is None:
        return NO_CUE if share == 0.0 else RescoreCue(None, share)
    return RescoreCue(sys.intern(str(label)), share)


class CueMemo:
    """The cues and ``created_at`` of the points the latest candidate queries returned, by
    ``(collection, id)``, about ``entries`` at most (the oldest are dropped). Each candidate query
    overwrites what it returned, so the search that follows it reads its own query's values.

    Two generations: a query's hits go into the young one in one ``dict.update``; when it holds
    half of ``entries``, it becomes the old one and the previous old one is dropped. A lookup
    tries the young one first (the newer value)."""

    __slots__ = ("_half", "_old", "_young")

    def __init__(self, entries: int = CUE_MEMO_ENTRIES) -> None:
        self._young: dict[tuple[str, str], tuple[RescoreCue, float]] = {}
        self._old: dict[tuple[str, str], tuple[RescoreCue, float]] = {}
        self._half = max(1, entries // 2)

    def __len__(self) -> int:
        young = self._young
        return len(young) + sum(1 for key in self._old if key not in young)

    def _roll(self) -> None:
        if len(self._young) >= self._half:
            self._old, self._young = self._young, {}

    def put(self, collection: str, pid: str, payload: Mapping[str, Any] | None) -> None:
        """Remember what one hit's payload says (forget the id when it carries no cue)."""
        self.put_cue(collection, pid, stored_cue(payload), float((payload or {}).get("created_at") or 0.0))

    def put_cue(self, collection: str, pid: str, cue: RescoreCue | None, created_at: float) -> None:
        """Remember a hit's stored cue and ``created_at`` (forget the id when it has no cue)."""
        key = (collection, pid)
        if cue is None:
            self._young.pop(key, None)
            self._old.pop(key, None)
            return
        self._young[key] = (cue, created_at)
        self._roll()

    def put_cues(
        self,
        collection: str,
        pids: Sequence[str],
        cues: Sequence[RescoreCue | None],
        created_at: Sequence[float],
    ) -> None:
        """``put_cue`` of each hit of one query, in order."""
        if None in cues:
            for pid, cue, created in zip(pids, cues, created_at, strict=True):
                self.put_cue(collection, pid, cue, created)
            return
        kept = cast("Sequence[RescoreCue]", cues)  # (none is None)
        self._young.update(
            zip(zip(repeat(collection), pids), zip(kept, created_at, strict=True), strict=True)
        )
        self._roll()

    def get(self, collection: str, pid: str) -> tuple[RescoreCue, float] | None:
        key = (collection, pid)
        kept = self._young.get(key)
        return self._old.get(key) if kept is None else kept

    def forget(self, collection: str, pids: list[str] | None = None) -> None:
        """Drop ``pids`` of ``collection`` (every id of it when None)."""
        for entries in (self._young, self._old):
            if pids is None:
                for key in [k for k in entries if k[0] == collection]:
                    del entries[key]
                continue
            for pid in pids:
                entries.pop((collection, pid), None)
