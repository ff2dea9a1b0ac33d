"""The typed values the client takes and returns.

Enums are :class:`enum.StrEnum` whose values are the lowercase names used throughout the
documentation (``"identity"``, ``"user_input"``, …), so a plain string is accepted wherever an
enum is. Results are frozen dataclasses; timestamps are timezone-aware :class:`datetime.datetime`
values in UTC.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Literal

__all__ = [
    "AddOutcome",
    "AddResult",
    "CollectionInfo",
    "ConsolidatedCluster",
    "ConsolidationResult",
    "ContextItem",
    "ContextPack",
    "ContextSection",
    "ContextTopic",
    "Contradiction",
    "DeleteCollectionResult",
    "DeleteResult",
    "GetResult",
    "Memory",
    "MemoryFilter",
    "MemoryType",
    "MemoryTypeName",
    "NewMemory",
    "Page",
    "RankingWeights",
    "ReflectionGate",
    "ReflectionOutcome",
    "ReflectionResult",
    "ScoreBreakdown",
    "SearchResult",
    "SimilarMemory",
    "Slot",
    "SlotUpdate",
    "Source",
    "SourceName",
    "SourceType",
    "SourceTypeName",
    "SpecificConflict",
    "Triggers",
    "UpdateResult",
]


class MemoryType(StrEnum):
    """How a memory is forgotten: its recency decay and its default time to live."""

    #: Not set by the server, or a type this client version does not know.
    UNSPECIFIED = "unspecified"
    #: Who the user or agent is. Never decays, never expires; protected from deletion.
    IDENTITY = "identity"
    #: A standing instruction or preference. Never decays; protected from deletion.
    DIRECTIVE = "directive"
    #: A distilled, reusable conclusion (half-life ~144 days).
    INSIGHT = "insight"
    #: Something that happened (half-life ~2.9 days). The default.
    EVENT = "event"


class Source(StrEnum):
    """Who wrote a memory."""

    UNSPECIFIED = "unspecified"
    USER = "user"
    AGENT = "agent"
    SYSTEM = "system"


class SourceType(StrEnum):
    """Provenance of a memory's content, most trusted first."""

    UNSPECIFIED = "unspecified"
    USER_INPUT = "user_input"
    TOOL_OUTPUT = "tool_output"
    WEB_SEARCH = "web_search"
    DOCUMENT = "document"
    CALENDAR = "calendar"
    REFLECTION = "reflection"
    UNKNOWN = "unknown"


class AddOutcome(StrEnum):
    """What :meth:`EngramClient.add` did."""

    UNSPECIFIED = "unspecified"
    #: The memory was written.
    CREATED = "created"
    #: A near-copy already exists; nothing was written and the existing memory is returned.
    DUPLICATE = "duplicate"


class ReflectionOutcome(StrEnum):
    """What :meth:`EngramClient.run_reflection` did."""

    UNSPECIFIED = "unspecified"
    #: Insights (and/or drafts) were written and the sources marked reflected.
    COMPLETED = "completed"
    #: The LLM ran but produced nothing new; nothing was written.
    NO_INSIGHT = "no_insight"
    #: A gate refused the run; see ``throttled_by``, ``detail`` and ``next_run_after``.
    THROTTLED = "throttled"
    #: ``dry_run``: every gate passed and a run would use ``sources``.
    WOULD_RUN = "would_run"
    #: Only in :meth:`EngramClient.reflection_runs`: the LLM call or the writes failed.
    FAILED = "failed"


class ReflectionGate(StrEnum):
    """The gate that refused a reflection run."""

    UNSPECIFIED = "unspecified"
    MIN_INTERVAL = "min_interval"
    DAILY_CAP = "daily_cap"
    IMPORTANCE = "importance"
    TOO_FEW_MEMORIES = "too_few_memories"
    IN_PROGRESS = "in_progress"


MemoryTypeName = Literal["identity", "directive", "insight", "event"]
SourceName = Literal["user", "agent", "system"]
SourceTypeName = Literal[
    "user_input", "tool_output", "web_search", "document", "calendar", "reflection", "unknown"
]


