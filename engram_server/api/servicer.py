"""The gRPC edge: proto -> domain command -> proto. No policy lives here."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc
from opentelemetry import trace

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.api import convert as c
from engram_server.api.answers import abridged_to_fit, answer_budget, fit_in_place, fitting
from engram_server.api.auth import readable_collections
from engram_server.api.errors import internal_status, to_status
from engram_server.api.gate_log import PER_COLLECTION, GateLog, decision_from
from engram_server.api.guard import Malformed
from engram_server.domain.consolidation import Consolidator
from engram_server.domain.deadline import set_time_remaining
from engram_server.domain.errors import EngramError, InvalidArgument
from engram_server.domain.extraction import MemoryExtractor
from engram_server.domain.reflection import Reflector
from engram_server.domain.service import (
    ContextRequest,
    DeleteCommand,
    ImportMode,
    Locator,
    MemoryService,
    Reembed,
    SearchQuery,
    UpdateCommand,
)
from engram_server.domain.service.porting import MAX_LINE_BYTES
from engram_server.domain.service.topics import TopicService
from engram_server.domain.validation import Violations, check_collection

log = logging.getLogger(__name__)

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Handler = Callable[[Any, Req, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]]


def rpc(fn: Handler[Req, Resp]) -> Handler[Req, Resp]:
    """Map domain errors to rich gRPC status; anything unexpected is logged and INTERNAL."""

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Req, context: grpc.aio.ServicerContext[Any, Any]) -> Resp:
        set_time_remaining(context.time_remaining())
        try:
            return await fn(self, request, context)
        except EngramError as exc:
            await context.abort_with_status(to_status(exc))
        except grpc.aio.AbortError:
            raise
        except Exception:
            log.exception("unexpected error in %s", fn.__name__)
            await context.abort_with_status(internal_status(f"internal error in {fn.__name__}"))
        raise AssertionError("unreachable")  # abort_with_status always raises

    return wrapper


#: Bytes of export file one ExportMemories message carries at most (less with a smaller message limit).
EXPORT_CHUNK_BYTES = 1024 * 1024

IMPORT_MODE_IN: dict[int, ImportMode] = {
    s.IMPORT_MODE_UNSPECIFIED: ImportMode.RESTORE,
    s.IMPORT_MODE_RESTORE: ImportMode.RESTORE,
    s.IMPORT_MODE_MERGE: ImportMode.MERGE,
}
REEMBED_IN: dict[int, Reembed] = {
    s.REEMBED_UNSPECIFIED: Reembed.AUTO,
    s.REEMBED_AUTO: Reembed.AUTO,
    s.REEMBED_NEVER: Reembed.NEVER,
    s.REEMBED_ALWAYS: Reembed.ALWAYS,
}


async def _abort(context: grpc.aio.ServicerContext[Any, Any], method: str, exc: Exception) -> None:
    """Answer a streaming call's failure as ``rpc`` answers a unary one's."""
    if isinstance(exc, EngramError):
        await context.abort_with_status(to_status(exc))
    log.error("unexpected error in %s", method, exc_info=exc)
    await context.abort_with_status(internal_status(f"internal error in {method}"))


#: grpc's default message limit, the server's unless ``ENGRAM_MAX_MESSAGE_BYTES`` says otherwise.
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024


class MemoryServicer(memory_service_pb2_grpc.MemoryServiceServicer):
    def __init__(
        self,
        service: MemoryService,
        reflector: Reflector,
        *,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        extractor: MemoryExtractor | None = None,
        consolidator: Consolidator | None = None,
        backup_dir: Path | None = None,
        topics: TopicService | None = None,
    ) -> None:
        self._svc = service
        self._backup_dir = backup_dir
        #: Bytes of export file per ExportMemories message.
        self._chunk = min(EXPORT_CHUNK_BYTES, answer_budget(max_message_bytes))
        self._reflector = reflector
        self._extractor = extractor or MemoryExtractor(service, reflector.llm)
        self._consolidator = consolidator or Consolidator(service, reflector.llm)
        self._topics = topics if topics is not None else TopicService(service, reflector.llm)
        #: Bytes the list of memories in one answer may take (see ``api/answers``).
        self._budget = answer_budget(max_message_bytes)
        #: The write gate's recent decisions (ListGateDecisions).
        self._gate_log = GateLog()

    @rpc
    async def AddMemory(
        self, request: s.AddMemoryRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.AddMemoryResponse:
        result = await self._svc.add(c.add_command_in(request, request.collection))
        answer = s.AddMemoryResponse(**c.add_result_fields(result))
        self._gate_log.record(decision_from(answer, request.content), answer.memory.collection)
        return answer

    @rpc
    async def AddMemories(
        self, request: s.AddMemoriesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.AddMemoriesResponse:
        self._svc.check_batch_size(len(request.memories))  # before converting any item
        trace.get_current_span().set_attribute("engram.batch.items", len(request.memories))
        cmds = [
            c.add_command_in(item, request.collection, f"memories[{i}].")
            for i, item in enumerate(request.memories)
        ]
        results = await self._svc.add_many(request.collection, cmds)
        answer = s.AddMemoriesResponse(
            results=abridged_to_fit(
                [
                    s.AddMemoryResult(**c.add_result_fields(r), duplicate_of_index=r.duplicate_of)
                    for r in results
                ],
                self._budget,
            )
        )
        for item, result in zip(request.memories, answer.results, strict=True):
            self._gate_log.record(decision_from(result, item.content), result.memory.collection)
        return answer

    @rpc
    async def SearchMemories(
        self, request: s.SearchMemoriesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.SearchMemoriesResponse:
        query = SearchQuery(
            query=request.query,
            collections=tuple(request.collections),
            limit=request.limit,
            filter=c.filter_in(request.filter, "filter"),
            weights=c.weights_in(request.weights) if request.HasField("weights") else None,
            diversify=request.diversify,
            mmr_lambda=request.mmr_lambda if request.HasField("mmr_lambda") else None,
            min_relevance=request.min_relevance,
            readable=readable_collections.get(),
            max_per_session=request.max_per_session,
            as_statement=c.enum_in(c.READING_IN, request.reading, "reading"),
            rerank=c.enum_in(c.RERANK_IN, request.rerank, "rerank"),
        )
        hits = await self._svc.search(query)
        # Each result is built inside the answer, field by field (a result message built apart is
        # copied in; the constructor's keyword dictionaries cost more than setting the fields).
        out = s.SearchMemoriesResponse()
        add = out.results.add
        for h in hits:
            result = add()
            c.fill_memory(result.memory, h.memory)
            c.fill_score(result.score, h.score)
        # (the answer is its results: when all of them fit, one size of the whole tells)
        if out.ByteSize() > self._budget and fit_in_place(out.results, self._budget):
            out.truncated = True
            trace.get_current_span().set_attribute("engram.answer.truncated", True)
        return out

    @rpc
    async def UpdateMemory(
        self, request: s.UpdateMemoryRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.UpdateMemoryResponse:
        target = request.WhichOneof("target")
        if target == "id" and not request.id:
            raise InvalidArgument.of("id", "must not be empty")
        cmd = UpdateCommand(
            collection=request.collection,
            id=request.id if target == "id" else None,
            locate=Locator(request.locate.content, request.locate.threshold) if target == "locate" else None,
            content=request.content,
            type=c.enum_in(c.TYPE_IN, request.type, "type") if request.HasField("type") else None,
            importance=request.importance if request.HasField("importance") else None,
            tags=tuple(request.tags.values) if request.HasField("tags") else None,
            metadata=dict(request.metadata.entries) if request.HasField("metadata") else None,
            valid_until=c.ts_in(request.valid_until, "valid_until")
            if request.HasField("valid_until")
            else None,
            dry_run=request.dry_run,
        )
        result = await self._svc.update(cmd)
        return s.UpdateMemoryResponse(
            memory=c.memory_out(result.memory),
            previous=c.memory_out(result.previous),
            similarity=result.similarity,
            changed=result.changed,
            dry_run=result.dry_run,
        )

    @rpc
    async def DeleteMemory(
        self, request: s.DeleteMemoryRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.DeleteMemoryResponse:
        target = request.WhichOneof("target")
        if target == "id" and not request.id:
            raise InvalidArgument.of("id", "must not be empty")
        cmd = DeleteCommand(
            collection=request.collection,
            id=request.id if target == "id" else None,
            query=request.query.query if target == "query" else None,
            threshold=request.query.threshold,
            limit=request.query.limit,
            force=request.force,
            dry_run=request.dry_run,
        )
        result = await self._svc.delete(cmd)
        if not result.dry_run:
            self._gate_log.forget_memories(r.id for r in result.deleted)
        deleted, truncated = fitting((c.memory_out(r) for r in result.deleted), self._budget)
        out = s.DeleteMemoryResponse(
            deleted=deleted,
            dry_run=result.dry_run,
            deleted_count=len(result.deleted),
            truncated=truncated,
        )
        trashed_at = next((r.trashed_at for r in result.deleted if r.trashed_at is not None), None)
        if trashed_at is not None:
            out.purge_at.CopyFrom(c.ts_out(self._svc.purge_at(trashed_at)))
        return out

    @rpc
    async def GetMemory(
        self, request: s.GetMemoryRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.GetMemoryResponse:
        record, history = await self._svc.get(request.collection, request.id, request.include_history)
        memory = c.memory_out(record)
        kept, truncated = fitting((c.memory_out(h) for h in history), self._budget - memory.ByteSize())
        return s.GetMemoryResponse(memory=memory, history=kept, history_truncated=truncated)

    @rpc
    async def ListMemories(
        self, request: s.ListMemoriesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.ListMemoriesResponse:
        records, token = await self._svc.list(
            request.collection,
            c.filter_in(request.filter, "filter"),
            request.page_size,
            request.page_token,
            request.include_history,
        )
        memories, cut = fitting((c.memory_out(r) for r in records), self._budget)
        if cut:  # the page ends before the first memory that did not fit; the next one starts there
            token = self._svc.page_token_at(records[len(memories)])
        return s.ListMemoriesResponse(memories=memories, next_page_token=token)

    @rpc
    async def ListCollections(
        self, request: s.ListCollectionsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.ListCollectionsResponse:
        stats = await self._svc.list_collections()
        out = s.ListCollectionsResponse(collections=[c.collection_out(x.spec, x.memory_count) for x in stats])
        if request.include_trashed:
            for x in await self._svc.list_trashed_collections():
                assert x.spec.trashed_at is not None
                t = out.trashed.add(name=x.spec.name, memory_count=x.memory_count)
                t.trashed_at.CopyFrom(c.ts_out(x.spec.trashed_at))
                t.purge_at.CopyFrom(c.ts_out(self._svc.purge_at(x.spec.trashed_at)))
        return out

    @rpc
    async def DeleteCollection(
        self, request: s.DeleteCollectionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.DeleteCollectionResponse:
        count, purge_at = await self._svc.delete_collection(request.name)
        self._gate_log.forget_collection(request.name)
        self._extractor.forget_collection(request.name)
        self._topics.forget(request.name)
        out = s.DeleteCollectionResponse(deleted_count=count)
        out.deleted_at.CopyFrom(c.ts_out(self._svc.now()))
        if purge_at is not None:
            out.purge_at.CopyFrom(c.ts_out(purge_at))
        return out

    @rpc
    async def RunReflection(
        self, request: s.RunReflectionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.RunReflectionResponse:
        report = await self._reflector.run(request.collection, dry_run=request.dry_run, force=request.force)
        out = c.reflection_out(report)
        if out.ByteSize() > self._budget:  # the sources are users' memories: keep those that fit
            sources = list(out.sources)
            del out.sources[:]
            kept, out.sources_truncated = fitting(sources, self._budget - out.ByteSize())
            out.sources.extend(kept)
        return out

    @rpc
    async def RunConsolidation(
        self, request: s.RunConsolidationRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.RunConsolidationResponse:
        report = await self._consolidator.run(
            request.collection, dry_run=request.dry_run, force=request.force
        )
        out = c.consolidation_out(report)
        if out.ByteSize() > self._budget:  # the insights hold users' memories: drop the last clusters
            while out.clusters and out.ByteSize() > self._budget:
                del out.clusters[-1]
        return out

    @rpc
    async def ListGateDecisions(
        self, request: s.ListGateDecisionsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.ListGateDecisionsResponse:
        collection = request.collection or self._svc.policy.default_collection
        v = Violations()
        check_collection(v, "collection", collection)
        if not 0 <= request.limit <= PER_COLLECTION:
            v.add("limit", f"must be between 1 and {PER_COLLECTION} (0 means 50), got {request.limit}")
        v.raise_if_any()
        kept, truncated = fitting(iter(self._gate_log.recent(collection, request.limit)), self._budget)
        return s.ListGateDecisionsResponse(decisions=kept, truncated=truncated)

    @rpc
    async def ListReflectionRuns(
        self, request: s.ListReflectionRunsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.ListReflectionRunsResponse:
        runs = await self._reflector.history(request.collection, request.limit)
        kept, truncated = fitting(iter(c.reflection_run_out(r) for r in runs), self._budget)
        return s.ListReflectionRunsResponse(runs=kept, truncated=truncated)

    @rpc
    async def ExtractMemories(
        self, request: s.ExtractMemoriesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.ExtractMemoriesResponse:
        report = await self._extractor.extract(c.extract_command_in(request))
        answer = c.extract_out(report)
        for item in answer.memories:
            if item.HasField("result"):
                self._gate_log.record(decision_from(item.result, item.content), item.result.memory.collection)
        return answer

    @rpc
    async def ListTrash(
        self, request: s.ListTrashRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.ListTrashResponse:
        records, token = await self._svc.list_trash(request.collection, request.page_size, request.page_token)
        memories, cut = fitting(
            (
                c.trashed_memory_out(r, self._svc.purge_at(r.trashed_at or 0.0, r.valid_until))
                for r in records
            ),
            self._budget,
        )
        if cut:
            token = self._svc.page_token_at(records[len(memories)])
        return s.ListTrashResponse(memories=memories, next_page_token=token)

    @rpc
    async def RestoreMemory(
        self, request: s.RestoreMemoryRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.RestoreMemoryResponse:
        record, near = await self._svc.restore(request.collection, request.id)
        return s.RestoreMemoryResponse(
            memory=c.memory_out(record), near_duplicates=[c.similar_out(x) for x in near]
        )

    @rpc
    async def PurgeTrash(
        self, request: s.PurgeTrashRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.PurgeTrashResponse:
        if request.purge_collection:
            if request.ids:
                raise InvalidArgument.of("ids", "must be empty with purge_collection")
            count = await self._svc.purge_collection(request.collection)
            self._gate_log.forget_collection(request.collection)
        else:
            count = await self._svc.purge(request.collection, list(request.ids))
        return s.PurgeTrashResponse(purged_count=count)

    @rpc
    async def RestoreCollection(
        self, request: s.RestoreCollectionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.RestoreCollectionResponse:
        stats = await self._svc.restore_collection(request.name)
        return s.RestoreCollectionResponse(collection=c.collection_out(stats.spec, stats.memory_count))

    @rpc
    async def GetContext(
        self, request: s.GetContextRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.GetContextResponse:
        pack = await self._svc.get_context(
            ContextRequest(
                collections=tuple(request.collections),
                query=request.query,
                token_budget=request.token_budget if request.HasField("token_budget") else None,
                since=c.opt_ts_in(request, "since", "since"),
                session_id=request.session_id,
                agent_id=request.agent_id,
                readable=readable_collections.get(),
            )
        )
        return c.context_out(pack)

    @rpc
    async def GetTriggers(
        self, request: s.GetTriggersRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.GetTriggersResponse:
        found = await self._svc.get_triggers(
            request.action, tuple(request.collections), request.limit, readable_collections.get()
        )
        memories, cut = fitting((c.memory_out(r) for r in found.memories), self._budget)
        return s.GetTriggersResponse(
            action=found.action,
            matched=list(found.matched),
            memories=memories,
            truncated=found.truncated or cut,
        )

    @rpc
    async def ListSlots(
        self, request: s.ListSlotsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.ListSlotsResponse:
        slots = await self._svc.list_slots(request.collection)
        tokenizer = self._svc.tokenizer.name if self._svc.tokenizer is not None else ""
        return s.ListSlotsResponse(slots=[c.slot_out(x) for x in slots], tokenizer=tokenizer)

    @rpc
    async def UpdateSlot(
        self, request: s.UpdateSlotRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.UpdateSlotResponse:
        mode = request.mode
        if mode not in (
            s.SLOT_UPDATE_MODE_UNSPECIFIED,
            s.SLOT_UPDATE_MODE_APPEND,
            s.SLOT_UPDATE_MODE_REPLACE,
        ):
            raise InvalidArgument.of("mode", f"unknown enum value {mode}")
        result = await self._svc.update_slot(
            request.collection, request.name, request.content, append=mode != s.SLOT_UPDATE_MODE_REPLACE
        )
        return s.UpdateSlotResponse(
            slot=c.slot_out(result.slot), compaction=c.SLOT_COMPACTION_OUT[result.compaction]
        )

    async def ExportMemories(
        self, request: s.ExportMemoriesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[s.ExportMemoriesResponse]:
        set_time_remaining(context.time_remaining())
        try:
            plan = await self._svc.plan_export(
                tuple(request.collections),
                c.filter_in(request.filter, "filter"),
                vectors=request.include_vectors,
                live_only=request.live_only,
            )
            total, done = plan.total, 0
            chunk: list[bytes] = []
            size = 0
            async for line in self._svc.export_lines(plan):
                if not line.startswith(b'{"engram_export"'):
                    done += 1
                chunk.append(line)
                size += len(line)
                while size >= self._chunk:
                    data = b"".join(chunk)
                    head, rest = data[: self._chunk], data[self._chunk :]
                    cut = head.rfind(b"\n") + 1 or len(head)  # end at a line end when one is in it
                    head, rest = data[:cut], data[cut:]
                    yield s.ExportMemoriesResponse(data=head, memories_done=done, memories_total=total)
                    chunk, size = [rest], len(rest)
            if size or not done:
                yield s.ExportMemoriesResponse(data=b"".join(chunk), memories_done=done, memories_total=total)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await _abort(context, "ExportMemories", exc)

    async def ImportMemories(
        self,
        request_iterator: AsyncIterator[s.ImportMemoriesRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> s.ImportMemoriesResponse:
        set_time_remaining(context.time_remaining())
        try:
            importer = None
            buffer = b""
            async for request in request_iterator:
                if isinstance(request, Malformed):
                    raise InvalidArgument(
                        f"a message of the stream ({request.size} bytes) is not an ImportMemoriesRequest"
                    )
                if importer is None:
                    importer = self._svc.importer(
                        c.enum_in(IMPORT_MODE_IN, request.mode, "mode"),
                        c.enum_in(REEMBED_IN, request.reembed, "reembed"),
                        request.collection,
                    )
                buffer += request.data
                lines = buffer.split(b"\n")
                buffer = lines.pop()
                for line in lines:
                    await importer.feed(line)
                if len(buffer) > MAX_LINE_BYTES:
                    await importer.feed(buffer)  # refused as too long, naming its line
            if importer is None:
                importer = self._svc.importer(ImportMode.RESTORE, Reembed.AUTO)
            counts = await importer.finish(buffer)
            return s.ImportMemoriesResponse(
                lines=counts.lines,
                created=counts.created,
                replaced=counts.replaced,
                unchanged=counts.unchanged,
                duplicates=counts.duplicates,
                reembedded=counts.reembedded,
                collections=counts.collections,
            )
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await _abort(context, "ImportMemories", exc)
            raise AssertionError("unreachable") from exc

    @rpc
    async def BackupStore(
        self, request: s.BackupStoreRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.BackupStoreResponse:
        report = await self._svc.backup(request.directory, self._backup_dir)
        out = s.BackupStoreResponse(
            directory=report.directory,
            collections=[
                c.collection_out(spec, report.stats.points.get(spec.name, 0)) for spec in report.specs
            ],
            bytes=report.stats.bytes,
            barrier_seconds=report.barrier_seconds,
        )
        out.taken_at.CopyFrom(c.ts_out(report.taken_at))
        return out

    @rpc
    async def ListTopics(
        self, request: s.ListTopicsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.ListTopicsResponse:
        page = await self._topics.list_topics(
            request.collection, request.parent_id, request.page_size, request.page_token
        )
        topics, cut = fitting(
            (c.topic_view_out(t, kids, collection=page.collection) for t, kids in page.topics), self._budget
        )
        token = page.next_page_token
        if cut:  # the page ends before the first topic that did not fit
            token = self._topics.topic_page_token(request.collection, page.offset + len(topics))
        return s.ListTopicsResponse(
            topics=topics,
            next_page_token=token,
            topic_count=page.topic_count,
            memory_count=page.memory_count,
        )

    @rpc
    async def GetTopic(
        self, request: s.GetTopicRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> s.GetTopicResponse:
        got = await self._topics.get_topic(
            request.collection, request.id, request.page_size, request.page_token
        )
        topic = c.topic_view_out(got.topic, got.children, collection=got.collection)
        memories, cut = fitting((c.memory_out(r) for r in got.memories), self._budget - topic.ByteSize())
        token = got.next_page_token
        if cut:  # the page ends before the first memory that did not fit
            token = self._topics.member_page_token(request.collection, request.id, got.offset + len(memories))
        return s.GetTopicResponse(topic=topic, memories=memories, next_page_token=token)
