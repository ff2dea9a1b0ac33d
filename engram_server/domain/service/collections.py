"""Collections (list, delete) and the expiry sweep (the TTL's hard delete)."""

from __future__ import annotations

import asyncio

from opentelemetry import metrics

from engram_server.domain.errors import (
    CollectionNotFound,
    StorageFull,
)
from engram_server.domain.model import (
    StoreFilter,
)
from engram_server.domain.service.commands import CollectionStats
from engram_server.domain.service.core import ServiceCore
from engram_server.domain.validation import (
    Violations,
    check_collection,
    valid_collection_name,
)

_meter = metrics.get_meter("engram_server.domain")
_swept = _meter.create_counter(
    "engram.sweeper.deleted",
    unit="{memory}",
    description="Expired memories (and expired history versions) hard-deleted by the sweeper.",
)


class Collections(ServiceCore):
    """List and delete collections; the expiry sweep."""

    async def list_collections(self) -> list[CollectionStats]:
        now = self._clock.now()
        specs = await self._store.list_collections()
        counts = await asyncio.gather(*(self._store.count(s.name, StoreFilter(live_at=now)) for s in specs))
        return [
            CollectionStats(s, c) for s, c in sorted(zip(specs, counts, strict=True), key=lambda x: x[0].name)
        ]

    async def delete_collection(self, name: str) -> int:
        v = Violations()
        if not name:
            v.add("name", "must not be empty")
        elif not valid_collection_name(name) and await self._store.get_collection(name) is None:
            # A name the rules refuse today but an older release accepted (``"bob\n"``) can still
            # be deleted while it exists; anything else is refused as invalid.
            check_collection(v, "name", name)
        v.raise_if_any()
        async with self._lock(name):
            if await self._store.get_collection(name) is None:
                raise CollectionNotFound(f"collection {name!r} does not exist", metadata={"collection": name})
            count = await self._store.drop_collection(name)
            self._specs.pop(name, None)
            return count

    # ------------------------------------------------------------ sweep

    async def sweep(self) -> dict[str, int]:
        """Hard-delete every expired memory (and expired history) in every collection."""
        now = self._clock.now()
        out: dict[str, int] = {}
        for spec in await self._store.list_collections():
            async with self._lock(spec.name):
                try:
                    n = await self._store.delete_where(
                        spec.name, StoreFilter(expired_at=now, include_history=True)
                    )
                except StorageFull:  # (the store logged it): the next sweep tries again
                    break
            if n:
                out[spec.name] = n
                _swept.add(n, {"engram.collection": spec.name})
        return out
