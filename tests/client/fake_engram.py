"""A scriptable MemoryService for client unit tests: fails as told, then answers canned responses.

It records every call (method, request, metadata, time remaining) so tests can check what reached
the server."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio
from google.protobuf import any_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from engram_client.proto.engram.v1 import memory_pb2, memory_service_pb2, memory_service_pb2_grpc


def rich_status(
    code: grpc.StatusCode,
    message: str,
    *,
    reason: str | None = None,
    metadata: dict[str, str] | None = None,
    violations: list[tuple[str, str]] | None = None,
    retry_after_seconds: float | None = None,
) -> status_pb2.Status:
    details: list[any_pb2.Any] = []
    if reason is not None:
        info = error_details_pb2.ErrorInfo(reason=reason, domain="engram.v1", metadata=metadata or {})
        packed = any_pb2.Any()
        packed.Pack(info)
        details.append(packed)
    if violations:
        bad = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field=f, description=d) for f, d in violations
            ]
        )
        packed = any_pb2.Any()
        packed.Pack(bad)
        details.append(packed)
    if retry_after_seconds is not None:
        retry = error_details_pb2.RetryInfo()
        retry.retry_delay.FromNanoseconds(int(retry_after_seconds * 1e9))
        packed = any_pb2.Any()
        packed.Pack(retry)
        details.append(packed)
    return status_pb2.Status(code=getattr(code_pb2, code.name), message=message, details=details)


UNAVAILABLE = rich_status(
    grpc.StatusCode.UNAVAILABLE, "storage down", reason="ERROR_REASON_STORAGE_UNAVAILABLE"
)


@dataclass
class Call:
    method: str
    request: Any
    metadata: dict[str, str]
    time_remaining: float | None


def sample_memory(memory_id: str = "m-1", content: str = "hello", **kw: Any) -> memory_pb2.Memory:
    m = memory_pb2.Memory(
        id=memory_id,
        collection=kw.pop("collection", "default"),
        type=kw.pop("type", memory_pb2.MEMORY_TYPE_EVENT),
        content=content,
        source=memory_pb2.SOURCE_AGENT,
        source_type=memory_pb2.SOURCE_TYPE_USER_INPUT,
        source_type_history=[memory_pb2.SOURCE_TYPE_USER_INPUT],
        importance=kw.pop("importance", 5),
        tags=kw.pop("tags", ["a"]),
        metadata={"k": "v"},
        version=kw.pop("version", 1),
    )
    m.created_at.FromSeconds(1_700_000_000)
    m.updated_at.FromSeconds(1_700_000_100)
    return m


@dataclass
class Script:
    """What the fake does: per method, the statuses to fail with (in order) before answering."""

    failures: dict[str, list[status_pb2.Status]] = field(default_factory=dict)
    responses: dict[str, Message] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)

    def fail(self, method: str, *statuses: status_pb2.Status) -> None:
        self.failures.setdefault(method, []).extend(statuses)

    def attempts(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]


class FakeMemoryService(memory_service_pb2_grpc.MemoryServiceServicer):
    def __init__(self, script: Script) -> None:
        self.script = script

    async def _handle(self, method: str, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        self.script.calls.append(
            Call(
                method=method,
                request=request,
                metadata={k: v for k, v in context.invocation_metadata() or () if isinstance(v, str)},
                time_remaining=context.time_remaining(),
            )
        )
        pending = self.script.failures.get(method)
        if pending:
            await context.abort_with_status(rpc_status.to_status(pending.pop(0)))
        return self.script.responses[method]

    async def AddMemory(self, request: Any, context: Any) -> Any:
        return await self._handle("AddMemory", request, context)

    async def AddMemories(self, request: Any, context: Any) -> Any:
        return await self._handle("AddMemories", request, context)

    async def SearchMemories(self, request: Any, context: Any) -> Any:
        return await self._handle("SearchMemories", request, context)

    async def UpdateMemory(self, request: Any, context: Any) -> Any:
        return await self._handle("UpdateMemory", request, context)

    async def DeleteMemory(self, request: Any, context: Any) -> Any:
        return await self._handle("DeleteMemory", request, context)

    async def GetMemory(self, request: Any, context: Any) -> Any:
        return await self._handle("GetMemory", request, context)

    async def ListMemories(self, request: Any, context: Any) -> Any:
        return await self._handle("ListMemories", request, context)

    async def ListCollections(self, request: Any, context: Any) -> Any:
        return await self._handle("ListCollections", request, context)

    async def DeleteCollection(self, request: Any, context: Any) -> Any:
        return await self._handle("DeleteCollection", request, context)


class ReflectingFake(FakeMemoryService):
    """A server that has RunReflection (the plain fake answers UNIMPLEMENTED, like an older server)."""

    async def RunReflection(self, request: Any, context: Any) -> Any:
        return await self._handle("RunReflection", request, context)


def reflection_response() -> memory_service_pb2.RunReflectionResponse:
    insight = sample_memory("i-1", "Frank keeps commits small.", type=memory_pb2.MEMORY_TYPE_INSIGHT)
    insight.derived_from.extend(["m-1", "m-2"])
    resp = memory_service_pb2.RunReflectionResponse(
        outcome=memory_service_pb2.REFLECTION_OUTCOME_COMPLETED,
        detail="1 insight",
        unreflected_importance=44,
        unreflected_count=2,
        sources=[sample_memory("m-1"), sample_memory("m-2")],
        insights=[insight],
        duplicates=[memory_pb2.SimilarMemory(id="i-0", similarity=0.95, content="old")],
        reflection_collection="default_reflection",
        model="gpt-4o-mini",
    )
    return resp


def default_responses() -> dict[str, Message]:
    m = sample_memory()
    near = memory_pb2.SimilarMemory(
        id="m-2", similarity=0.8, content="hi", type=memory_pb2.MEMORY_TYPE_INSIGHT
    )
    return {
        "AddMemory": memory_service_pb2.AddMemoryResponse(
            memory=m, outcome=memory_service_pb2.ADD_OUTCOME_CREATED, near_duplicates=[near]
        ),
        "AddMemories": memory_service_pb2.AddMemoriesResponse(
            results=[
                memory_service_pb2.AddMemoryResult(
                    memory=m, outcome=memory_service_pb2.ADD_OUTCOME_CREATED, near_duplicates=[near]
                ),
                memory_service_pb2.AddMemoryResult(
                    memory=m,
                    outcome=memory_service_pb2.ADD_OUTCOME_DUPLICATE,
                    duplicate_similarity=1.0,
                    duplicate_of_index=0,
                ),
            ]
        ),
        "SearchMemories": memory_service_pb2.SearchMemoriesResponse(
            results=[
                memory_service_pb2.SearchResult(
                    memory=m,
                    score=memory_pb2.ScoreBreakdown(
                        final=1.2, relevance=0.9, recency=0.5, importance=0.5, raw_similarity=0.95
                    ),
                )
            ]
        ),
        "UpdateMemory": memory_service_pb2.UpdateMemoryResponse(
            memory=sample_memory(content="changed", version=2), previous=m, similarity=0.9, changed=True
        ),
        "DeleteMemory": memory_service_pb2.DeleteMemoryResponse(deleted=[m]),
        "GetMemory": memory_service_pb2.GetMemoryResponse(memory=m),
        "ListMemories": memory_service_pb2.ListMemoriesResponse(memories=[m]),
        "ListCollections": memory_service_pb2.ListCollectionsResponse(
            collections=[memory_pb2.CollectionInfo(name="default", memory_count=1, embedding_model="e5")]
        ),
        "DeleteCollection": memory_service_pb2.DeleteCollectionResponse(deleted_count=3),
        "RunReflection": reflection_response(),
    }


@contextlib.asynccontextmanager
async def fake_server(
    script: Script, servicer: type[FakeMemoryService] = FakeMemoryService
) -> AsyncIterator[str]:
    if not script.responses:
        script.responses = default_responses()
    server = grpc.aio.server()
    memory_service_pb2_grpc.add_MemoryServiceServicer_to_server(servicer(script), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)