@dataclass(frozen=True, slots=True)
class Memory:
    """One stored memory."""

    id: str
    collection: str
    type: MemoryType
    content: str
    source: Source
    source_type: SourceType
    source_type_history: tuple[SourceType, ...]
    importance: int
    tags: tuple[str, ...]
    metadata: Mapping[str, str] = field(hash=False)
    created_at: datetime
    updated_at: datetime
    #: When the memory expires and is hard-deleted (in the trash or not); ``None`` means never.
    valid_until: datetime | None
    version: int
    #: Set on history versions only: the id of the current memory that replaced this one.
    superseded_by: str | None
    access_count: int
    last_accessed_at: datetime | None
    reflected_at: datetime | None
    #: For reflection insights: the ids of the memories they were derived from.
    derived_from: tuple[str, ...] = ()
    #: A low-confidence reflection insight kept as a draft (never returned by search).
    draft: bool = False
    #: Set only for a memory in the trash (:meth:`EngramClient.list_trash`): when it was deleted.
    trashed_at: datetime | None = None
    #: Set only for a memory in the trash: when the server purges it for good.
    purge_at: datetime | None = None
    #: The agent session the memory was written in (``None`` when none was given).
    session_id: str | None = None
    #: The agent that wrote the memory (``None`` when none was given).
    agent_id: str | None = None


@dataclass(frozen=True, slots=True)
class SimilarMemory:
    """A memory found close to another one, with its calibrated similarity in [0, 1]."""

    id: str
    similarity: float
    content: str
    type: MemoryType
    #: Write gate only: ``"conflicting_specifics"`` when its numbers, dates, ids, names or negation
    #: differ from the new content (see ``conflicts``; above 0.92 this is why it was not taken as a
    #: duplicate), ``"allow_duplicate"`` when it is the duplicate written anyway; else empty.
    reason: str = ""
    #: For ``"conflicting_specifics"``: the specifics on which the two texts disagree.
    conflicts: tuple[SpecificConflict, ...] = ()


@dataclass(frozen=True, slots=True)
class SpecificConflict:
    """One kind of specific on which a new memory and a stored one disagree."""

    #: ``number``, ``date``, ``identifier``, ``name`` or ``negation``.
    kind: str
    #: Values only the stored memory has (normalised: "2,400" -> "2400", "九点半" -> "9:30").
    existing_values: tuple[str, ...]
    #: Values only the new content has.
    new_values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Contradiction:
    """A stored memory a new one contradicts (the same subject with another value)."""

    memory_id: str
    content: str
    type: MemoryType
    similarity: float
    #: ``"change_statement"``, ``"specifics"`` or ``"llm"``.
    basis: str
    specifics: tuple[SpecificConflict, ...]
    explanation: str
    #: True when the stored memory is now superseded by the new one.
    superseded: bool


@dataclass(frozen=True, slots=True)
class AddResult:
    """The answer of :meth:`EngramClient.add`."""

    #: The new memory (``CREATED``) or the existing near-copy (``DUPLICATE``).
    memory: Memory
    outcome: AddOutcome
    #: For ``DUPLICATE``: calibrated similarity between the new content and the existing memory.
    duplicate_similarity: float | None
    #: Memories in the near-duplicate zone (0.70–0.92), most similar first: consider
    #: :meth:`EngramClient.update` on one of them instead of adding.
    near_duplicates: tuple[SimilarMemory, ...]
    #: True when this is the server's replay of an earlier call with the same ``request_id``.
    replayed: bool
    #: The idempotency key the call was sent with (generated when not given).
    request_id: str
    #: :meth:`EngramClient.add_many` only: for a ``DUPLICATE`` of a memory created by an earlier
    #: item of the same call, that item's index; otherwise ``None``.
    duplicate_of_index: int | None = None
    #: For ``CREATED`` although a memory was above the duplicate threshold, why:
    #: ``"conflicting_specifics"`` (a different fact; the memory is in ``near_duplicates`` with
    #: its ``conflicts``) or ``"allow_duplicate"``; for ``DUPLICATE`` below 0.92, ``"same_words"``
    #: (the same content words and specifics as the memory: a reworded sentence) or
    #: ``"translation"`` (the memory is in the other script, Chinese / English, and the new content
    #: translates it word for word through the dictionary) or ``"same_meaning"`` (the same language,
    #: every differing word restated by a word of the same meaning: "likes" / "prefers") or
    #: ``"judged_same"`` (no rule decided; the server's optional LLM judge called it a restatement);
    #: empty otherwise.
    gate_reason: str = ""
    #: :meth:`EngramClient.add_many` only: True when ``memory`` carries only its id, type,
    #: importance, version and times (no content, tags or metadata), so that the server's answer
    #: fits in one message; :meth:`EngramClient.get` reads the whole memory.
    abridged: bool = False
    #: For ``CREATED``: the stored memories the new one contradicts (the same subject with another
    #: value), each with why and whether it is now superseded (history, never searched).
    conflicts: tuple[Contradiction, ...] = ()

    @property
    def created(self) -> bool:
        """True when the memory was written."""
        return self.outcome is AddOutcome.CREATED


