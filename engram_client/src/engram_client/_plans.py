"""Request building shared by the sync and asyncio clients.

Each public method turns its keyword arguments into a :class:`Plan`: the RPC to call, the request,
how to convert the answer, whether an UNAVAILABLE failure may be retried, and what a retry that
finds its target gone means. The clients only run plans.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from google.protobuf.message import Message

from engram_client import _convert
from engram_client.errors import (
    CollectionInTrashError,
    CollectionNotFoundError,
    EngramError,
    MemoryNotFoundError,
    UnimplementedError,
)
from engram_client.models import (
    AddResult,
    CollectionInfo,
    ConsolidationResult,
    ContextPack,
    ConversationMessage,
    DeleteCollectionResult,
    DeleteResult,
    ExtractionResult,
    GateDecisions,
    GetResult,
    MemoryFilter,
    MemoryType,
    MemoryTypeName,
    NewMemory,
    Page,
    RankingWeights,
    ReflectionResult,
    ReflectionRun,
    RestoreResult,
    SearchResults,
    Slot,
    SlotUpdate,
    Source,
    SourceName,
    SourceType,
    SourceTypeName,
    ToolObservation,
    TopicMemories,
    TopicPage,
    TrashedCollection,
    Triggers,
    UpdateResult,
)
from engram_client.proto.engram.v1 import memory_service_pb2

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Plan(Generic[R]):
    method: str
    request: Message
    convert: Callable[[Any], R]
    #: May an UNAVAILABLE failure be retried?
    retry: bool = True
    #: If a retry (after an UNAVAILABLE attempt) fails with this error, the lost attempt most
    #: likely did the work: answer ``gone()`` instead of raising.
    gone_error: type[EngramError] | tuple[type[EngramError], ...] | None = None
    gone: Callable[[], R] | None = None
    #: The error the call raises for the one it got, when the plan says it more clearly
    #: (raised ``from`` the original).
    map_error: Callable[[EngramError], EngramError] | None = None


def _collections(value: str | Sequence[str] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return list(value)


_NewMemoryMessage = TypeVar(
    "_NewMemoryMessage", memory_service_pb2.AddMemoryRequest, memory_service_pb2.NewMemory
)


def _fill_new_memory(req: _NewMemoryMessage, memory: NewMemory) -> tuple[_NewMemoryMessage, str]:
    """Fill the fields AddMemoryRequest and an AddMemories item share; returns the request_id sent
    (a new UUID unless one was given)."""
    if isinstance(memory.tags, str):
        raise TypeError("tags must be a sequence of strings, not a string")
    rid = memory.request_id or str(uuid.uuid4())
    req.content = memory.content
    req.tags.extend(memory.tags)
    req.metadata.update(memory.metadata or {})
    req.request_id = rid
    req.allow_duplicate = memory.allow_duplicate
    req.session_id = memory.session_id or ""
    req.agent_id = memory.agent_id or ""
    if memory.contradictions is not None:
        req.contradictions = _convert.contradiction_mode_to_proto(memory.contradictions)
    if memory.type is not None:
        req.type = _convert.memory_type_to_proto(memory.type)
    if memory.importance is not None:
        req.importance = memory.importance
    if memory.source is not None:
        req.source = _convert.source_to_proto(memory.source)
    if memory.source_type is not None:
        req.source_type = _convert.source_type_to_proto(memory.source_type)
    if memory.created_at is not None:
        req.created_at.CopyFrom(_convert.timestamp_to_proto(memory.created_at, "created_at"))
    if memory.valid_until is not None:
        req.valid_until.CopyFrom(_convert.timestamp_to_proto(memory.valid_until, "valid_until"))
    return req, rid


def add(
    content: str,
    *,
    collection: str | None,
    type: MemoryType | MemoryTypeName | None,
    importance: int | None,
    tags: Sequence[str],
    source: Source | SourceName | None,
    source_type: SourceType | SourceTypeName | None,
    metadata: Mapping[str, str] | None,
    created_at: datetime | None,
    valid_until: datetime | None,
    request_id: str | None,
    allow_duplicate: bool = False,
    session_id: str | None = None,
    agent_id: str | None = None,
    contradictions: str | None = None,
) -> Plan[AddResult]:
    memory = NewMemory(
        content,
        type=type,
        importance=importance,
        tags=tags,
        source=source,
        source_type=source_type,
        metadata=metadata,
        created_at=created_at,
        valid_until=valid_until,
        request_id=request_id,
        allow_duplicate=allow_duplicate,
        session_id=session_id,
        agent_id=agent_id,
        contradictions=contradictions,
    )
    req, rid = _fill_new_memory(memory_service_pb2.AddMemoryRequest(collection=collection or ""), memory)
    # The same request_id is sent on every attempt, so a retry of a write that did land is
    # answered with the first answer (replayed=True) instead of writing twice.
    return Plan("AddMemory", req, lambda resp: _convert.add_result(resp, rid))


def add_many(memories: Iterable[NewMemory | str], *, collection: str | None) -> Plan[list[AddResult]]:
    if isinstance(memories, str):
        raise TypeError("memories must be a sequence of NewMemory or strings, not a string")
    req = memory_service_pb2.AddMemoriesRequest(collection=collection or "")
    rids: list[str] = []
    for memory in memories:
        item = memory if isinstance(memory, NewMemory) else NewMemory(memory)
        rids.append(_fill_new_memory(req.memories.add(), item)[1])
    # Every item keeps its request_id across attempts: a retry of a call that did land answers
    # each memory it wrote with the first answer (replayed=True) instead of writing it twice.
    return Plan("AddMemories", req, lambda resp: _convert.add_results(resp, rids))


_READINGS = {
    "query": memory_service_pb2.QUERY_READING_QUERY,
    "statement": memory_service_pb2.QUERY_READING_STATEMENT,
}


def search(
    query: str,
    *,
    collections: str | Sequence[str] | None,
    limit: int,
    filter: MemoryFilter | None,
    weights: RankingWeights | None,
    diversify: bool,
    mmr_lambda: float | None,
    min_relevance: float,
    max_per_session: int = 0,
    reading: str | None = None,
    rerank: bool | None = None,
) -> Plan[SearchResults]:
    req = memory_service_pb2.SearchMemoriesRequest(
        query=query,
        collections=_collections(collections),
        limit=limit,
        diversify=diversify,
        min_relevance=min_relevance,
        max_per_session=max_per_session,
    )
    if reading is not None:
        if reading not in _READINGS:
            raise ValueError(f"reading must be one of {', '.join(sorted(_READINGS))} (got {reading!r})")
        req.reading = _READINGS[reading]
    if rerank is not None:
        req.rerank = memory_service_pb2.RERANK_MODE_ON if rerank else memory_service_pb2.RERANK_MODE_OFF
    if filter is not None:
        req.filter.CopyFrom(_convert.filter_to_proto(filter))
    if weights is not None:
        req.weights.CopyFrom(_convert.weights_to_proto(weights))
    if mmr_lambda is not None:
        req.mmr_lambda = mmr_lambda
    return Plan("SearchMemories", req, _convert.search_results)


def update(
    id: str | None,
    *,
    locate: str | None,
    threshold: float | None,
    collection: str | None,
    content: str | None,
    type: MemoryType | MemoryTypeName | None,
    importance: int | None,
    tags: Sequence[str] | None,
    metadata: Mapping[str, str] | None,
    valid_until: datetime | None,
    dry_run: bool,
) -> Plan[UpdateResult]:
    if (id is None) == (locate is None):
        raise ValueError("give exactly one of id (the memory's id) or locate (text close to its content)")
    if threshold is not None and locate is None:
        raise ValueError("threshold applies to a semantic locate only")
    req = memory_service_pb2.UpdateMemoryRequest(collection=collection or "", dry_run=dry_run)
    if id is not None:
        req.id = id
    else:
        locator = memory_service_pb2.SemanticLocator(content=locate or "", threshold=threshold or 0.0)
        req.locate.CopyFrom(locator)
    if content is not None:
        req.content = content
    if type is not None:
        req.type = _convert.memory_type_to_proto(type)
    if importance is not None:
        req.importance = importance
    if tags is not None:
        if isinstance(tags, str):
            raise TypeError("tags must be a sequence of strings, not a string")
        req.tags.CopyFrom(memory_service_pb2.StringList(values=list(tags)))
    if metadata is not None:
        req.metadata.CopyFrom(memory_service_pb2.StringMap(entries=dict(metadata)))
    if valid_until is not None:
        req.valid_until.CopyFrom(_convert.timestamp_to_proto(valid_until, "valid_until"))
    semantic = locate is not None
    # UpdateMemory has no request_id: a retry is safe because applying the same change to the
    # memory that already has it writes nothing (changed=False). See the client docstring.
    return Plan("UpdateMemory", req, lambda resp: _convert.update_result(resp, semantic))


def delete(
    id: str | None,
    *,
    query: str | None,
    threshold: float | None,
    limit: int | None,
    collection: str | None,
    force: bool,
    dry_run: bool,
) -> Plan[DeleteResult]:
    if (id is None) == (query is None):
        raise ValueError("give exactly one of id or query")
    if (threshold is not None or limit is not None) and query is None:
        raise ValueError("threshold and limit apply to a delete by query only")
    req = memory_service_pb2.DeleteMemoryRequest(collection=collection or "", force=force, dry_run=dry_run)
    if id is not None:
        req.id = id
        # A retry after a lost answer finds the memory gone: report that instead of NOT_FOUND.
        return Plan(
            "DeleteMemory",
            req,
            _convert.delete_result,
            gone_error=MemoryNotFoundError,
            gone=lambda: DeleteResult(deleted=(), dry_run=False, already_deleted=True),
        )
    selector = memory_service_pb2.DeleteQuery(query=query or "", threshold=threshold or 0.0, limit=limit or 0)
    req.query.CopyFrom(selector)
    # A delete by query is not retried (except a dry run): if the lost attempt deleted the best
    # match, a retry would delete the next one above the threshold.
    return Plan("DeleteMemory", req, _convert.delete_result, retry=dry_run)


def get(id: str, *, collection: str | None, include_history: bool) -> Plan[GetResult]:
    req = memory_service_pb2.GetMemoryRequest(
        collection=collection or "", id=id, include_history=include_history
    )
    return Plan("GetMemory", req, _convert.get_result)


def list_memories(
    *,
    collection: str | None,
    filter: MemoryFilter | None,
    page_size: int,
    page_token: str | None,
    include_history: bool,
) -> Plan[Page]:
    req = memory_service_pb2.ListMemoriesRequest(
        collection=collection or "",
        page_size=page_size,
        page_token=page_token or "",
        include_history=include_history,
    )
    if filter is not None:
        req.filter.CopyFrom(_convert.filter_to_proto(filter))
    return Plan("ListMemories", req, _convert.page)


def list_collections() -> Plan[list[CollectionInfo]]:
    return Plan("ListCollections", memory_service_pb2.ListCollectionsRequest(), _convert.collections)


def delete_collection(name: str) -> Plan[DeleteCollectionResult]:
    return Plan(
        "DeleteCollection",
        memory_service_pb2.DeleteCollectionRequest(name=name),
        _convert.delete_collection_result,
        # (in the trash after the lost attempt, or dropped when the server's trash is off)
        gone_error=(CollectionNotFoundError, CollectionInTrashError),
        gone=lambda: DeleteCollectionResult(deleted_count=0, deleted_at=None, already_deleted=True),
    )


def list_trash(*, collection: str | None, page_size: int, page_token: str | None) -> Plan[Page]:
    req = memory_service_pb2.ListTrashRequest(
        collection=collection or "", page_size=page_size, page_token=page_token or ""
    )
    return Plan("ListTrash", req, _convert.trash_page)


def restore(id: str, *, collection: str | None) -> Plan[RestoreResult]:
    req = memory_service_pb2.RestoreMemoryRequest(collection=collection or "", id=id)
    # Not retried blindly: a lost answer that did restore would read as MEMORY_NOT_FOUND after.
    return Plan("RestoreMemory", req, _convert.restore_result, retry=False)


def purge_trash(*, collection: str | None, ids: Sequence[str], purge_collection: bool) -> Plan[int]:
    req = memory_service_pb2.PurgeTrashRequest(
        collection=collection or "", ids=list(ids), purge_collection=purge_collection
    )
    return Plan("PurgeTrash", req, _convert.purged_count, retry=not ids and not purge_collection)


def list_trashed_collections() -> Plan[list[TrashedCollection]]:
    req = memory_service_pb2.ListCollectionsRequest(include_trashed=True)
    return Plan("ListCollections", req, _convert.trashed_collections)


def restore_collection(name: str) -> Plan[CollectionInfo]:
    req = memory_service_pb2.RestoreCollectionRequest(name=name)
    return Plan("RestoreCollection", req, _convert.restored_collection, retry=False)


def run_reflection(*, collection: str | None, dry_run: bool, force: bool) -> Plan[ReflectionResult]:
    req = memory_service_pb2.RunReflectionRequest(collection=collection or "", dry_run=dry_run, force=force)
    # A real run calls an LLM and writes insights: not retried (a lost answer cannot be told apart
    # from a run that did not happen). A dry run writes nothing and is retried.
    return Plan(
        "RunReflection", req, _convert.reflection_result, retry=dry_run, map_error=_reflection_unavailable
    )


def gate_decisions(*, collection: str | None, limit: int) -> Plan[GateDecisions]:
    req = memory_service_pb2.ListGateDecisionsRequest(collection=collection or "", limit=limit)
    return Plan("ListGateDecisions", req, _convert.gate_decisions)


def reflection_runs(*, collection: str | None, limit: int) -> Plan[list[ReflectionRun]]:
    req = memory_service_pb2.ListReflectionRunsRequest(collection=collection or "", limit=limit)
    return Plan("ListReflectionRuns", req, _convert.reflection_runs, map_error=_reflection_unavailable)


def run_consolidation(*, collection: str | None, dry_run: bool, force: bool) -> Plan[ConsolidationResult]:
    req = memory_service_pb2.RunConsolidationRequest(
        collection=collection or "", dry_run=dry_run, force=force
    )
    # A real run writes insights: not retried; a dry run writes nothing and is retried.
    return Plan("RunConsolidation", req, _convert.consolidation_result, retry=dry_run)


def list_topics(
    *, collection: str | None, parent_id: str | None, page_size: int, page_token: str | None
) -> Plan[TopicPage]:
    req = memory_service_pb2.ListTopicsRequest(
        collection=collection or "",
        parent_id=parent_id or "",
        page_size=page_size,
        page_token=page_token or "",
    )
    return Plan("ListTopics", req, _convert.topic_page)


def get_topic(
    id: str, *, collection: str | None, page_size: int, page_token: str | None
) -> Plan[TopicMemories]:
    req = memory_service_pb2.GetTopicRequest(
        collection=collection or "", id=id, page_size=page_size, page_token=page_token or ""
    )
    return Plan("GetTopic", req, _convert.topic_memories)


REFLECTION_UNAVAILABLE = "reflection is not available on this server"


def _reflection_unavailable(error: EngramError) -> EngramError:
    """A server that answers UNIMPLEMENTED to RunReflection (generated code knows the RPC, this
    server does not): the same clear error as when the generated code has no RunReflection at all,
    keeping what the server sent."""
    if not isinstance(error, UnimplementedError):
        return error
    return UnimplementedError(
        REFLECTION_UNAVAILABLE,
        code=error.code,
        reason=error.reason,
        domain=error.domain,
        metadata=error.metadata,
        status=error.status,
        details=error.details,
    )


ExtractionModeName = str


def extract(
    *,
    text: str | None,
    messages: Sequence[ConversationMessage | tuple[str, str]] | None,
    observation: ToolObservation | None,
    collection: str | None,
    mode: str,
    dry_run: bool,
    tags: Sequence[str],
) -> Plan[ExtractionResult]:
    if isinstance(tags, str):
        raise TypeError("tags must be a sequence of strings, not a string")
    given = [
        n for n, v in (("text", text), ("messages", messages), ("observation", observation)) if v is not None
    ]
    if len(given) != 1:
        raise ValueError(
            f"give exactly one of text, messages or observation (got {', '.join(given) or 'none'})"
        )
    modes = {
        "auto": memory_service_pb2.EXTRACTION_MODE_AUTO,
        "rules": memory_service_pb2.EXTRACTION_MODE_RULES,
    }
    if mode not in modes:
        raise ValueError(f"mode must be one of auto, rules; got {mode!r}")
    req = memory_service_pb2.ExtractMemoriesRequest(
        collection=collection or "", mode=modes[mode], dry_run=dry_run, tags=list(tags)
    )
    if text is not None:
        req.text = text
    elif messages is not None:
        conv = req.conversation
        for item in messages:
            msg = item if isinstance(item, ConversationMessage) else ConversationMessage(item[0], item[1])
            out = conv.messages.add(role=msg.role, content=msg.content)
            if msg.created_at is not None:
                out.created_at.CopyFrom(_convert.timestamp_to_proto(msg.created_at, "created_at"))
        if not conv.messages:
            req.conversation.SetInParent()
    elif observation is not None:
        req.observation.CopyFrom(
            memory_service_pb2.ToolObservation(
                tool_name=observation.tool_name,
                input=observation.input,
                output=observation.output,
                error=observation.error,
            )
        )
    # A real call writes (and may call an LLM): not retried; a dry run is.
    return Plan("ExtractMemories", req, _convert.extraction_result, retry=dry_run)


def get_context(
    query: str | None,
    *,
    collections: str | Sequence[str] | None,
    token_budget: int | None,
    since: datetime | None,
    session_id: str | None,
    agent_id: str | None,
) -> Plan[ContextPack]:
    req = memory_service_pb2.GetContextRequest(
        collections=_collections(collections),
        query=query or "",
        session_id=session_id or "",
        agent_id=agent_id or "",
    )
    if token_budget is not None:
        req.token_budget = token_budget
    if since is not None:
        req.since.CopyFrom(_convert.timestamp_to_proto(since, "since"))
    return Plan("GetContext", req, _convert.context_pack)


def get_triggers(action: str, *, collections: str | Sequence[str] | None, limit: int) -> Plan[Triggers]:
    req = memory_service_pb2.GetTriggersRequest(
        action=action, collections=_collections(collections), limit=limit
    )
    return Plan("GetTriggers", req, _convert.triggers)


def list_slots(*, collection: str | None) -> Plan[list[Slot]]:
    return Plan("ListSlots", memory_service_pb2.ListSlotsRequest(collection=collection or ""), _convert.slots)


def update_slot(name: str, content: str, *, collection: str | None, replace: bool) -> Plan[SlotUpdate]:
    req = memory_service_pb2.UpdateSlotRequest(
        collection=collection or "",
        name=name,
        content=content,
        mode=memory_service_pb2.SLOT_UPDATE_MODE_REPLACE
        if replace
        else memory_service_pb2.SLOT_UPDATE_MODE_APPEND,
    )
    # An append that may have landed must not be sent twice; a replace may.
    return Plan("UpdateSlot", req, _convert.slot_update, retry=replace)
