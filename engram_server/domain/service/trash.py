"""The trash: list what was deleted, restore it, purge it.

``DeleteMemory`` sets ``trashed_at`` on a memory and its history versions (``Editing``); every
storage filter but the trash's own leaves them out, so they are never searched, listed or matched
by the write gate. They stay restorable for ``Policy.trash_retention_seconds``; then the sweeper
purges them (``Collections.sweep``), as it does a memory whose ``valid_until`` passed in the trash.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from engram_server.domain.errors import CollectionNotFound, MemoryNotFound
from engram_server.domain.model import MemoryRecord, StoreFilter
from engram_server.domain.service.commands import Similar
from engram_server.domain.service.editing import Editing, _decode_token, _encode_token, _is_uuid
from engram_server.domain.validation import Violations


class Trash(Editing):
    """ListTrash, RestoreMemory and PurgeTrash (of memories; collections: ``Collections``)."""

    async def _trash_collection(self, collection: str) -> str | None:
        """The resolved collection name, or None for the default collection before its first write."""
        v = Violations()
        name = await self._resolve_held(v, "collection", collection)
        v.raise_if_any()
        if await self._existing(name) is None:
            if collection and collection != self.policy.default_collection:
                raise CollectionNotFound(f"collection {name!r} does not exist", metadata={"collection": name})
            return None
        return name

    async def list_trash(
        self, collection: str, page_size: int, page_token: str
    ) -> tuple[list[MemoryRecord], str]:
        v = Violations()
        name = await self._resolve_held(v, "collection", collection)
        size = page_size or 100
        if not 1 <= size <= self.policy.limits.max_page_size:
            v.add("page_size", f"must be between 1 and {self.policy.limits.max_page_size}")
        offset: str | None = None
        if page_token:
            offset = _decode_token(page_token, name)
            if offset is None:
                v.add("page_token", "not a page token of this collection")
        v.raise_if_any()
        if await self._trash_collection(collection) is None:
            return [], ""
        flt = StoreFilter(only_trashed=True, include_drafts=True, live_at=self._clock.now())
        records, nxt = await self._store.scroll(name, flt, size, offset)
        return records, _encode_token(nxt, name) if nxt is not None else ""

    async def _trashed(self, collection: str, memory_id: str) -> MemoryRecord:
        found = await self._store.retrieve(collection, [memory_id])
        record = found[0].record if found else None
        if record is None or record.trashed_at is None or record.expired(self._clock.now()):
            raise MemoryNotFound(
                f"memory {memory_id} is not in the trash of collection {collection!r}",
                metadata={"id": memory_id, "collection": collection},
            )
        return record

    async def _trashed_history(self, collection: str, memory_id: str) -> list[str]:
        ids: list[str] = []
        offset: str | None = None
        while True:
            page, offset = await self._store.scroll(
                collection, StoreFilter(only_history_of=memory_id, only_trashed=True), 256, offset
            )
            ids.extend(r.id for r in page)
            if offset is None:
                return ids

    async def restore(self, collection: str, memory_id: str) -> tuple[MemoryRecord, list[Similar]]:
        """Take a memory (and its history) out of the trash, as it was; the live memories now
        in its near-duplicate zone or above (written while it was in the trash) are returned."""
        v = Violations()
        name = await self._resolve_held(v, "collection", collection)
        if not memory_id:
            v.add("id", "must not be empty")
        elif not _is_uuid(memory_id):
            v.add("id", "must be a memory id (UUID)")
        v.raise_if_any()
        if await self._trash_collection(collection) is None:
            raise MemoryNotFound(
                f"memory {memory_id} is not in the trash of collection {name!r}",
                metadata={"id": memory_id, "collection": name},
            )
        async with self._lock(name):
            record = await self._trashed(name, memory_id)
            ids = [record.id]
            if record.superseded_by is None:
                ids.extend(await self._trashed_history(name, record.id))
            await self._store.set_fields(name, {i: {"trashed_at": None} for i in ids})
            restored = replace(record, trashed_at=None)
            near = await self._near(name, restored)
        return restored, near

    async def _near(self, collection: str, record: MemoryRecord) -> list[Similar]:
        if record.superseded_by is not None or record.draft:
            return []
        stored = await self._store.retrieve(collection, [record.id], with_vectors=True)
        if not stored or stored[0].vector is None:
            return []
        pol = self.policy
        hits = await self._query(
            collection, stored[0].vector, pol.gate_candidates + 1, StoreFilter(live_at=self._clock.now())
        )
        near = [
            Similar(h.record, sim)
            for h in hits
            if h.record.id != record.id
            and (sim := self._cal.similarity(h.score)) >= pol.near_duplicate_threshold
        ]
        near.sort(key=lambda s: -s.similarity)
        return near[: pol.max_near_duplicates]

    async def purge(self, collection: str, ids: Sequence[str]) -> int:
        """Delete for good what is in the collection's trash (only ``ids`` and their history, when
        given): how many stored points went."""
        v = Violations()
        name = await self._resolve_held(v, "collection", collection)
        for i, memory_id in enumerate(ids):
            if not _is_uuid(memory_id):
                v.add(f"ids[{i}]", "must be a memory id (UUID)")
        v.raise_if_any()
        if await self._trash_collection(collection) is None:
            return 0
        async with self._lock(name):
            if not ids:
                return await self._store.delete_where(
                    name, StoreFilter(only_trashed=True, include_history=True, include_drafts=True)
                )
            found = [p.record for p in await self._store.retrieve(name, list(dict.fromkeys(ids)))]
            missing = set(ids) - {r.id for r in found if r.trashed_at is not None}
            if missing:
                first = sorted(missing)[0]
                raise MemoryNotFound(
                    f"memory {first} is not in the trash of collection {name!r}",
                    metadata={"id": first, "collection": name},
                )
            gone = [r.id for r in found]
            for r in found:
                if r.superseded_by is None:
                    gone.extend(await self._trashed_history(name, r.id))
            await self._store.delete(name, gone)
            return len(gone)