@dataclass(frozen=True, slots=True)
class NewMemory:
    """One memory for :meth:`EngramClient.add_many`; the fields mean what the keyword arguments
    of :meth:`EngramClient.add` mean (``None`` means the server's default)."""

    content: str
    type: MemoryType | MemoryTypeName | None = None
    #: 1–10; default 5.
    importance: int | None = None
    tags: Sequence[str] = ()
    source: Source | SourceName | None = None
    source_type: SourceType | SourceTypeName | None = None
    metadata: Mapping[str, str] | None = field(default=None, hash=False)
    #: When it happened (timezone-aware); default now.
    created_at: datetime | None = None
    #: Explicit expiry (timezone-aware); default from type, importance and tags.
    valid_until: datetime | None = None
    #: Idempotency key; default a new UUID (reused if the call is retried).
    request_id: str | None = None
    #: Write even if the gate finds a duplicate (the result's ``gate_reason`` is "allow_duplicate").
    allow_duplicate: bool = False
    #: The agent session and the agent writing the memory (letters, digits and ``. _ : @ / + -``).
    session_id: str | None = None
    agent_id: str | None = None
    #: What to do with a stored memory this one contradicts: ``"supersede"``, ``"report"`` or
    #: ``"off"``; ``None``: the server's ENGRAM_CONTRADICTIONS.
    contradictions: str | None = None


@dataclass(frozen=True, slots=True)
class ScoreBreakdown:
    """Why a search result ranks where it does (the default, additive fusion):
    ``final = w_relevance·(relevance + lexical + episode + rescore) + w_recency·recency
    + w_importance·importance``; equal finals put the newer memory first."""

    final: float
    #: Calibrated similarity between query and memory, in [0, 1], on the write gate's scale (above
    #: 0.92 a near copy, 0.82–0.92 a restatement, 0.70–0.82 the same topic).
    relevance: float
    #: Type-specific decay since ``created_at``, in [0, 1].
    recency: float
    #: The memory's importance divided by 10.
    importance: float
    #: The embedding model's raw cosine similarity, before calibration.
    raw_similarity: float
    #: What lexical (BM25) evidence adds to ``relevance`` in the fusion (≥ 0).
    lexical: float = 0.0
    #: What episode context (neighbouring events) adds to ``relevance`` in the fusion (≥ 0).
    episode: float = 0.0
    #: What reading the memory's text adds in the fusion (may be negative): a lead label the query
    #: names (a speaker, ``"Name: …"``) adds, a share of question sentences subtracts.
    rescore: float = 0.0
    #: The cross-encoder's judgement (0..1) when the search reranked this result (an English
    #: query, among its best results); 0 when not applied. Reorders the head; not in ``final``'s
    #: fusion (the head's finals are handed out in the new order).
    rerank: float = 0.0


@dataclass(frozen=True, slots=True)
class SearchResult:
    """One ranked memory; ``memory.collection`` says where it was found."""

    memory: Memory
    score: ScoreBreakdown


class SearchResults(list[SearchResult]):
    """The answer of :meth:`EngramClient.search`: the results, best first (a list)."""

    #: True when the server left lower-ranked results out so that its answer fits in one message
    #: (memories near the size limits): the results here are the best ones, complete.
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class UpdateResult:
    """The answer of :meth:`EngramClient.update`."""

    #: The memory after the update (or as it would be, for a dry run).
    memory: Memory
    #: The version that was replaced, now kept as history (for a dry run: the current one).
    previous: Memory | None
    #: For a semantic locate: the calibrated similarity of the match.
    similarity: float | None
    #: False when the request changed nothing, so no version was written.
    changed: bool
    dry_run: bool


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """The answer of :meth:`EngramClient.delete`."""

    #: The memories deleted (or that would be, for a dry run), without their history versions.
    deleted: tuple[Memory, ...]
    dry_run: bool
    #: True when an attempt failed with UNAVAILABLE and the automatic retry then found the
    #: memory gone (``MEMORY_NOT_FOUND``): the lost attempt most likely deleted it (or someone
    #: else did). ``deleted`` is empty in that case. Never set when the first attempt answers.
    already_deleted: bool = False
    #: How many memories were deleted (or would be): ``len(deleted)`` unless ``truncated``.
    deleted_count: int | None = None
    #: True when ``deleted`` lists only those that fit in one answer; the deletion is complete.
    truncated: bool = False
    #: Until when :meth:`EngramClient.restore` can bring them back; ``None`` when the deletion is
    #: final (the server's trash is off) or for a dry run.
    purge_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class GetResult:
    """The answer of :meth:`EngramClient.get`."""

    memory: Memory
    #: Earlier versions, newest first (only when ``include_history`` was set).
    history: tuple[Memory, ...]
    #: True when the oldest versions were left out so that the answer fits in one message
    #: (``list_memories(include_history=True)`` lists every version).
    history_truncated: bool = False


