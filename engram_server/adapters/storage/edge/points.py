"""Points: upsert, retrieve, scroll, count, delete (by id, by filter), payload fields, access
counters, and the small state store."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import qdrant_edge as qe

from engram_server.adapters.storage.edge.engine import (
    _SCROLL_BATCH,
    _edge_filter,
    _engine_key,
    _write_json_atomic,
)
from engram_server.adapters.storage.edge.indexes import EdgeIndexes
from engram_server.adapters.storage.payload import (
    ACCESS_FIELDS,
    LEXICAL_VECTOR,
    ORDERABLE,
    access_hits,
    access_update,
    as_vector,
    canonical_ids,
    canonical_offset,
    encode_updates,
    filter_plan,
    payload_cue,
    point_id,
    point_vectors,
    rank_fields,
    rank_key,
    record_from_payload,
    record_to_payload,
    validate_state_key,
)
from engram_server.domain.errors import StorageUnavailable
from engram_server.domain.model import (
    CollectionSpec,
    MemoryRecord,
    StoredPoint,
    StoreFilter,
)

_STATE_DIR = "state"
#: A deletion by filter of at most this many points deletes them by id and logs them (kept nearest
#: lists and cached records survive it); a larger one drops them all.
_LOGGED_DELETE_MAX = 4096

#: Payload fields whose update cannot change what ``candidates`` returns (no generation change).
_UNRANKED_FIELDS: frozenset[str] = frozenset({"access_count", "last_accessed_at"})


def _changed(ids: Sequence[str]) -> list[tuple[int, uuid.UUID]]:
    """(rank key, engine id) of canonical ids, for :meth:`NearestLists.changed`."""
    out = []
    for pid in ids:
        u = uuid.UUID(pid)
        out.append((u.int, u))
    return out


def _ids_where(shard: qe.EdgeShard, where: qe.Filter | None) -> list[uuid.UUID]:
    """Every point id matching ``where``, as the engine's id objects."""
    out: list[uuid.UUID] = []
    offset: Any = None
    while True:
        records, offset = shard.scroll(
            qe.ScrollRequest(
                offset=offset, limit=_SCROLL_BATCH, filter=where, with_payload=False, with_vector=False
            )
        )
        out.extend(r.id if isinstance(r.id, uuid.UUID) else uuid.UUID(str(r.id)) for r in records)
        if offset is None:
            return out


def _edge_vector(spec: CollectionSpec, p: StoredPoint, dense: list[float]) -> qe.Vector:
    if spec.lexical is None:
        return dense
    named: dict[str, qe.NamedVector] = {"": dense}
    if p.sparse:
        named[LEXICAL_VECTOR] = qe.SparseVector(list(p.sparse.indices), list(p.sparse.values))
    return named


