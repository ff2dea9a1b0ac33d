"""Access counters of the embedded store, kept beside the engine (one small log per collection).

Every search counts a hit on each memory it returns (``access_count``, ``last_accessed_at``). In
the engine's payload each such write costs ≈ 60–90 µs a point and, worse, moves the point out of
its HNSW-indexed segment (segments are copy-on-write): a collection searched often would keep
moving its most useful memories into the unindexed segment, which every search then scans.

So the embedded store keeps the counters written since a point's last upsert here instead: a
dict in memory and an append-only log of fixed 32-byte records (the id's 16 bytes, the count, the
last access time), replayed at open (the last record of an id wins) and rewritten when it holds
many more records than live entries. The engine's payload keeps the counters a point was
upserted with; readers overlay this ledger's entry (:meth:`AccessLedger.overlay`). An upsert or
a deletion forgets a point's entry (a tombstone record: count −1). ``engram compact`` writes the
entries into the engine (its optimizer then rebuilds the segments anyway) and empties the log.

Durability is the store's: with ``sync`` every append is fsynced (``ENGRAM_SYNC_WRITES``);
otherwise a process crash loses nothing written (the OS has it) and a power loss at most the
last appends, like the engine's own WAL. A torn last record (a crash mid-append) is dropped at
open. All methods run on the store's io thread.
"""

from __future__ import annotations

import logging
import math
import os
import struct
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

__all__ = ["ACCESS_LOG", "AccessLedger"]

log = logging.getLogger(__name__)

#: The log's file name in a collection's directory.
ACCESS_LOG = "access.log"
#: id (UUID bytes, big-endian), access count (−1: the entry is forgotten), last access (NaN: none).
_RECORD = struct.Struct("<16sqd")
#: The log is rewritten from the live entries once it holds more than this many records and
#: more than twice as many as there are entries.
_COMPACT_MIN = 65_536


class AccessLedger:
    """The access counters of one collection's points written since their last upsert."""

    def __init__(self, path: Path, *, sync: bool = False) -> None:
        self._path = path
        self._sync = sync
        self._counts: dict[int, tuple[int, float | None]] = {}
        self._records = 0
        self._file: IO[bytes] | None = None
        self._replay()

    def __len__(self) -> int:
        return len(self._counts)

    @property
    def records(self) -> int:
        """Records in the log (live entries, replaced ones and tombstones)."""
        return self._records

    def get(self, key: int) -> tuple[int, float | None] | None:
        """(access count, last access) of the point with :func:`rank_key` ``key``, if written."""
        return self._counts.get(key)

    def overlay(self, key: int, payload: dict[str, Any]) -> dict[str, Any]:
        """``payload`` (a point's, as read from the engine) with this ledger's counters, in place."""
        entry = self._counts.get(key)
        if entry is not None:
            payload["access_count"], payload["last_accessed_at"] = entry
        return payload

    def set(self, counters: Mapping[int, tuple[int, float]]) -> None:
        """Record the counters' new values (in memory once they are in the log)."""
        if not counters:
            return
        self._write((k, n, at) for k, (n, at) in counters.items())
        self._counts.update(counters)
        self._maybe_rewrite()

    def forget(self, keys: Iterable[int]) -> None:
        """Drop the entries of these points (upserted with their counters, or deleted)."""
        gone = [k for k in keys if k in self._counts]
        if gone:
            self._write((k, -1, math.nan) for k in gone)
            for k in gone:
                del self._counts[k]
            self._maybe_rewrite()

    def entries(self) -> dict[int, tuple[int, float | None]]:
        """Every entry (a copy)."""
        return dict(self._counts)

    def clear(self) -> None:
        """Drop every entry (their counters were written into the engine: ``EdgeStore.compact``)."""
        self._counts.clear()
        self._rewrite()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    # -- internals ----------------------------------------------------------------------------

    def _replay(self) -> None:
        try:
            data = self._path.read_bytes()
        except FileNotFoundError:
            data = b""
        whole = len(data) - len(data) % _RECORD.size
        for raw, n, at in _RECORD.iter_unpack(data[:whole]):
            key = int.from_bytes(raw, "big")
            if n < 0:
                self._counts.pop(key, None)
            else:
                self._counts[key] = (n, None if math.isnan(at) else at)
        self._records = whole // _RECORD.size
        if whole != len(data):  # a torn last record: later appends must stay aligned
            with open(self._path, "r+b") as f:
                f.truncate(whole)
        if self._records > 2 * len(self._counts) and self._records > _COMPACT_MIN // 4:
            try:
                self._rewrite()
            except OSError as exc:  # e.g. a full volume: the log as it is stays valid
                log.warning("could not rewrite the access log %s at open: %s", self._path, exc)

    def _open(self) -> IO[bytes]:
        if self._file is None:
            self._file = open(self._path, "ab")  # noqa: SIM115 - kept open between appends
        return self._file

    def _write(self, rows: Iterable[tuple[int, int, float | None]]) -> None:
        """Append records (to the OS at once; fsynced with ``sync``)."""
        chunk = b"".join(
            _RECORD.pack(k.to_bytes(16, "big"), n, math.nan if at is None else at) for k, n, at in rows
        )
        f = self._open()
        f.write(chunk)
        f.flush()
        if self._sync:
            os.fsync(f.fileno())
        self._records += len(chunk) // _RECORD.size

    def _maybe_rewrite(self) -> None:
        if self._records > _COMPACT_MIN and self._records > 2 * len(self._counts):
            self._rewrite()

    def _rewrite(self) -> None:
        """The log anew from the live entries (a temporary file renamed over it)."""
        self.close()
        tmp = self._path.with_name(f".{self._path.name}.{uuid.uuid4().hex}")
        try:
            with open(tmp, "wb") as f:
                f.write(
                    b"".join(
                        _RECORD.pack(k.to_bytes(16, "big"), n, math.nan if at is None else at)
                        for k, (n, at) in self._counts.items()
                    )
                )
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._path)
        except OSError:  # (ENOSPC): the old log stays, whole
            tmp.unlink(missing_ok=True)
            raise
        dir_fd = os.open(self._path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self._records = len(self._counts)