@dataclass(frozen=True, slots=True)
class Page:
    """One page of :meth:`EngramClient.list_memories`."""

    memories: tuple[Memory, ...]
    #: Pass as ``page_token`` to get the next page; ``None`` on the last page.
    next_page_token: str | None


@dataclass(frozen=True, slots=True)
class Topic:
    """One node of a collection's topic index (:meth:`EngramClient.list_topics`)."""

    #: Stable id ("t" and 10 hex digits): survives restarts and re-clustering.
    id: str
    #: The LLM's name when one named it, else the most salient words joined by " · ".
    name: str
    #: ``"llm"`` or ``"terms"``.
    named_by: str
    #: Live memories in the topic (a parent: its sub-topics' together).
    size: int
    #: 2 for a parent (a group of sub-topics), 1 for a leaf (a group of memories).
    level: int
    #: The parent's id; empty for a top-level topic.
    parent_id: str
    #: Sub-topics, largest first (top-level parents in ``list_topics``).
    children: tuple[Topic, ...]
    #: The most salient words, most salient first.
    terms: tuple[str, ...]
    created_at: datetime | None
    #: The collection the topic belongs to.
    collection: str = ""


@dataclass(frozen=True, slots=True)
class TopicPage:
    """One page of :meth:`EngramClient.list_topics`."""

    topics: tuple[Topic, ...]
    #: Pass as ``page_token`` to get the next page; ``None`` on the last page.
    next_page_token: str | None
    #: Topics at the listed level in all pages.
    topic_count: int
    #: Memories the collection's topic index holds.
    memory_count: int


@dataclass(frozen=True, slots=True)
class TopicMemories:
    """:meth:`EngramClient.get_topic`: the topic and one page of its memories, most central first."""

    topic: Topic
    memories: tuple[Memory, ...]
    #: Pass as ``page_token`` to get the next page; ``None`` on the last page.
    next_page_token: str | None


@dataclass(frozen=True, slots=True)
class CollectionInfo:
    """One collection."""

    name: str
    memory_count: int
    embedding_model: str
    embedding_dimension: int
    created_at: datetime | None


@dataclass(frozen=True, slots=True)
class DeleteCollectionResult:
    """The answer of :meth:`EngramClient.delete_collection`."""

    #: Memories removed, history versions included.
    deleted_count: int
    deleted_at: datetime | None
    #: True when an attempt failed with UNAVAILABLE and the retry found the collection gone.
    already_deleted: bool = False
    #: Until when :meth:`EngramClient.restore_collection` can bring it back; ``None`` when final.
    purge_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class TrashedCollection:
    """A deleted collection still in the trash."""

    name: str
    memory_count: int
    trashed_at: datetime | None
    purge_at: datetime | None


@dataclass(frozen=True, slots=True)
class RestoreResult:
    """The answer of :meth:`EngramClient.restore`."""

    #: The memory, live again, as it was when deleted (same id, content, timestamps, TTL).
    memory: Memory
    #: Live memories in its near-duplicate zone or above, most similar first: near-copies written
    #: while it was in the trash (a restore does not go through the write gate).
    near_duplicates: tuple[SimilarMemory, ...] = ()


@dataclass(frozen=True, slots=True)
class MemoryFilter:
    """Restricts a search or a listing. Empty fields do not restrict; expired and superseded
    memories are always excluded."""

    types: Sequence[MemoryType | MemoryTypeName] = ()
    #: Memories carrying at least one of these tags.
    tags_any: Sequence[str] = ()
    #: Created at or after this time (timezone-aware).
    created_after: datetime | None = None
    #: Created strictly before this time (timezone-aware).
    created_before: datetime | None = None
    #: Importance at or above this (1–10); ``None`` means no minimum.
    min_importance: int | None = None
    source_types: Sequence[SourceType | SourceTypeName] = ()
    #: Memories written in one of these sessions.
    session_ids: Sequence[str] = ()
    #: Memories written by one of these agents.
    agent_ids: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class RankingWeights:
    """Overrides the server's fusion weights for one search (each ≥ 0). The defaults here are the
    server's defaults (relevance leads; recency and importance break near-ties)."""

    relevance: float = 1.0
    recency: float = 0.05
    importance: float = 0.02


