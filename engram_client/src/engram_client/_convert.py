"""Conversion between the generated protobuf messages and the client's typed values."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from enum import StrEnum
from typing import TypeVar

from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from engram_client.models import (
    AddOutcome,
    AddResult,
    CollectionInfo,
    ConsolidatedCluster,
    ConsolidationResult,
    ContextItem,
    ContextPack,
    ContextSection,
    ContextTopic,
    Contradiction,
    DeleteCollectionResult,
    DeleteResult,
    ExtractedMemory,
    ExtractionResult,
    GateDecision,
    GateDecisions,
    GetResult,
    Memory,
    MemoryFilter,
    MemoryType,
    Page,
    RankingWeights,
    ReflectionGate,
    ReflectionOutcome,
    ReflectionResult,
    ReflectionRun,
    RestoreResult,
    ScoreBreakdown,
    SearchResult,
    SearchResults,
    SimilarMemory,
    Slot,
    SlotUpdate,
    Source,
    SourceType,
    SpecificConflict,
    Topic,
    TopicMemories,
    TopicPage,
    TrashedCollection,
    Triggers,
    UpdateResult,
)
from engram_client.proto.engram.v1 import memory_pb2, memory_service_pb2

_E = TypeVar("_E", bound=StrEnum)


def _enum_tables(enum: type[_E], prefix: str, names: dict[str, int]) -> tuple[dict[_E, int], dict[int, _E]]:
    to_proto: dict[_E, int] = {}
    from_proto: dict[int, _E] = {}
    for member in enum:
        number = names[f"{prefix}{member.name}"]
        to_proto[member] = number
        from_proto[number] = member
    return to_proto, from_proto


_TYPE_TO, _TYPE_FROM = _enum_tables(MemoryType, "MEMORY_TYPE_", dict(memory_pb2.MemoryType.items()))
_SOURCE_TO, _SOURCE_FROM = _enum_tables(Source, "SOURCE_", dict(memory_pb2.Source.items()))
_STYPE_TO, _STYPE_FROM = _enum_tables(SourceType, "SOURCE_TYPE_", dict(memory_pb2.SourceType.items()))
_OUTCOME_TO, _OUTCOME_FROM = _enum_tables(
    AddOutcome, "ADD_OUTCOME_", dict(memory_service_pb2.AddOutcome.items())
)
_REFLECTION_TO, _REFLECTION_FROM = _enum_tables(
    ReflectionOutcome, "REFLECTION_OUTCOME_", dict(memory_service_pb2.ReflectionOutcome.items())
)
_GATE_TO, _GATE_FROM = _enum_tables(
    ReflectionGate, "REFLECTION_GATE_", dict(memory_service_pb2.ReflectionGate.items())
)


def _parse(enum: type[_E], value: _E | str, what: str) -> _E:
    if isinstance(value, enum):
        return value
    try:
        return enum(str(value).lower())
    except ValueError:
        allowed = ", ".join(m.value for m in enum if m.name != "UNSPECIFIED")
        raise ValueError(f"{what} must be one of {allowed}; got {value!r}") from None


def memory_type_to_proto(value: MemoryType | str) -> memory_pb2.MemoryType.ValueType:
    return memory_pb2.MemoryType.ValueType(_TYPE_TO[_parse(MemoryType, value, "type")])


def source_to_proto(value: Source | str) -> memory_pb2.Source.ValueType:
    return memory_pb2.Source.ValueType(_SOURCE_TO[_parse(Source, value, "source")])


def source_type_to_proto(value: SourceType | str) -> memory_pb2.SourceType.ValueType:
    return memory_pb2.SourceType.ValueType(_STYPE_TO[_parse(SourceType, value, "source_type")])


def timestamp_to_proto(value: datetime, what: str) -> Timestamp:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be a timezone-aware datetime")
    ts = Timestamp()
    ts.FromDatetime(value)
    return ts


def _time(message: Message, name: str) -> datetime | None:
    if not message.HasField(name):
        return None
    ts: Timestamp = getattr(message, name)
    return ts.ToDatetime(tzinfo=UTC)


def _required_time(message: memory_pb2.Memory, name: str) -> datetime:
    return _time(message, name) or datetime.fromtimestamp(0, UTC)


def memory_from_proto(m: memory_pb2.Memory) -> Memory:
    return Memory(
        id=m.id,
        collection=m.collection,
        type=_TYPE_FROM.get(m.type, MemoryType.UNSPECIFIED),
        content=m.content,
        source=_SOURCE_FROM.get(m.source, Source.UNSPECIFIED),
        source_type=_STYPE_FROM.get(m.source_type, SourceType.UNSPECIFIED),
        source_type_history=tuple(_STYPE_FROM.get(s, SourceType.UNSPECIFIED) for s in m.source_type_history),
        importance=m.importance,
        tags=tuple(m.tags),
        metadata=dict(m.metadata),
        created_at=_required_time(m, "created_at"),
        updated_at=_required_time(m, "updated_at"),
        valid_until=_time(m, "valid_until"),
        version=m.version,
        superseded_by=m.superseded_by or None,
        access_count=m.access_count,
        last_accessed_at=_time(m, "last_accessed_at"),
        reflected_at=_time(m, "reflected_at"),
        derived_from=tuple(m.derived_from),
        draft=m.draft,
        trashed_at=_time(m, "trashed_at"),
        purge_at=_time(m, "purge_at"),
        session_id=m.session_id or None,
        agent_id=m.agent_id or None,
    )


def _memories(items: Iterable[memory_pb2.Memory]) -> tuple[Memory, ...]:
    return tuple(memory_from_proto(m) for m in items)


def filter_to_proto(f: MemoryFilter) -> memory_pb2.MemoryFilter:
    out = memory_pb2.MemoryFilter(
        types=[memory_type_to_proto(t) for t in f.types],
        tags_any=list(f.tags_any),
        min_importance=f.min_importance or 0,
        source_types=[source_type_to_proto(s) for s in f.source_types],
        session_ids=list(f.session_ids),
        agent_ids=list(f.agent_ids),
    )
    if f.created_after is not None:
        out.created_after.CopyFrom(timestamp_to_proto(f.created_after, "created_after"))
    if f.created_before is not None:
        out.created_before.CopyFrom(timestamp_to_proto(f.created_before, "created_before"))
    return out


def weights_to_proto(w: RankingWeights) -> memory_pb2.RankingWeights:
    return memory_pb2.RankingWeights(relevance=w.relevance, recency=w.recency, importance=w.importance)


def _similar(items: Iterable[memory_pb2.SimilarMemory]) -> tuple[SimilarMemory, ...]:
    return tuple(
        SimilarMemory(
            id=s.id,
            similarity=s.similarity,
            content=s.content,
            type=_TYPE_FROM.get(s.type, MemoryType.UNSPECIFIED),
            reason=s.reason,
            conflicts=tuple(
                SpecificConflict(c.kind, tuple(c.existing_values), tuple(c.new_values)) for c in s.conflicts
            ),
        )
        for s in items
    )


def add_result(
    resp: memory_service_pb2.AddMemoryResponse | memory_service_pb2.AddMemoryResult, request_id: str
) -> AddResult:
    """An AddMemory response, or one AddMemories result."""
    outcome = _OUTCOME_FROM.get(resp.outcome, AddOutcome.UNSPECIFIED)
    duplicate_of_index: int | None = None
    abridged = False
    if isinstance(resp, memory_service_pb2.AddMemoryResult):
        abridged = resp.abridged
        if resp.HasField("duplicate_of_index"):
            duplicate_of_index = resp.duplicate_of_index
    return AddResult(
        memory=memory_from_proto(resp.memory),
        outcome=outcome,
        duplicate_similarity=resp.duplicate_similarity if outcome is AddOutcome.DUPLICATE else None,
        near_duplicates=_similar(resp.near_duplicates),
        replayed=resp.replayed,
        request_id=request_id,
        duplicate_of_index=duplicate_of_index,
        gate_reason=resp.gate_reason,
        abridged=abridged,
        conflicts=tuple(
            Contradiction(
                memory_id=x.memory_id,
                content=x.content,
                type=_TYPE_FROM.get(x.type, MemoryType.UNSPECIFIED),
                similarity=x.similarity,
                basis=x.basis,
                specifics=tuple(
                    SpecificConflict(c.kind, tuple(c.existing_values), tuple(c.new_values))
                    for c in x.specifics
                ),
                explanation=x.explanation,
                superseded=x.superseded,
            )
            for x in resp.conflicts
        ),
    )


def add_results(resp: memory_service_pb2.AddMemoriesResponse, request_ids: list[str]) -> list[AddResult]:
    if len(resp.results) != len(request_ids):
        raise ValueError(f"the server answered {len(resp.results)} results for {len(request_ids)} memories")
    return [add_result(r, rid) for r, rid in zip(resp.results, request_ids, strict=True)]


def search_results(resp: memory_service_pb2.SearchMemoriesResponse) -> SearchResults:
    out = SearchResults(
        [
            SearchResult(
                memory=memory_from_proto(r.memory),
                score=ScoreBreakdown(
                    final=r.score.final,
                    relevance=r.score.relevance,
                    recency=r.score.recency,
                    importance=r.score.importance,
                    raw_similarity=r.score.raw_similarity,
                    lexical=r.score.lexical,
                    episode=r.score.episode,
                    rescore=r.score.rescore,
                    rerank=r.score.rerank,
                ),
            )
            for r in resp.results
        ]
    )
    out.truncated = resp.truncated
    return out


def update_result(resp: memory_service_pb2.UpdateMemoryResponse, semantic: bool) -> UpdateResult:
    return UpdateResult(
        memory=memory_from_proto(resp.memory),
        previous=memory_from_proto(resp.previous) if resp.HasField("previous") else None,
        similarity=resp.similarity if semantic else None,
        changed=resp.changed,
        dry_run=resp.dry_run,
    )


def delete_result(resp: memory_service_pb2.DeleteMemoryResponse) -> DeleteResult:
    return DeleteResult(
        deleted=_memories(resp.deleted),
        dry_run=resp.dry_run,
        deleted_count=resp.deleted_count if resp.deleted_count or resp.truncated else len(resp.deleted),
        truncated=resp.truncated,
        purge_at=_time(resp, "purge_at"),
    )


def get_result(resp: memory_service_pb2.GetMemoryResponse) -> GetResult:
    return GetResult(
        memory=memory_from_proto(resp.memory),
        history=_memories(resp.history),
        history_truncated=resp.history_truncated,
    )


def page(resp: memory_service_pb2.ListMemoriesResponse) -> Page:
    return Page(memories=_memories(resp.memories), next_page_token=resp.next_page_token or None)


def collections(resp: memory_service_pb2.ListCollectionsResponse) -> list[CollectionInfo]:
    return [
        CollectionInfo(
            name=c.name,
            memory_count=c.memory_count,
            embedding_model=c.embedding_model,
            embedding_dimension=c.embedding_dimension,
            created_at=_time(c, "created_at"),
        )
        for c in resp.collections
    ]


def delete_collection_result(resp: memory_service_pb2.DeleteCollectionResponse) -> DeleteCollectionResult:
    deleted_at = resp.deleted_at.ToDatetime(tzinfo=UTC) if resp.HasField("deleted_at") else None
    return DeleteCollectionResult(
        deleted_count=resp.deleted_count, deleted_at=deleted_at, purge_at=_time(resp, "purge_at")
    )


def trash_page(resp: memory_service_pb2.ListTrashResponse) -> Page:
    return Page(memories=_memories(resp.memories), next_page_token=resp.next_page_token or None)


def restore_result(resp: memory_service_pb2.RestoreMemoryResponse) -> RestoreResult:
    return RestoreResult(
        memory=memory_from_proto(resp.memory), near_duplicates=_similar(resp.near_duplicates)
    )


def trashed_collections(resp: memory_service_pb2.ListCollectionsResponse) -> list[TrashedCollection]:
    return [
        TrashedCollection(
            name=c.name,
            memory_count=c.memory_count,
            trashed_at=_time(c, "trashed_at"),
            purge_at=_time(c, "purge_at"),
        )
        for c in resp.trashed
    ]


def purged_count(resp: memory_service_pb2.PurgeTrashResponse) -> int:
    return int(resp.purged_count)


def restored_collection(resp: memory_service_pb2.RestoreCollectionResponse) -> CollectionInfo:
    c = resp.collection
    return CollectionInfo(
        name=c.name,
        memory_count=c.memory_count,
        embedding_model=c.embedding_model,
        embedding_dimension=c.embedding_dimension,
        created_at=_time(c, "created_at"),
    )


def reflection_result(resp: memory_service_pb2.RunReflectionResponse) -> ReflectionResult:
    gate = _GATE_FROM.get(resp.throttled_by, ReflectionGate.UNSPECIFIED)
    return ReflectionResult(
        outcome=_REFLECTION_FROM.get(resp.outcome, ReflectionOutcome.UNSPECIFIED),
        throttled_by=None if gate is ReflectionGate.UNSPECIFIED else gate,
        detail=resp.detail,
        next_run_after=_time(resp, "next_run_after"),
        unreflected_importance=resp.unreflected_importance,
        unreflected_count=resp.unreflected_count,
        sources=_memories(resp.sources),
        insights=_memories(resp.insights),
        drafts=_memories(resp.drafts),
        duplicates=_similar(resp.duplicates),
        reflection_collection=resp.reflection_collection,
        model=resp.model,
    )


def gate_decisions(resp: memory_service_pb2.ListGateDecisionsResponse) -> GateDecisions:
    return GateDecisions(
        decisions=tuple(
            GateDecision(
                decided_at=_time(d, "decided_at"),
                outcome=_OUTCOME_FROM.get(d.outcome, AddOutcome.UNSPECIFIED),
                content=d.content,
                memory_id=d.memory_id,
                duplicate_similarity=d.duplicate_similarity,
                near_duplicates=_similar(d.near_duplicates),
                replayed=d.replayed,
            )
            for d in resp.decisions
        ),
        truncated=resp.truncated,
    )


def reflection_runs(resp: memory_service_pb2.ListReflectionRunsResponse) -> list[ReflectionRun]:
    return [
        ReflectionRun(
            started_at=_time(r, "started_at"),
            outcome=_REFLECTION_FROM.get(r.outcome, ReflectionOutcome.UNSPECIFIED),
            detail=r.detail,
            scheduled=r.scheduled,
            model=r.model,
            source_ids=tuple(r.source_ids),
            insight_ids=tuple(r.insight_ids),
            draft_ids=tuple(r.draft_ids),
            duplicates=r.duplicates,
        )
        for r in resp.runs
    ]


_EXTRACTOR_NAMES = {
    memory_service_pb2.EXTRACTOR_LLM: "llm",
    memory_service_pb2.EXTRACTOR_RULES: "rules",
    memory_service_pb2.EXTRACTOR_NONE: "none",
}


def extraction_result(resp: memory_service_pb2.ExtractMemoriesResponse) -> ExtractionResult:
    return ExtractionResult(
        memories=tuple(
            ExtractedMemory(
                content=x.content,
                type=_TYPE_FROM.get(x.type, MemoryType.UNSPECIFIED),
                importance=x.importance,
                tags=tuple(x.tags),
                created_at=_time(x, "created_at"),
                result=add_result(x.result, "") if x.HasField("result") else None,
            )
            for x in resp.memories
        ),
        extractor=_EXTRACTOR_NAMES.get(resp.extractor, "unspecified"),
        fallback_reason=resp.fallback_reason,
        deduplicated=resp.deduplicated,
        redactions=tuple(resp.redactions),
        model=resp.model,
        dry_run=resp.dry_run,
    )


_SECTION_KIND = {
    memory_service_pb2.CONTEXT_SECTION_KIND_CORE: "core",
    memory_service_pb2.CONTEXT_SECTION_KIND_TRIGGERS: "triggers",
    memory_service_pb2.CONTEXT_SECTION_KIND_OPEN_ITEMS: "open_items",
    memory_service_pb2.CONTEXT_SECTION_KIND_RELEVANT: "relevant",
    memory_service_pb2.CONTEXT_SECTION_KIND_RECENT: "recent",
    memory_service_pb2.CONTEXT_SECTION_KIND_TOPICS: "topics",
}
_SINCE_SOURCE = {
    memory_service_pb2.SINCE_SOURCE_REQUEST: "request",
    memory_service_pb2.SINCE_SOURCE_LAST_SESSION: "last_session",
    memory_service_pb2.SINCE_SOURCE_DEFAULT_WINDOW: "default_window",
}
_COMPACTION = {
    memory_service_pb2.SLOT_COMPACTION_LLM: "llm",
    memory_service_pb2.SLOT_COMPACTION_TRUNCATION: "truncation",
}


def _topic(t: memory_service_pb2.ContextTopic) -> ContextTopic:
    return ContextTopic(id=t.id, name=t.name, size=t.size, collection=t.collection)


def context_pack(resp: memory_service_pb2.GetContextResponse) -> ContextPack:
    return ContextPack(
        sections=tuple(
            ContextSection(
                kind=_SECTION_KIND.get(x.kind, "unspecified"),
                title=x.title,
                items=tuple(
                    ContextItem(
                        text=i.text,
                        tokens=i.tokens,
                        reason=i.reason,
                        memory=memory_from_proto(i.memory) if i.HasField("memory") else None,
                        slot=i.slot,
                        trigger=i.trigger,
                        count=i.count,
                        topic=_topic(i.topic) if i.HasField("topic") else None,
                    )
                    for i in x.items
                ),
                tokens=x.tokens,
                omitted=x.omitted,
            )
            for x in resp.sections
        ),
        markdown=resp.markdown,
        token_budget=resp.token_budget,
        tokens_used=resp.tokens_used,
        tokenizer=resp.tokenizer,
        since=_time(resp, "since"),
        since_source=_SINCE_SOURCE.get(resp.since_source, "unspecified"),
        last_session_id=resp.last_session_id,
        topics=tuple(_topic(t) for t in resp.topics),
        truncated=resp.truncated,
    )


def triggers(resp: memory_service_pb2.GetTriggersResponse) -> Triggers:
    return Triggers(
        action=resp.action,
        matched=tuple(resp.matched),
        memories=_memories(resp.memories),
        truncated=resp.truncated,
    )


def slot(x: memory_service_pb2.Slot) -> Slot:
    return Slot(
        name=x.name,
        content=x.content,
        capacity_tokens=x.capacity_tokens,
        tokens=x.tokens,
        updated_at=_time(x, "updated_at"),
        compactions=x.compactions,
    )


def slots(resp: memory_service_pb2.ListSlotsResponse) -> list[Slot]:
    return [slot(x) for x in resp.slots]


def slot_update(resp: memory_service_pb2.UpdateSlotResponse) -> SlotUpdate:
    return SlotUpdate(slot=slot(resp.slot), compaction=_COMPACTION.get(resp.compaction, ""))


_CONTRADICTION_MODES = {
    "supersede": memory_service_pb2.CONTRADICTION_MODE_SUPERSEDE,
    "report": memory_service_pb2.CONTRADICTION_MODE_REPORT,
    "off": memory_service_pb2.CONTRADICTION_MODE_OFF,
}


def contradiction_mode_to_proto(mode: str) -> memory_service_pb2.ContradictionMode.ValueType:
    try:
        return _CONTRADICTION_MODES[mode]
    except KeyError:
        raise ValueError(
            f"contradictions must be one of {sorted(_CONTRADICTION_MODES)}, not {mode!r}"
        ) from None


_CONSOLIDATION_FROM = {
    memory_service_pb2.CONSOLIDATION_OUTCOME_COMPLETED: "completed",
    memory_service_pb2.CONSOLIDATION_OUTCOME_NOTHING_TO_MERGE: "nothing_to_merge",
    memory_service_pb2.CONSOLIDATION_OUTCOME_THROTTLED: "throttled",
    memory_service_pb2.CONSOLIDATION_OUTCOME_WOULD_RUN: "would_run",
}


def consolidation_result(resp: memory_service_pb2.RunConsolidationResponse) -> ConsolidationResult:
    return ConsolidationResult(
        outcome=_CONSOLIDATION_FROM.get(resp.outcome, "unspecified"),
        detail=resp.detail,
        next_run_after=_time(resp, "next_run_after"),
        clusters=tuple(
            ConsolidatedCluster(memory_from_proto(x.insight), tuple(x.source_ids), x.merged_by)
            for x in resp.clusters
        ),
        candidates=resp.candidates,
        memories_before=resp.memories_before,
        memories_after=resp.memories_after,
    )


def topic(t: memory_service_pb2.Topic) -> Topic:
    return Topic(
        id=t.id,
        name=t.name,
        named_by=t.named_by,
        size=t.size,
        level=t.level,
        parent_id=t.parent_id,
        children=tuple(topic(c) for c in t.children),
        terms=tuple(t.terms),
        created_at=_time(t, "created_at"),
        collection=t.collection,
    )


def topic_page(resp: memory_service_pb2.ListTopicsResponse) -> TopicPage:
    return TopicPage(
        topics=tuple(topic(t) for t in resp.topics),
        next_page_token=resp.next_page_token or None,
        topic_count=resp.topic_count,
        memory_count=resp.memory_count,
    )


def topic_memories(resp: memory_service_pb2.GetTopicResponse) -> TopicMemories:
    return TopicMemories(
        topic=topic(resp.topic),
        memories=tuple(memory_from_proto(m) for m in resp.memories),
        next_page_token=resp.next_page_token or None,
    )
