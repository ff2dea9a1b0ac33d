"""Collections (list, delete to the trash, restore) and the sweep (the TTL's hard delete and the
trash's purge)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from opentelemetry import metrics

from engram_server.domain.errors import (
    CollectionNotFound,
    StorageFull,
)
from engram_server.domain.model import (
    CollectionSpec,
    StoreFilter,
)
from engram_server.domain.service.commands import CollectionStats
from engram_server.domain.service.core import ServiceCore
from engram_server.domain.validation import (
    Violations,
    check_collection,
    valid_collection_name,
)

log = logging.getLogger(__name__)

_meter = metrics.get_meter("engram_server.domain")
_swept = _meter.create_counter(
    "engram.sweeper.deleted",
    unit="{memory}",
    description="Expired memories (and expired history versions) hard-deleted by the sweeper.",
)
_purged = _meter.create_counter(
    "engram.sweeper.purged",
    unit="{memory}",
    description="Memories (and history versions) purged from the trash by the sweeper once the "
    "trash retention passed, including those of purged collections.",
)


class Collections(ServiceCore):
    """List, delete (to the trash) and restore collections; the sweep."""

    async def _stats(self, specs: list[CollectionSpec]) -> list[CollectionStats]:
        now = self._clock.now()
        counts = await asyncio.gather(*(self._store.count(s.name, StoreFilter(live_at=now)) for s in specs))
        return [
            CollectionStats(s, c) for s, c in sorted(zip(specs, counts, strict=True), key=lambda x: x[0].name)
        ]

    async def list_collections(self) -> list[CollectionStats]:
        """The live collections (not those in the trash)."""
        return await self._stats([s for s in await self._store.list_collections() if s.trashed_at is None])

    async def list_trashed_collections(self) -> list[CollectionStats]:
        """The collections in the trash (``spec.trashed_at`` set)."""
        return await self._stats(
            [s for s in await self._store.list_collections() if s.trashed_at is not None]
        )

    def _check_name(
        self, v: Violations, name: str, stored: CollectionSpec | None, fieldname: str = "name"
    ) -> None:
        if not name:
            v.add(fieldname, "must not be empty")
        elif not valid_collection_name(name) and stored is None:
            # A name the rules refuse today but an older release accepted (``"bob\n"``) can still
            # be deleted, restored and purged while it exists; anything else is refused as invalid.
            check_collection(v, fieldname, name)

    async def delete_collection(self, name: str) -> tuple[int, float | None]:
        """Move the collection to the trash (or drop it when the trash is off): the number of
        memories it held (including history versions), and when it will be purged (None: now)."""
        v = Violations()
        self._check_name(v, name, await self._store.get_collection(name) if name else None)
        v.raise_if_any()
        async with self._lock(name):
            spec = await self._store.get_collection(name)
            if spec is None:
                raise CollectionNotFound(f"collection {name!r} does not exist", metadata={"collection": name})
            if spec.trashed_at is not None:
                raise self._in_trash(spec)
            if self.policy.trash_retention_seconds <= 0:
                return await self._drop_for_good(name), None
            now = self._clock.now()
            count = await self._store.count(name, StoreFilter(include_history=True, include_drafts=True))
            trashed = replace(spec, trashed_at=now)
            await self._store.update_collection(trashed)
            self._specs[name] = trashed
            return count, self.purge_at(now)

    async def restore_collection(self, name: str) -> CollectionStats:
        """Take a collection out of the trash."""
        v = Violations()
        self._check_name(v, name, await self._store.get_collection(name) if name else None)
        v.raise_if_any()
        async with self._lock(name):
            spec = await self._store.get_collection(name)
            if spec is None or spec.trashed_at is None:
                raise CollectionNotFound(
                    f"collection {name!r} is not in the trash", metadata={"collection": name}
                )
            restored = replace(spec, trashed_at=None)
            await self._store.update_collection(restored)
            self._specs[name] = restored
        self._check_spec(restored)
        return (await self._stats([restored]))[0]

    async def purge_collection(self, name: str) -> int:
        """Drop a collection that is in the trash, for good: how many memories it held."""
        v = Violations()
        self._check_name(v, name, await self._store.get_collection(name) if name else None, "collection")
        v.raise_if_any()
        async with self._lock(name):
            spec = await self._store.get_collection(name)
            if spec is None or spec.trashed_at is None:
                raise CollectionNotFound(
                    f"collection {name!r} is not in the trash", metadata={"collection": name}
                )
            return await self._drop_for_good(name)

    # ------------------------------------------------------------ sweep

    async def sweep(self) -> dict[str, int]:
        """Hard-delete every expired memory (and expired history), in the trash or not, purge what
        has been in the trash longer than the retention, and drop the collections that have."""
        now = self._clock.now()
        retention = self.policy.trash_retention_seconds
        out: dict[str, int] = {}
        for spec in await self._store.list_collections():
            if spec.trashed_at is not None:
                if spec.trashed_at + retention <= now:
                    async with self._lock(spec.name):
                        current = await self._store.get_collection(spec.name)
                        if current is None or current.trashed_at is None:
                            continue  # restored meanwhile
                        n = await self._drop_for_good(spec.name)
                    out[spec.name] = n
                    _purged.add(n, {"engram.collection": spec.name})
                continue
            async with self._lock(spec.name):
                try:
                    n = await self._store.delete_where(
                        spec.name, StoreFilter(expired_at=now, include_history=True, include_trashed=True)
                    )
                    purged = await self._store.delete_where(
                        spec.name,
                        StoreFilter(
                            trashed_before=now - retention, include_history=True, include_drafts=True
                        ),
                    )
                except StorageFull:  # (the store logged it): the next sweep tries again
                    break
            if n:
                _swept.add(n, {"engram.collection": spec.name})
            if purged:
                _purged.add(purged, {"engram.collection": spec.name})
            if n + purged:
                out[spec.name] = n + purged
        return out
