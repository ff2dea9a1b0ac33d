"""The session use cases: the context pack (GetContext), triggers (GetTriggers) and slots.

The pack gathers, for the collections the caller may read: the slots and the identity and
directive memories (core), the trigger names in use, the memories tagged ``pending`` (open items),
the best memories for the task if one is given (relevant, at most three per session), the memories
written or updated since the window's start (recent), and the topic index; then fits them in the
token budget (see :func:`engram_server.domain.context.pack`) and renders them as Markdown.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from engram_server.domain.context import (
    DEFAULT_RECENT_WINDOW_SECONDS,
    DEFAULT_TOKEN_BUDGET,
    MAX_SLOT_TEXT_CHARS,
    MAX_TOKEN_BUDGET,
    PENDING_TAG,
    RELEVANT_LIMIT,
    RELEVANT_MIN_RELEVANCE,
    RELEVANT_PER_SESSION,
    SLOT_NAMES,
    TITLES,
    TRIGGER_NAME_RULE,
    Item,
    Section,
    SectionKind,
    SinceSource,
    TopicEntry,
    by_importance,
    by_update,
    core_order,
    heading,
    normalise_trigger,
    pack,
    render,
    slot_state_key,
    slot_text,
    topic_text,
    trigger_lineage,
    trigger_names,
    truncate_oldest,
    valid_trigger,
)
from engram_server.domain.errors import CollectionNotFound, LlmInvalidOutput, LlmUnavailable
from engram_server.domain.model import TRIGGER_TAG_PREFIX, MemoryRecord, MemoryType, StoreFilter
from engram_server.domain.service.commands import SearchQuery
from engram_server.domain.service.searching import Searching
from engram_server.domain.validation import (
    Violations,
    check_collection,
    check_content,
    check_session_id,
    is_blank,
)
from engram_server.ports import Tokenizer

#: Most memories one section reads per collection (scanned, then ordered; the rest are not seen).
SCAN_LIMIT: Final = 1_000
#: The fewest tokens a rendered memory item takes ("- x _(event, importance 5)_" is 8).
MIN_ITEM_TOKENS: Final = 8
_PAGE: Final = 500


@dataclass(frozen=True, slots=True)
class ContextRequest:
    collections: tuple[str, ...] = ()
    query: str = ""
    token_budget: int | None = None
    since: float | None = None
    session_id: str = ""
    agent_id: str = ""
    readable: Callable[[str], bool] | None = None


@dataclass(frozen=True, slots=True)
class ContextPack:
    sections: tuple[Section, ...]
    markdown: str
    token_budget: int
    tokens_used: int
    tokenizer: str
    since: float | None
    since_source: SinceSource
    last_session_id: str
    topics: tuple[TopicEntry, ...]
    truncated: bool


@dataclass(frozen=True, slots=True)
class TriggerResult:
    action: str
    matched: tuple[str, ...]
    memories: tuple[MemoryRecord, ...]
    truncated: bool


@dataclass(frozen=True, slots=True)
class SlotState:
    collection: str
    name: str
    content: str
    capacity_tokens: int
    tokens: int
    updated_at: float | None
    compactions: int


@dataclass(frozen=True, slots=True)
class SlotUpdate:
    slot: SlotState
    #: "", "llm" or "truncation".
    compaction: str


SLOT_SYSTEM_PROMPT: Final = (
    "You compact an AI agent's memory note. Summarise the OLDER part you are given into as few "
    "words as possible, keeping every fact, name, number and instruction that is still useful. "
    'Answer with JSON: {"summary": "..."}.'
)
SLOT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"summary": {"type": "string"}},
    "required": ["summary"],
    "additionalProperties": False,
}


class ContextPacks(Searching):
    """GetContext, GetTriggers, ListSlots, UpdateSlot."""

    def _tok(self) -> Tokenizer:
        if self.tokenizer is None:
            raise RuntimeError("no tokenizer is configured: the context pack needs one")
        return self.tokenizer

    # ------------------------------------------------------------ the pack

    async def get_context(self, req: ContextRequest) -> ContextPack:
        pol = self.policy
        v = Violations()
        budget = DEFAULT_TOKEN_BUDGET if req.token_budget is None else req.token_budget
        if not 1 <= budget <= MAX_TOKEN_BUDGET:
            v.add(
                "token_budget",
                f"must be between 1 and {MAX_TOKEN_BUDGET} tokens (unset means {DEFAULT_TOKEN_BUDGET}), "
                f"got {budget}",
            )
        names = list(dict.fromkeys(req.collections))
        if len(names) > pol.limits.max_collections_per_search:
            v.add("collections", f"at most {pol.limits.max_collections_per_search} collections")
        for i, name in enumerate(names):
            check_collection(v, f"collections[{i}]", name)
        if len(req.query) > pol.limits.max_content_chars:
            v.add("query", f"at most {pol.limits.max_content_chars} characters")
        check_session_id(v, "session_id", req.session_id)
        check_session_id(v, "agent_id", req.agent_id)
        now = self._clock.now()
        if req.since is not None and req.since > now + pol.limits.future_skew_seconds:
            v.add("since", "must not be in the future")
        v.raise_if_any()
        tok = self._tok()

        specs = await self._search_specs(names, req.readable)
        cols = sorted(s.name for s in specs)

        last = await self.sessions.last_before(req.agent_id, req.session_id)
        if req.since is not None:
            since, source, last_id = req.since, SinceSource.REQUEST, ""
        elif last is not None:
            since, source, last_id = last.started_at, SinceSource.LAST_SESSION, last.session_id
        else:
            since, source, last_id = now - DEFAULT_RECENT_WINDOW_SECONDS, SinceSource.DEFAULT_WINDOW, ""
        query = req.query.strip() if not is_blank(req.query) else ""
        live = StoreFilter(live_at=now)
        # No section can show more items than this (an item takes at least ~8 tokens): the most
        # important (core, open items) or the newest (recent) this many are read.
        want = min(SCAN_LIMIT, max(20, budget // MIN_ITEM_TOKENS))
        reads = asyncio.gather(
            *(
                asyncio.gather(
                    self._store.top(
                        c,
                        replace(live, types=(MemoryType.IDENTITY, MemoryType.DIRECTIVE)),
                        want,
                        "importance",
                    ),
                    self._trigger_counts(c, now),
                    self._store.top(c, replace(live, tags_any=(PENDING_TAG,)), want, "importance"),
                    self._store.top(c, replace(live, updated_after=since), want, "updated_at"),
                    self._slots(c),
                )
                for c in cols
            )
        )

        async def relevant_hits() -> list[tuple[MemoryRecord, float]]:
            if not (query and cols):
                return []
            hits = await self.search(
                SearchQuery(
                    query=query,
                    collections=tuple(cols),
                    limit=RELEVANT_LIMIT,
                    max_per_session=RELEVANT_PER_SESSION,
                    min_relevance=RELEVANT_MIN_RELEVANCE,
                    readable=req.readable,
                    as_statement=False,  # a task says what is needed, it is no memory to store
                )
            )
            return [(h.memory, h.score.relevance) for h in hits]

        async def topic_entries() -> list[TopicEntry]:
            if self.topic_source is None or not cols:
                return []
            # Filled by the topic index (see TopicSource): largest first.
            return await self.topic_source.context_topics(cols)

        # The reads, the task's search, the topic index and the session ledger's note of this
        # session (it only matters to later packs) run together.
        per_col, relevant, topics, _ = await asyncio.gather(
            reads, relevant_hits(), topic_entries(), self.sessions.seen(req.agent_id, req.session_id, now)
        )

        multi = len(cols) > 1
        used: set[tuple[str, str]] = set()

        def fresh(r: MemoryRecord) -> bool:
            key = (r.collection, r.id)
            if key in used:
                return False
            used.add(key)
            return True

        core: list[Item] = []
        for c, (_, _, _, _, slots) in zip(cols, per_col, strict=True):
            for st in slots:
                if st.content.strip():
                    core.append(
                        Item(
                            slot_text(st.name, st.content, c if multi else None),
                            f"slot {st.name}",
                            slot=st.name,
                        )
                    )
        for r in sorted((r for p in per_col for r in p[0]), key=core_order):
            if fresh(r):
                core.append(Item("", f"{r.type.value}, importance {r.importance}", memory=r))

        counts: Counter[str] = Counter()
        for p in per_col:
            counts.update(p[1])
        triggers = [
            Item(
                f"- `{name}` ({n} {'memory' if n == 1 else 'memories'})",
                "trigger in use",
                trigger=name,
                count=n,
            )
            for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        ]

        open_items = [
            Item("", f"tagged {PENDING_TAG}, importance {r.importance}", memory=r)
            for r in sorted((r for p in per_col for r in p[2]), key=by_importance)
            if fresh(r)
        ]
        relevant_items = [
            Item("", f"relevance {rel:.2f} to the task", memory=r) for r, rel in relevant if fresh(r)
        ]
        why_recent = {
            SinceSource.REQUEST: "updated since the requested time",
            SinceSource.LAST_SESSION: f"updated since the last session ({last_id}) started",
            SinceSource.DEFAULT_WINDOW: "updated in the last 7 days",
        }[source]
        recent_items = [
            Item("", why_recent, memory=r, dated=True)
            for r in sorted((r for p in per_col for r in p[3]), key=by_update)
            if fresh(r)
        ]
        topic_items = [Item(topic_text(t, multi), "topic index", topic=t) for t in topics]

        sections = [
            Section(SectionKind.CORE, TITLES[SectionKind.CORE], core),
            Section(SectionKind.TRIGGERS, TITLES[SectionKind.TRIGGERS], triggers),
            Section(SectionKind.OPEN_ITEMS, TITLES[SectionKind.OPEN_ITEMS], open_items),
            Section(SectionKind.RELEVANT, TITLES[SectionKind.RELEVANT], relevant_items),
            Section(SectionKind.RECENT, TITLES[SectionKind.RECENT], recent_items),
            Section(SectionKind.TOPICS, TITLES[SectionKind.TOPICS], topic_items),
        ]
        headings = [heading(s, since=since) for s in sections]
        head_tokens = await tok.count(headings)
        # Items are rendered and counted as the packing reaches them (the candidates past the
        # budget never are).
        truncated = pack(sections, budget, head_tokens, has_query=bool(query), count=tok.count_now)
        markdown = render(sections, headings)
        # Exact without counting the Markdown again: see render().
        used_tokens = sum(s.tokens for s in sections)
        return ContextPack(
            sections=tuple(sections),
            markdown=markdown,
            token_budget=budget,
            tokens_used=used_tokens,
            tokenizer=tok.name,
            since=since,
            since_source=source,
            last_session_id=last_id,
            topics=tuple(topics),
            truncated=truncated,
        )

    async def _trigger_counts(self, collection: str, now: float) -> Counter[str]:
        """How many live memories of ``collection`` carry each trigger name. Kept while the
        store's generation holds and none of those memories expired (the counts show no record,
        so access counters do not matter)."""
        generation = self._store.generation(collection)
        hit = self._trigger_cache.get(collection)
        if hit is not None and generation is not None and hit[0] == generation and now < hit[1]:
            return hit[2]
        records = await self._scan(collection, StoreFilter(live_at=now, with_trigger=True))
        counts: Counter[str] = Counter()
        for r in records:
            counts.update(set(trigger_names(r.tags)))
        if generation is not None and self._store.generation(collection) == generation:
            until = min((r.valid_until for r in records), default=float("inf"))
            self._trigger_cache[collection] = (generation, until, counts)
        return counts

    async def _scan(self, collection: str, flt: StoreFilter) -> list[MemoryRecord]:
        """Up to :data:`SCAN_LIMIT` records matching ``flt`` (storage order; callers sort)."""
        out: list[MemoryRecord] = []
        offset: str | None = None
        while len(out) < SCAN_LIMIT:
            page, offset = await self._store.scroll(
                collection, flt, min(_PAGE, SCAN_LIMIT - len(out)), offset
            )
            out.extend(page)
            if offset is None:
                break
        return out

    # ------------------------------------------------------------ triggers

    async def get_triggers(
        self,
        action: str,
        collections: Sequence[str] = (),
        limit: int = 0,
        readable: Callable[[str], bool] | None = None,
    ) -> TriggerResult:
        pol = self.policy
        v = Violations()
        name = normalise_trigger(action)
        if not name:
            v.add("action", "must not be empty")
        elif not valid_trigger(name):
            v.add("action", f"{action!r}: {TRIGGER_NAME_RULE}")
        limit = limit or 20
        if not 1 <= limit <= pol.limits.max_search_limit:
            v.add("limit", f"must be between 1 and {pol.limits.max_search_limit} (got {limit})")
        names = list(dict.fromkeys(collections))
        if len(names) > pol.limits.max_collections_per_search:
            v.add("collections", f"at most {pol.limits.max_collections_per_search} collections")
        for i, c in enumerate(names):
            check_collection(v, f"collections[{i}]", c)
        v.raise_if_any()
        lineage = trigger_lineage(name)
        specs = await self._search_specs(names, readable)
        flt = StoreFilter(live_at=self._clock.now(), tags_any=tuple(TRIGGER_TAG_PREFIX + n for n in lineage))
        found = await asyncio.gather(*(self._scan(s.name, flt) for s in specs))
        ranked = sorted((r for rs in found for r in rs), key=lambda r: (*by_importance(r), r.collection))
        return TriggerResult(name, tuple(lineage), tuple(ranked[:limit]), len(ranked) > limit)

    # ------------------------------------------------------------ slots

    async def _slots(self, collection: str) -> list[SlotState]:
        doc = await self._store.get_state(slot_state_key(collection)) or {}
        stored = doc.get("slots") or {}
        tok = self._tok()
        contents = [str((stored.get(n) or {}).get("content") or "") for n in SLOT_NAMES]
        counts = await tok.count(contents)
        out = []
        for n, content, tokens in zip(SLOT_NAMES, contents, counts, strict=True):
            entry = stored.get(n) or {}
            at = entry.get("updated_at")
            out.append(
                SlotState(
                    collection,
                    n,
                    content,
                    self.slot_capacity_tokens,
                    tokens,
                    float(at) if isinstance(at, (int, float)) else None,
                    int(entry.get("compactions") or 0),
                )
            )
        return out

    async def list_slots(self, collection: str) -> list[SlotState]:
        v = Violations()
        name = self._resolve(v, "collection", collection)
        v.raise_if_any()
        if name != self.policy.default_collection and await self._existing(name) is None:
            raise CollectionNotFound(f"collection {name!r} does not exist", metadata={"collection": name})
        return await self._slots(name)

    async def update_slot(self, collection: str, slot: str, text: str, *, append: bool) -> SlotUpdate:
        v = Violations()
        name = self._resolve(v, "collection", collection)
        if slot not in SLOT_NAMES:
            v.add("name", f"unknown slot {slot[:64]!r}; slots are {', '.join(SLOT_NAMES)}")
        if append:
            check_content(
                v, "content", text, replace(self.policy.limits, max_content_chars=MAX_SLOT_TEXT_CHARS)
            )
        elif len(text) > MAX_SLOT_TEXT_CHARS:
            v.add("content", f"at most {MAX_SLOT_TEXT_CHARS} characters (got {len(text)})")
        v.raise_if_any()
        tok = self._tok()
        await self._ensure(name)
        async with self._lock(name):
            key = slot_state_key(name)
            doc = await self._store.get_state(key) or {}
            slots: dict[str, Any] = dict(doc.get("slots") or {})
            entry = dict(slots.get(slot) or {})
            current = str(entry.get("content") or "")
            content = f"{current}\n{text.strip()}" if append and current else text.strip()
            capacity = self.slot_capacity_tokens
            compaction = ""
            if (await tok.count([content]))[0] > capacity:
                content, compaction = await self._compact(content, capacity, tok)
                entry["compactions"] = int(entry.get("compactions") or 0) + 1
            now = self._clock.now()
            entry.update(content=content, updated_at=now)
            slots[slot] = entry
            await self._store.put_state(key, {"slots": slots})
        tokens = (await tok.count([content]))[0]
        return SlotUpdate(
            SlotState(name, slot, content, capacity, tokens, now, int(entry.get("compactions") or 0)),
            compaction,
        )

    async def _compact(self, content: str, capacity: int, tok: Tokenizer) -> tuple[str, str]:
        """Fit ``content`` in ``capacity`` tokens: the LLM summarises the older half of its lines
        (when one is configured and answers usably), else the oldest content is cut with a marker."""
        count = tok.count_now
        lines = content.splitlines()
        if self.llm is not None and len(lines) > 1:
            half = max(1, len(lines) // 2)
            older, newer = "\n".join(lines[:half]), "\n".join(lines[half:])
            try:
                result = await self.llm.complete_json(
                    system=SLOT_SYSTEM_PROMPT, user=older, schema=SLOT_SCHEMA, schema_name="slot_summary"
                )
                summary = result.data.get("summary")
                if isinstance(summary, str) and summary.strip():
                    merged = f"{' '.join(summary.split())}\n{newer}"
                    if count(merged) <= capacity:
                        return merged, "llm"
                    return truncate_oldest(merged, capacity, count), "llm"
            except (LlmUnavailable, LlmInvalidOutput):
                pass  # fall back to truncation
        return truncate_oldest(content, capacity, count), "truncation"
