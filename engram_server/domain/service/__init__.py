"""The use-cases: add (with the write gate), search (fusion ranking), update (versioned),
delete (protected, to the trash), get, list, the trash, collections, and the sweep.

Pure orchestration over the ports: no gRPC, no storage engine, no model library.

One class, :class:`MemoryService`, composed from one mixin per use case so that a reader finds
each path in one file:

- :mod:`.commands`: the policy, commands and results (plain data);
- :mod:`.core`: shared state and helpers (collection specs, locks, embed, upsert, background tasks);
- :mod:`.writing`: add / add-many and the write gate;
- :mod:`.searching`: search, candidates, ranking assembly, record cache and access counts;
- :mod:`.editing`: locate, update, delete, get, history, list and page tokens;
- :mod:`.trash`: list, restore and purge the trash;
- :mod:`.collections`: list / delete / restore collections and the sweep (expiry, trash purge);
- :mod:`.context`: the session context pack, triggers and slots.
"""

from __future__ import annotations

from engram_server.domain.service.collections import Collections
from engram_server.domain.service.commands import (
    MAX_LISTED_VIOLATIONS,
    MAX_PROVENANCE_HISTORY,
    AddCommand,
    AddOutcome,
    AddResult,
    CollectionStats,
    DeleteCommand,
    DeleteResult,
    GateReason,
    Locator,
    Policy,
    SearchFilter,
    SearchHit,
    SearchQuery,
    Similar,
    UpdateCommand,
    UpdateResult,
    _AddItem,
    _Pool,
    _Ranked,
)
from engram_server.domain.service.context import (
    ContextPack,
    ContextPacks,
    ContextRequest,
    SlotState,
    SlotUpdate,
    TriggerResult,
)
from engram_server.domain.service.core import ServiceCore, TopicSource, stored_point
from engram_server.domain.service.searching import _Query
from engram_server.domain.service.trash import Trash
from engram_server.domain.service.writing import Writing, normalise_text, with_provenance

__all__ = [
    "MAX_LISTED_VIOLATIONS",
    "MAX_PROVENANCE_HISTORY",
    "AddCommand",
    "AddOutcome",
    "AddResult",
    "CollectionStats",
    "ContextPack",
    "ContextRequest",
    "DeleteCommand",
    "DeleteResult",
    "GateReason",
    "Locator",
    "MemoryService",
    "Policy",
    "SearchFilter",
    "SearchHit",
    "SearchQuery",
    "ServiceCore",
    "Similar",
    "SlotState",
    "SlotUpdate",
    "TopicSource",
    "TriggerResult",
    "UpdateCommand",
    "UpdateResult",
    "_AddItem",
    "_Pool",
    "_Query",
    "_Ranked",
    "normalise_text",
    "stored_point",
    "with_provenance",
]


class MemoryService(Writing, ContextPacks, Trash, Collections):
    """Engram's memory lifecycle over a Store and an Embedder."""
