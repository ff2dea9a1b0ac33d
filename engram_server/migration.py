"""Storage format migrations: ``engram migrate`` and the start-up check.

Every collection's spec records the storage format it was written with
(:data:`engram_server.domain.model.STORAGE_FORMAT`; see docs/operations/data-format.md). A
collection of an older format is migrated in place, one collection at a time, by
``Store.update_collection`` with the new format: the store first brings the layout up to date
(format 1 → 2: the ``trashed_at`` payload index; → 3: the session and trigger indexes), then
rewrites what older points lack (→ 3: the derived ``has_trigger`` of memories tagged
``trigger:<action>``), then records the new format, so an interrupted migration is simply run
again. A spec of a newer format than this release knows is refused when
the store opens (``spec_from_json``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from engram_server.domain.errors import StorageUnavailable
from engram_server.domain.model import STORAGE_FORMAT, StoreFilter, has_trigger_tag
from engram_server.ports import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Migrated:
    collection: str
    from_format: int
    to_format: int


async def outdated(store: Store) -> list[Migrated]:
    """The collections of an older storage format, and the migration each needs (nothing written)."""
    return [
        Migrated(spec.name, spec.format, STORAGE_FORMAT)
        for spec in await store.list_collections()
        if spec.format < STORAGE_FORMAT
    ]


async def migrate(store: Store) -> list[Migrated]:
    """Migrate every collection of an older storage format to this release's (an open store)."""
    done = await outdated(store)
    for m in done:
        spec = await store.get_collection(m.collection)
        assert spec is not None
        if m.from_format < 3:
            await _derive_trigger_flags(store, m.collection)
        await store.update_collection(replace(spec, format=STORAGE_FORMAT))
        log.info(
            "migrated collection %s from storage format %d to %d", m.collection, m.from_format, m.to_format
        )
    return done


async def _derive_trigger_flags(store: Store, collection: str) -> None:
    """Format 3: rewrite the tags of every stored point tagged ``trigger:<action>`` (history, drafts
    and the trash included), which writes their derived ``has_trigger`` (see ``encode_fields``)."""
    everything = StoreFilter(include_history=True, include_drafts=True, include_trashed=True)
    cursor: str | None = None
    while True:
        records, cursor = await store.scroll(collection, everything, 256, cursor)
        tagged = {r.id: {"tags": list(r.tags)} for r in records if has_trigger_tag(r.tags)}
        if tagged:
            await store.set_fields(collection, tagged)
        if cursor is None:
            return


async def check_or_migrate(store: Store, *, auto: bool) -> list[Migrated]:
    """At start-up: migrate older collections (``auto``), or refuse naming ``engram migrate``."""
    if auto:
        return await migrate(store)
    old = await outdated(store)
    if old:
        names = ", ".join(f"{m.collection} (format {m.from_format})" for m in old[:5])
        more = f" and {len(old) - 5} more" if len(old) > 5 else ""
        raise StorageUnavailable(
            f"{len(old)} collection(s) were written by an older Engram release: {names}{more}; this "
            f"release uses storage format {STORAGE_FORMAT}. Stop the server and run `engram migrate` "
            "(same ENGRAM_* settings), or set ENGRAM_AUTO_MIGRATE=true"
        )
    return []