@dataclass(frozen=True, slots=True)
class ReflectionResult:
    """The answer of :meth:`EngramClient.run_reflection`."""

    outcome: ReflectionOutcome
    #: For ``THROTTLED``: the gate that refused the run.
    throttled_by: ReflectionGate | None
    #: Human-readable explanation of the outcome.
    detail: str
    #: For a time gate: the earliest time the next run is allowed.
    next_run_after: datetime | None
    unreflected_importance: int
    unreflected_count: int
    #: The memories the run used (or would use) as sources.
    sources: tuple[Memory, ...]
    #: Insights stored in ``reflection_collection``.
    insights: tuple[Memory, ...]
    #: Low-confidence insights kept as drafts.
    drafts: tuple[Memory, ...]
    #: Proposed insights dropped as near-copies of existing ones.
    duplicates: tuple[SimilarMemory, ...]
    reflection_collection: str
    model: str


@dataclass(frozen=True, slots=True)
class GateDecision:
    """What the write gate did with one memory it was asked to store, from
    :meth:`EngramClient.gate_decisions`."""

    decided_at: datetime | None
    #: ``CREATED`` (possibly beside near-duplicates) or ``DUPLICATE`` (nothing written).
    outcome: AddOutcome
    #: The content the caller asked to store.
    content: str
    #: ``CREATED``: the new memory's id; ``DUPLICATE``: the existing memory's id.
    memory_id: str
    #: ``DUPLICATE``: calibrated similarity to the existing memory (0 otherwise).
    duplicate_similarity: float
    #: Memories in the near-duplicate zone at the time, most similar first.
    near_duplicates: tuple[SimilarMemory, ...]
    #: True when the call was an idempotent replay (same ``request_id``): no new decision.
    replayed: bool


@dataclass(frozen=True, slots=True)
class GateDecisions:
    """A collection's recent gate decisions, newest first."""

    decisions: tuple[GateDecision, ...]
    #: True when older decisions were left out to keep the answer within the message limit.
    truncated: bool


@dataclass(frozen=True, slots=True)
class ReflectionRun:
    """One reflection run that called the LLM, from :meth:`EngramClient.reflection_runs`."""

    started_at: datetime | None
    #: ``COMPLETED``, ``NO_INSIGHT`` or ``FAILED``.
    outcome: ReflectionOutcome
    #: What the run produced, or its error.
    detail: str
    #: True when the periodic schedule started it, False when ``run_reflection`` asked for it.
    scheduled: bool
    model: str
    source_ids: tuple[str, ...]
    #: Insights stored in the collection's reflection collection.
    insight_ids: tuple[str, ...]
    draft_ids: tuple[str, ...]
    #: Proposed insights dropped as near-copies of existing ones.
    duplicates: int


@dataclass(frozen=True, slots=True)
class ConversationMessage:
    """One turn of a conversation given to :meth:`EngramClient.extract`."""

    #: ``"user"``, ``"assistant"`` or another speaker's name.
    role: str
    content: str
    #: When it was said (memories taken from this turn get it as ``created_at``); None = now.
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ToolObservation:
    """What an agent's tool call did, for :meth:`EngramClient.extract`."""

    tool_name: str
    #: The tool's input as text (usually its JSON arguments).
    input: str = ""
    output: str = ""
    #: The error when the call failed; empty when it succeeded.
    error: str = ""


@dataclass(frozen=True, slots=True)
class ExtractedMemory:
    """One memory :meth:`EngramClient.extract` proposed, and what the write gate did with it."""

    content: str
    type: MemoryType
    importance: int
    tags: tuple[str, ...]
    created_at: datetime | None
    #: The gate's answer (``CREATED`` or ``DUPLICATE``); None for a dry run.
    result: AddResult | None