class EdgePoints(EdgeIndexes):
    """Writing and reading points: upsert, retrieve, scroll, count, delete, fields, access
    counters and the state store."""

    # ------------------------------------------------------------------ points

    async def upsert(self, collection: str, points: Sequence[StoredPoint]) -> None:
        if not points:
            return

        def work() -> None:
            col = self._col(collection)
            self.disk.check()
            vectors = point_vectors(col.spec, points)
            ids = [point_id(p.record.id) for p in points]
            col.touch(ids)
            payloads = [record_to_payload(p.record) for p in points]
            ops = [
                qe.Point(pid, _edge_vector(col.spec, p, vec), payload)
                for pid, p, vec, payload in zip(ids, points, vectors, payloads, strict=True)
            ]
            written = False
            try:
                col.shard.update(qe.UpdateOperation.upsert_points(ops))
                written = True
            finally:  # (a failed update may have written some: forget rather than guess)
                for pid in ids:
                    col.ranks.pop(rank_key(pid), None)
                    col.cues.pop(rank_key(pid), None)
                col.wrote(len(ops))
                col.nearest.changed(_changed(ids), [p.vector for p in points] if written else None)
            for pid, payload in zip(ids, payloads, strict=True):
                col.ranks[rank_key(pid)] = rank_fields(pid, payload, collection)
                col.cues[rank_key(pid)] = payload_cue(payload)
            col.access.forget(rank_key(pid) for pid in ids)  # the counters are the payload's now
            self._durable(col.shard)
            self._settle(col)
            if self._background_hnsw:
                self._maybe_optimize(col)
            else:
                self._note_unindexed(col)

        await self._run(work)

    async def retrieve(
        self, collection: str, ids: Sequence[str], *, with_vectors: bool = False
    ) -> list[StoredPoint]:
        def work() -> list[StoredPoint]:
            col = self._col(collection)
            wanted = canonical_ids(ids)
            if not wanted:
                return []
            out: list[StoredPoint] = []
            for r in col.shard.retrieve(list(wanted), True, with_vectors):
                # (each attribute of an engine record read once: a read converts it anew, and the
                # id is a new ``uuid.UUID`` each time)
                pid = r.id
                vector = r.vector if with_vectors else None
                out.append(
                    StoredPoint(
                        record_from_payload(pid, collection, col.counters(pid, r.payload)),
                        as_vector(vector) if vector is not None else None,
                    )
                )
            return out

        return await self._read(work)

    async def scroll(
        self, collection: str, flt: StoreFilter, limit: int, offset: str | None = None
    ) -> tuple[list[MemoryRecord], str | None]:
        if limit <= 0:
            raise ValueError("scroll limit must be positive")

        def work() -> tuple[list[MemoryRecord], str | None]:
            col = self._col(collection)
            start = canonical_offset(offset)
            records, next_offset = col.shard.scroll(
                qe.ScrollRequest(
                    offset=start,
                    limit=limit,
                    filter=_edge_filter(filter_plan(flt)),
                    with_payload=True,
                    with_vector=False,
                )
            )
            out = [record_from_payload(r.id, collection, col.counters(r.id, r.payload)) for r in records]
            return out, None if next_offset is None else str(next_offset)

        return await self._run(work)

    async def top(self, collection: str, flt: StoreFilter, limit: int, order_by: str) -> list[MemoryRecord]:
        if limit <= 0:
            raise ValueError("top limit must be positive")
        if order_by not in ORDERABLE:
            raise ValueError(f"cannot order by {order_by!r}")

        def work() -> list[MemoryRecord]:
            col = self._col(collection)
            records, _ = col.shard.scroll(
                qe.ScrollRequest(
                    limit=limit,
                    filter=_edge_filter(filter_plan(flt)),
                    with_payload=True,
                    with_vector=False,
                    order_by=qe.OrderBy(order_by, qe.Direction.Desc),
                )
            )
            return [record_from_payload(r.id, collection, col.counters(r.id, r.payload)) for r in records]

        return await self._run(work)

    async def count(self, collection: str, flt: StoreFilter) -> int:
        def work() -> int:
            col = self._col(collection)
            return col.shard.count(qe.CountRequest(exact=True, filter=_edge_filter(filter_plan(flt))))

        return await self._run(work)

    async def delete(self, collection: str, ids: Sequence[str]) -> None:
        def work() -> None:
            col = self._col(collection)
            wanted = canonical_ids(ids)
            if wanted:
                self.disk.check(what="deletion")
                col.touch(wanted)
                for pid in wanted:
                    col.ranks.pop(rank_key(pid), None)
                    col.cues.pop(rank_key(pid), None)
                deleted = False
                try:
                    col.shard.update(qe.UpdateOperation.delete_points(list(wanted)))
                    deleted = True
                finally:
                    col.nearest.changed(_changed(wanted), gone=deleted)
                col.access.forget(rank_key(pid) for pid in wanted)
                self._durable(col.shard)

        await self._run(work)

    async def delete_where(self, collection: str, flt: StoreFilter) -> int:
        def work() -> int:
            # Atomic: nothing else runs on the io thread between the count and the delete.
            col = self._col(collection)
            edge_filter = _edge_filter(filter_plan(flt))
            n = col.shard.count(qe.CountRequest(exact=True, filter=edge_filter))
            if not n:
                return 0
            self.disk.check(what="deletion")
            if n <= _LOGGED_DELETE_MAX:
                # By id, so that the change logs name the points that went: kept nearest lists
                # and cached records survive (the sweeper deletes a few expired memories at a time).
                gone = _ids_where(col.shard, edge_filter)
                col.touch([str(u) for u in gone])
                for u in gone:
                    col.ranks.pop(u.int, None)
                    col.cues.pop(u.int, None)
                deleted = False
                try:
                    col.shard.update(qe.UpdateOperation.delete_points(list(gone)))
                    deleted = True
                finally:
                    col.nearest.changed([(u.int, u) for u in gone], gone=deleted)
                col.access.forget(u.int for u in gone)
                n = len(gone)
            else:
                col.touch(None)
                col.nearest.reset()  # (which points went is not known here)
                col.shard.update(
                    qe.UpdateOperation.delete_points_by_filter(edge_filter or qe.Filter(must=[]))
                )
            self._durable(col.shard)
            return n

        return await self._run(work)

    async def get_state(self, key: str) -> dict[str, Any] | None:
        validate_state_key(key)

        def work() -> dict[str, Any] | None:
            path = self._data_dir / _STATE_DIR / f"{key}.json"
            try:
                raw = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                return None
            try:
                data = json.loads(raw)
            except ValueError as exc:
                raise StorageUnavailable(f"corrupt state file {path}: {exc}") from exc
            if not isinstance(data, dict):
                raise StorageUnavailable(f"corrupt state file {path}: not an object")
            return data

        return await self._run(work)

    async def put_state(self, key: str, value: Mapping[str, Any]) -> None:
        validate_state_key(key)

        def work() -> None:
            self.disk.check()
            folder = self._data_dir / _STATE_DIR
            folder.mkdir(parents=True, exist_ok=True)
            _write_json_atomic(folder / f"{key}.json", value)

        await self._run(work)

    async def set_fields(self, collection: str, updates: Mapping[str, Mapping[str, Any]]) -> None:
        encoded = encode_updates(updates)

        def work() -> None:
            col = self._col(collection)
            if not encoded:
                return
            self.disk.check()
            if any(set(payload) - _UNRANKED_FIELDS for payload in encoded.values()):
                col.touch(encoded)
            for pid, payload in encoded.items():
                if not _UNRANKED_FIELDS.issuperset(payload):
                    col.ranks.pop(rank_key(pid), None)  # re-read from the engine when next a candidate
                if "content" in payload:
                    col.cues.pop(rank_key(pid), None)  # (likewise, when next rescored)
            wanted: list[int | uuid.UUID | str] = list(encoded)
            existing = {str(r.id) for r in col.shard.retrieve(wanted, False, False)}
            try:
                for pid, payload in encoded.items():
                    if pid in existing:  # missing ids are skipped, as in retrieve
                        col.shard.update(qe.UpdateOperation.set_payload([pid], payload))
            finally:  # (a moved point may leave an indexed segment)
                col.wrote(len(existing))
                # A field a user filter reads (e.g. the source type) may have changed: kept nearest
                # lists of filtered searches must look at these points again.
                col.nearest.changed(
                    _changed(
                        [pid for pid, payload in encoded.items() if not _UNRANKED_FIELDS.issuperset(payload)]
                    )
                )
            self._durable(col.shard)

        await self._run(work)

    async def add_access(
        self, collection: str, hits: Mapping[str, tuple[int, float]]
    ) -> dict[str, tuple[int, float]]:
        wanted = access_hits(hits)

        def work() -> dict[str, tuple[int, float]]:
            col = self._col(collection)
            if not wanted or not self.disk.room(what="access counters"):
                return {}  # below the headroom the counts of these hits are not kept
            counters: dict[str, tuple[int, float]] = {}
            # Counters are not ranking fields: neither the generation nor ``ranks`` change. They
            # go to the collection's access ledger, not to the engine (see ``access``).
            written: dict[int, tuple[int, float]] = {}
            # A point counted before (since its last upsert) has its counters in the ledger, and
            # its kept ranking fields tell it is current (any write of ``superseded_by`` drops
            # them): its new counters need no read from the engine. The others are read.
            ranks, ledger = col.ranks, col.access
            ids: list[int | uuid.UUID | str] = []
            for pid, (n, at) in wanted.items():
                key = rank_key(pid)
                entry, fields = ledger.get(key), ranks.get(key)
                if entry is None or fields is None or not fields[5]:  # (fields[5]: current)
                    ids.append(pid)
                    continue
                payload = access_update({"access_count": entry[0], "last_accessed_at": entry[1]}, n, at)
                if payload is not None:
                    counters[pid] = written[key] = (payload["access_count"], payload["last_accessed_at"])
            for r in col.shard.retrieve(ids, list(ACCESS_FIELDS), False) if ids else ():
                pid = str(r.id)
                payload = access_update(col.counters(r.id, r.payload), *wanted[pid])
                if payload is not None:
                    counters[pid] = written[_engine_key(r.id)] = (
                        payload["access_count"],
                        payload["last_accessed_at"],
                    )
            col.access.set(written)
            return counters

        return await self._run(work)
