"""The topic index use-cases: ListTopics, GetTopic, and keeping each collection's index current.

The index (:mod:`engram_server.domain.topics`) lives in memory, one per collection, built on the
first read and then kept current *incrementally*: every read first applies the writes made since
the last one (the store's :meth:`~engram_server.ports.Store.changed_since` names the ids written;
when it cannot, the listing's ids and ``updated_at`` are compared), drops expired memories, and
fully re-clusters only when the writes since the last build reach half the index (ids are kept,
see the index's doc). What survives a restart is a state document per collection
(``topics.<collection>`` in the store's state: topic ids, centroids, LLM names, each leaf's member
ids), written when the topic ids change, at most every ``PERSIST_SECONDS`` otherwise, and at
shutdown. A start restores that index from the memories themselves: the store decides which
memories exist and their vectors, the snapshot only where each one sits, so the index cannot
disagree with the store after a crash, and after a clean stop it is the same index.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engram_server.domain.context import TopicEntry
from engram_server.domain.errors import (
    CollectionNotFound,
    EngramError,
    TopicNotFound,
)
from engram_server.domain.model import MemoryRecord, StoreFilter
from engram_server.domain.service.core import ServiceCore
from engram_server.domain.topics import (
    TopicIndex,
    TopicParams,
    TopicView,
    clean_topic_name,
    topic_state_key,
)
from engram_server.domain.validation import Violations
from engram_server.ports import Llm

log = logging.getLogger(__name__)

__all__ = ["TopicMembers", "TopicPage", "TopicService"]

_TOPIC_ID = re.compile(r"^t[0-9a-f]{10}$")
_READ_BATCH = 256
_NAME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string"}},
    "required": ["name"],
    "additionalProperties": False,
}
_NAME_SYSTEM = (
    'You name clusters of an AI agent\'s memories. Answer with a JSON object {"name": ...}: a '
    "short noun phrase of 2 to 6 words that says what the memories are about, in the language most "
    "of them are written in. No quotes, no trailing punctuation."
)
#: Topics named by the LLM per refresh (the rest keep their salient-terms name until the next).
_NAMES_PER_REFRESH = 8
#: After a naming call fails (LLM down, bad answer, timeout), no new attempt for this long.
NAMING_RETRY_SECONDS = 300.0
MAX_TOPIC_PAGE = 200
#: Most topics offered to a context pack (its budget usually keeps fewer).
CONTEXT_TOPICS = 20
MAX_MEMBER_PAGE = 1000
#: A changed index is persisted at most this often (seconds) on reads; at once when its topic ids
#: changed, and at shutdown (:meth:`TopicService.flush`). After a crash, the writes since the last
#: snapshot are re-applied in creation order (see ``TopicIndex.restore``).
PERSIST_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class TopicPage:
    """A page of topics with, for top-level ones, their sub-topics."""

    topics: list[tuple[TopicView, list[TopicView]]]
    next_page_token: str
    topic_count: int
    memory_count: int
    offset: int = 0
    #: The collection listed (resolved: the default collection's name when none was given).
    collection: str = ""


@dataclass(frozen=True, slots=True)
class TopicMembers:
    """A topic and one page of its memories (the page starts at ``offset`` of its member list)."""

    topic: TopicView
    children: list[TopicView]
    memories: list[MemoryRecord]
    next_page_token: str
    offset: int
    #: The topic's collection (resolved).
    collection: str = ""


@dataclass(slots=True)
class _State:
    index: TopicIndex
    generation: int | None
    #: The index revision and topic ids last persisted, and when (monotonic seconds).
    persisted_revision: int = -1
    persisted_ids: frozenset[str] = frozenset()
    persisted_at: float = float("-inf")


class TopicService:
    """Topic indexes over a service's collections (a sibling use case, like reflection)."""

    def __init__(self, core: ServiceCore, llm: Llm | None = None, params: TopicParams | None = None) -> None:
        self._core = core
        self._llm = llm
        self.params = params or TopicParams()
        self._states: dict[str, _State] = {}
        #: Per-collection locks, held only while in use (a weak map: nothing stays behind for a
        #: collection that was dropped).
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._naming: set[str] = set()
        self._persisting: set[str] = set()
        #: collection -> time before which naming is not tried again (after a failure).
        self._naming_retry_at: dict[str, float] = {}

    # ------------------------------------------------------------------ use cases

    async def list_topics(
        self, collection: str, parent_id: str, page_size: int, page_token: str
    ) -> TopicPage:
        v = Violations()
        name = self._core._resolve(v, "collection", collection)
        size = page_size or 50
        if not 1 <= size <= MAX_TOPIC_PAGE:
            v.add("page_size", f"must be between 1 and {MAX_TOPIC_PAGE} (0 means 50), got {page_size}")
        if parent_id and not _TOPIC_ID.match(parent_id):
            v.add("parent_id", "not a topic id (t followed by 10 hex digits)")
        start = _offset(v, page_token, name)
        v.raise_if_any()
        index = await self.index(name, must_exist=bool(collection) and collection != self._policy_default())
        if index is None:
            return TopicPage([], "", 0, 0, collection=name)
        if parent_id:
            parent = index.view(parent_id)
            if parent is None:
                raise _not_found(name, parent_id)
            views = [x for x in (index.view(c) for c in parent.children) if x is not None]
        else:
            views = index.roots()
        page = views[start : start + size]
        out = [(t, [x for x in (index.view(c) for c in t.children) if x is not None]) for t in page]
        nxt = _token(start + size, name) if start + size < len(views) else ""
        return TopicPage(out, nxt, len(views), len(index), start, collection=name)

    async def get_topic(
        self, collection: str, topic_id: str, page_size: int, page_token: str
    ) -> TopicMembers:
        v = Violations()
        name = self._core._resolve(v, "collection", collection)
        size = page_size or 20
        if not 1 <= size <= MAX_MEMBER_PAGE:
            v.add("page_size", f"must be between 1 and {MAX_MEMBER_PAGE} (0 means 20), got {page_size}")
        if not topic_id:
            v.add("id", "must not be empty")
        elif not _TOPIC_ID.match(topic_id):
            v.add("id", "not a topic id (t followed by 10 hex digits)")
        start = _offset(v, page_token, name + "/" + topic_id)
        v.raise_if_any()
        index = await self.index(name, must_exist=bool(collection) and collection != self._policy_default())
        view = index.view(topic_id) if index is not None else None
        if index is None or view is None:
            raise _not_found(name, topic_id)
        ids = index.members(topic_id)
        page_ids = ids[start : start + size]
        records = {r.id: r for r in (p.record for p in await self._core.store.retrieve(name, page_ids))}
        memories = [records[i] for i in page_ids if i in records]
        nxt = _token(start + size, name + "/" + topic_id) if start + size < len(ids) else ""
        children = [x for x in (index.view(c) for c in view.children) if x is not None]
        return TopicMembers(view, children, memories, nxt, start, collection=name)

    def topic_page_token(self, collection: str, offset: int) -> str:
        """The ListTopics page token that continues at ``offset``."""
        return _token(offset, collection or self._policy_default())

    def member_page_token(self, collection: str, topic_id: str, offset: int) -> str:
        """The GetTopic page token that continues at ``offset`` (the edge ends a page early when
        the whole page would not fit in one message)."""
        name = collection or self._policy_default()
        return _token(offset, name + "/" + topic_id)

    async def context_topics(self, collections: Sequence[str]) -> list[TopicEntry]:
        """The context pack's topics (:class:`~engram_server.domain.service.core.TopicSource`): the
        top-level topics of these collections, largest first (ties: by id), at most
        ``CONTEXT_TOPICS``; the pack keeps those its token budget allows."""
        out: list[TopicEntry] = []
        for name in collections:
            index = await self.index(name, must_exist=False)
            if index is not None:
                out.extend(TopicEntry(v.id, v.name, v.size, name) for v in index.roots()[:CONTEXT_TOPICS])
        out.sort(key=lambda t: (-t.size, t.collection, t.id))
        return out[:CONTEXT_TOPICS]

    # ------------------------------------------------------------------ maintenance

    async def index(self, collection: str, *, must_exist: bool) -> TopicIndex | None:
        """The collection's index, with every write made before this call applied."""
        spec = await self._core.existing_spec(collection)
        if spec is None:
            self._states.pop(collection, None)
            if must_exist:
                raise CollectionNotFound(
                    f"collection {collection!r} does not exist", metadata={"collection": collection}
                )
            return None
        lock = self._locks.setdefault(collection, asyncio.Lock())
        async with lock:
            state = self._states.get(collection)
            if state is None or state.index.dim != spec.dimension:
                state = await self._build(collection, spec.dimension)
                self._states[collection] = state
            else:
                await self._refresh(collection, state)
            if state.index.revision != state.persisted_revision:
                ids = frozenset(state.index.leaf_ids()) | frozenset(t.id for t in state.index.roots())
                due = time.monotonic() - state.persisted_at >= PERSIST_SECONDS
                if (ids != state.persisted_ids or due) and collection not in self._persisting:
                    self._persisting.add(collection)  # off the read's path
                    self._core._spawn(self._persist_soon(collection))
        if (
            self._llm is not None
            and collection not in self._naming
            and self._core.now() >= self._naming_retry_at.get(collection, 0.0)
            and state.index.stale_names()
        ):
            self._naming.add(collection)
            self._core._spawn(self._name_topics(collection))
        return state.index

    async def _build(self, collection: str, dimension: int) -> _State:
        store = self._core.store
        generation = store.generation(collection)
        snapshot = await store.get_state(_state_key(collection))
        now = self._core.now()
        items = []
        for batch in await self._live_records(collection, now):
            points = await store.retrieve(collection, [r.id for r in batch], with_vectors=True)
            for p in points:
                r = p.record
                if p.vector is not None and _indexable(r, now):
                    items.append((r.id, p.vector, r.content, r.valid_until, r.updated_at, r.created_at))
        index = TopicIndex(dimension, self.params)
        index.restore(items, snapshot, now=now)
        return _State(index, generation)

    async def _live_records(self, collection: str, now: float) -> list[list[MemoryRecord]]:
        out: list[list[MemoryRecord]] = []
        offset: str | None = None
        while True:
            page, offset = await self._core.store.scroll(
                collection, StoreFilter(live_at=now), _READ_BATCH, offset
            )
            if page:
                out.append(page)
            if offset is None:
                return out

    async def _refresh(self, collection: str, state: _State) -> None:
        store = self._core.store
        index = state.index
        now = self._core.now()
        generation = store.generation(collection)
        changed: frozenset[str] | None = None
        if generation is not None and state.generation is not None:
            if generation == state.generation:
                changed = frozenset()
            else:
                changed = store.changed_since(collection, state.generation)
        if changed is None:  # the store cannot say: compare the listing with the index
            seen: set[str] = set()
            stale: list[str] = []
            members = index.member_state()
            for page in await self._live_records(collection, now):
                for r in page:
                    if r.draft:
                        continue
                    seen.add(r.id)
                    m = members.get(r.id)
                    if m is None or m[4] != r.updated_at:
                        stale.append(r.id)
            for mid in [m for m in members if m not in seen]:
                index.remove(mid)
            changed = frozenset(stale)
        if changed:
            ids = sorted(changed)
            for i in range(0, len(ids), _READ_BATCH):
                chunk = ids[i : i + _READ_BATCH]
                points = {p.record.id: p for p in await store.retrieve(collection, chunk, with_vectors=True)}
                for mid in chunk:
                    p = points.get(mid)
                    if p is None or p.vector is None or not _indexable(p.record, now):
                        index.remove(mid)
                    else:
                        r = p.record
                        index.upsert(
                            mid,
                            p.vector,
                            r.content,
                            valid_until=r.valid_until,
                            updated_at=r.updated_at,
                            now=now,
                            created_at=r.created_at,
                        )
        for mid in index.expired(now):
            index.remove(mid)
        state.generation = generation

    async def flush(self) -> None:
        """Persist every index changed since its last snapshot, with the writes made so far
        applied (at shutdown: the next start restores exactly this index)."""
        for collection in list(self._states):
            lock = self._locks.setdefault(collection, asyncio.Lock())
            async with lock:
                state = self._states.get(collection)
                if state is None:
                    continue
                try:
                    await self._refresh(collection, state)
                except EngramError as exc:
                    log.warning("could not bring the topic index of %s up to date: %s", collection, exc)
                if state.index.revision != state.persisted_revision:
                    await self._persist(collection, state)

    async def _persist_soon(self, collection: str) -> None:
        try:
            async with self._locks.setdefault(collection, asyncio.Lock()):
                state = self._states.get(collection)
                if state is None or state.index.revision == state.persisted_revision:
                    return
                revision, ids, snapshot = self._snapshot(state.index)
            await self._put(collection, state, revision, ids, snapshot)
        finally:
            self._persisting.discard(collection)

    @staticmethod
    def _snapshot(index: TopicIndex) -> tuple[int, frozenset[str], dict[str, Any]]:
        ids = frozenset(index.leaf_ids()) | frozenset(t.id for t in index.roots())
        return index.revision, ids, index.snapshot()

    async def _put(
        self, collection: str, state: _State, revision: int, ids: frozenset[str], snapshot: dict[str, Any]
    ) -> None:
        if self._states.get(collection) is not state:  # dropped (collection deleted) meanwhile
            return
        try:
            await self._core.store.put_state(_state_key(collection), snapshot)
            state.persisted_revision, state.persisted_ids = revision, ids
            state.persisted_at = time.monotonic()
        except EngramError as exc:  # the index still answers; it is persisted again next time
            log.warning("could not persist the topic index of %s: %s", collection, exc)

    async def _persist(self, collection: str, state: _State) -> None:
        await self._put(collection, state, *self._snapshot(state.index))

    async def _name_topics(self, collection: str) -> None:
        """Ask the LLM to name the stale topics (best effort: failures keep the terms name)."""
        llm = self._llm
        try:
            state = self._states.get(collection)
            if llm is None or state is None:
                return
            for tid in state.index.stale_names()[:_NAMES_PER_REFRESH]:
                ids = state.index.members(tid)[:8] if state.index.has(tid) else []
                if not ids:
                    continue
                points = await self._core.store.retrieve(collection, ids)
                lines = "\n".join(f"- {p.record.content[:300]}" for p in points)
                try:
                    answer = await llm.complete_json(
                        system=_NAME_SYSTEM,
                        user=f"Memories of one topic:\n{lines}\n\nName the topic.",
                        schema=_NAME_SCHEMA,
                        schema_name="topic_name",
                    )
                except EngramError as exc:  # unavailable, timed out, or not the JSON asked for
                    log.warning("topic naming failed for %s/%s: %s", collection, tid, exc)
                    self._naming_retry_at[collection] = self._core.now() + NAMING_RETRY_SECONDS
                    break
                name = clean_topic_name(answer.data.get("name"))
                if name is None:  # nothing usable (e.g. only punctuation): ask again later
                    log.warning("the LLM gave no usable name for topic %s/%s", collection, tid)
                    self._naming_retry_at[collection] = self._core.now() + NAMING_RETRY_SECONDS
                    break
                state.index.rename(tid, name)
            await self._persist(collection, state)
        finally:
            self._naming.discard(collection)

    def _policy_default(self) -> str:
        return self._core.policy.default_collection

    def forget(self, collection: str) -> None:
        """Drop a collection's index (after it was deleted)."""
        self._states.pop(collection, None)
        self._naming_retry_at.pop(collection, None)


def _indexable(r: MemoryRecord, now: float) -> bool:
    return r.superseded_by is None and not r.draft and r.trashed_at is None and r.valid_until > now


def _state_key(collection: str) -> str:
    return topic_state_key(collection)


def _not_found(collection: str, topic_id: str) -> TopicNotFound:
    return TopicNotFound(
        f"no topic {topic_id!r} in collection {collection!r} (ids change only when a topic "
        "dissolves: list the topics again)",
        metadata={"collection": collection, "topic_id": topic_id},
    )


def _token(offset: int, scope: str) -> str:
    return base64.urlsafe_b64encode(f"{scope}\n{offset}".encode()).decode().rstrip("=")


def _offset(v: Violations, token: str, scope: str) -> int:
    if not token:
        return 0
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        got_scope, _, num = raw.rpartition("\n")
        if got_scope == scope and num.isdigit():
            return int(num)
    except (ValueError, UnicodeDecodeError):
        pass
    v.add("page_token", "not a page token of this listing")
    return 0