@dataclass(frozen=True, slots=True)
class ExtractionResult:
    """The answer of :meth:`EngramClient.extract`."""

    memories: tuple[ExtractedMemory, ...]
    #: ``"llm"``, ``"rules"``, or ``"none"`` (the input repeated one inside the dedup window).
    extractor: str
    #: Why the rules ran although the server has an LLM (its error); empty otherwise.
    fallback_reason: str
    #: True when the input repeated one extracted recently: nothing was extracted or written.
    deduplicated: bool
    #: What the privacy filter removed from the input, one kind per finding.
    redactions: tuple[str, ...]
    model: str
    dry_run: bool


@dataclass(frozen=True, slots=True)
class ContextTopic:
    """One topic of the topic index."""

    id: str
    name: str
    size: int
    #: The collection the topic belongs to (a pack can span collections).
    collection: str = ""


@dataclass(frozen=True, slots=True)
class ContextItem:
    """One entry of a context pack section: a memory, a slot, a trigger name or a topic."""

    #: The entry as rendered in the pack's Markdown.
    text: str
    #: Tokens it takes (the pack's ``tokenizer``).
    tokens: int
    #: Why it was chosen ("identity, importance 9", "slot persona", "relevance 0.86 to the task", …).
    reason: str
    memory: Memory | None = None
    #: For slots: the slot's name.
    slot: str = ""
    #: For trigger names: the name and how many memories carry it.
    trigger: str = ""
    count: int = 0
    topic: ContextTopic | None = None


@dataclass(frozen=True, slots=True)
class ContextSection:
    """One section of a context pack."""

    #: ``core``, ``triggers``, ``open_items``, ``relevant``, ``recent`` or ``topics``.
    kind: str
    title: str
    items: tuple[ContextItem, ...]
    #: Tokens the section takes in the Markdown (heading included; 0 when empty).
    tokens: int
    #: Candidates left out because the budget was spent.
    omitted: int


@dataclass(frozen=True, slots=True)
class ContextPack:
    """The answer of :meth:`EngramClient.get_context`: what an agent loads at session start."""

    #: Every section, in order: core, triggers, open_items, relevant, recent, topics.
    sections: tuple[ContextSection, ...]
    #: The pack as Markdown, ready to put into a prompt.
    markdown: str
    token_budget: int
    #: Tokens the Markdown takes (never more than ``token_budget``).
    tokens_used: int
    #: The tokenizer that counted them.
    tokenizer: str
    #: Start of the recent section's window.
    since: datetime | None
    #: ``request``, ``last_session`` or ``default_window`` (the last 7 days).
    since_source: str
    #: For ``last_session``: that session's id.
    last_session_id: str
    topics: tuple[ContextTopic, ...]
    #: True when some candidate did not fit in the budget.
    truncated: bool

    def section(self, kind: str) -> ContextSection:
        """The section of this kind (``core``, ``triggers``, ``open_items``, ``relevant``, …)."""
        for s in self.sections:
            if s.kind == kind:
                return s
        raise KeyError(kind)


@dataclass(frozen=True, slots=True)
class Triggers:
    """The answer of :meth:`EngramClient.get_triggers`."""

    #: The action's normalised name ("git push" -> "git-push").
    action: str
    #: The trigger names matched: the action and its parents, most specific first.
    matched: tuple[str, ...]
    #: The memories to recall, most important first, then the most recently updated.
    memories: tuple[Memory, ...]
    truncated: bool


@dataclass(frozen=True, slots=True)
class Slot:
    """A named, fixed-capacity note of a collection, always in the context pack's core."""

    name: str
    content: str
    capacity_tokens: int
    tokens: int
    updated_at: datetime | None
    compactions: int


@dataclass(frozen=True, slots=True)
class SlotUpdate:
    """The answer of :meth:`EngramClient.update_slot`."""

    slot: Slot
    #: ``""`` (it fit), ``"llm"`` (the LLM summarised the oldest content) or ``"truncation"``.
    compaction: str


@dataclass(frozen=True, slots=True)
class ConsolidatedCluster:
    """One consolidation merge: the insight and the ids of the memories it replaces."""

    insight: Memory
    source_ids: tuple[str, ...]
    #: ``"llm"`` or ``"rules"``.
    merged_by: str


@dataclass(frozen=True, slots=True)
class ConsolidationResult:
    """The answer of :meth:`EngramClient.run_consolidation`."""

    #: ``"completed"``, ``"nothing_to_merge"``, ``"throttled"`` or ``"would_run"``.
    outcome: str
    detail: str
    next_run_after: datetime | None
    clusters: tuple[ConsolidatedCluster, ...]
    candidates: int
    memories_before: int
    memories_after: int
