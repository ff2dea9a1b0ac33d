"""Failure paths through the live server: storage down (no blind writes, recovery without
restart), embedding provider down, ambiguous semantic locate."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.adapters.embedding.openai import OpenAIEmbedder
from engram_server.adapters.storage.edge import EdgeStore
from engram_server.domain.errors import StorageUnavailable
from engram_server.domain.model import (
    Candidates,
    CollectionSpec,
    MemoryRecord,
    ScoredPoint,
    SparseVector,
    StoredPoint,
    StoreFilter,
    Vector,
)
from engram_server.testing import rich, running_server

Stub = memory_service_pb2_grpc.MemoryServiceStub


class SwitchableStore:
    """The real EdgeStore, with a switch that makes chosen operations fail like an outage."""

    def __init__(self, inner: EdgeStore) -> None:
        self.inner = inner
        self.down: set[str] = set()

    def _check(self, op: str) -> None:
        if op in self.down:
            raise StorageUnavailable(f"storage unreachable during {op} (simulated outage)")

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

    async def create_collection(self, spec: CollectionSpec) -> None:
        self._check("create_collection")
        await self.inner.create_collection(spec)

    async def get_collection(self, name: str) -> CollectionSpec | None:
        self._check("get_collection")
        return await self.inner.get_collection(name)

    async def list_collections(self) -> list[CollectionSpec]:
        return await self.inner.list_collections()

    async def drop_collection(self, name: str) -> int:
        return await self.inner.drop_collection(name)

    async def upsert(self, collection: str, points: Sequence[StoredPoint]) -> None:
        self._check("upsert")
        await self.inner.upsert(collection, points)

    async def retrieve(
        self, collection: str, ids: Sequence[str], *, with_vectors: bool = False
    ) -> list[StoredPoint]:
        self._check("retrieve")
        return await self.inner.retrieve(collection, ids, with_vectors=with_vectors)

    def generation(self, collection: str) -> int | None:
        return self.inner.generation(collection)

    def changed_since(self, collection: str, generation: int) -> frozenset[str] | None:
        return self.inner.changed_since(collection, generation)

    async def search(
        self,
        collection: str,
        vector: Vector,
        limit: int,
        flt: StoreFilter,
        *,
        with_vectors: bool = False,
    ) -> list[ScoredPoint]:
        self._check("search")
        return await self.inner.search(collection, vector, limit, flt, with_vectors=with_vectors)

    async def search_batch(
        self, collection: str, vectors: Vector, limit: int, flt: StoreFilter
    ) -> list[list[ScoredPoint]]:
        self._check("search")
        return await self.inner.search_batch(collection, vectors, limit, flt)

    async def candidates(
        self,
        collection: str,
        vector: Vector,
        limit: int,
        flt: StoreFilter,
        *,
        sparse: SparseVector | None = None,
        lexical_limit: int | None = None,
        with_vectors: bool = False,
    ) -> Candidates:
        self._check("search")
        return await self.inner.candidates(
            collection,
            vector,
            limit,
            flt,
            sparse=sparse,
            lexical_limit=lexical_limit,
            with_vectors=with_vectors,
        )

    async def scroll(
        self, collection: str, flt: StoreFilter, limit: int, offset: str | None = None
    ) -> tuple[list[MemoryRecord], str | None]:
        self._check("scroll")
        return await self.inner.scroll(collection, flt, limit, offset)

    async def top(self, collection: str, flt: StoreFilter, limit: int, order_by: str) -> list[MemoryRecord]:
        self._check("scroll")
        return await self.inner.top(collection, flt, limit, order_by)

    async def count(self, collection: str, flt: StoreFilter) -> int:
        return await self.inner.count(collection, flt)

    async def delete(self, collection: str, ids: Sequence[str]) -> None:
        self._check("delete")
        await self.inner.delete(collection, ids)

    async def delete_where(self, collection: str, flt: StoreFilter) -> int:
        return await self.inner.delete_where(collection, flt)

    async def set_fields(self, collection: str, updates: Mapping[str, Mapping[str, Any]]) -> None:
        await self.inner.set_fields(collection, updates)

    async def add_access(
        self, collection: str, hits: Mapping[str, tuple[int, float]]
    ) -> dict[str, tuple[int, float]]:
        return await self.inner.add_access(collection, hits)

    async def get_state(self, key: str) -> dict[str, Any] | None:
        return await self.inner.get_state(key)

    async def put_state(self, key: str, value: Mapping[str, Any]) -> None:
        self._check("put_state")
        await self.inner.put_state(key, value)


async def test_gate_failure_fails_the_write_and_recovers(tmp_path: Path) -> None:
    store = SwitchableStore(EdgeStore(tmp_path / "data"))
    async with running_server(tmp_path, store=store) as srv, grpc.aio.insecure_channel(srv.address) as ch:
        st = Stub(ch)
        await st.AddMemory(s.AddMemoryRequest(content="First memory, written while healthy."))
        store.down = {"search"}  # the gate's own check cannot run
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await st.AddMemory(s.AddMemoryRequest(content="Second memory, during the outage."))
        err = rich(info.value)
        assert (err.code, err.reason) == (grpc.StatusCode.UNAVAILABLE, "ERROR_REASON_STORAGE_UNAVAILABLE")
        assert "simulated outage" in err.message
        store.down = set()
        assert await srv.store.count("default", StoreFilter()) == 1  # nothing was written blind
        again = await st.AddMemory(s.AddMemoryRequest(content="Second memory, during the outage."))
        assert again.outcome == s.ADD_OUTCOME_CREATED  # recovered without a restart
        store.down = {"upsert"}
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await st.UpdateMemory(s.UpdateMemoryRequest(id=again.memory.id, content="Changed during outage."))
        assert rich(info.value).reason == "ERROR_REASON_STORAGE_UNAVAILABLE"
        store.down = set()
        got = await st.GetMemory(s.GetMemoryRequest(id=again.memory.id, include_history=True))
        assert got.memory.version == 1 and not got.history  # no half-update


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again: nothing listens there


async def test_embedding_provider_down_is_unavailable(tmp_path: Path) -> None:
    """The real OpenAI adapter pointed at an endpoint where nothing listens."""
    embedder = OpenAIEmbedder(
        "text-embedding-3-small",
        api_key="sk-test",
        base_url=f"http://127.0.0.1:{_dead_port()}/v1",
        dimension=8,
        timeout=2.0,
        max_retries=1,
        backoff_base=0.01,
    )
    async with (
        running_server(tmp_path, embedder=embedder) as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        st = Stub(ch)
        await srv.store.create_collection(CollectionSpec("existing", embedder.model_id, 8, 0.0))
        for call in (
            st.AddMemory(s.AddMemoryRequest(content="Cannot be embedded right now.")),
            st.SearchMemories(s.SearchMemoriesRequest(query="anything", collections=["existing"])),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call
            err = rich(info.value)
            assert (err.code, err.reason) == (
                grpc.StatusCode.UNAVAILABLE,
                "ERROR_REASON_EMBEDDER_UNAVAILABLE",
            )
            assert "sk-test" not in err.message
        assert [c.name for c in await srv.store.list_collections()] == ["existing"]  # nothing else created
        assert await srv.store.count("existing", StoreFilter()) == 0


async def test_ambiguous_semantic_locate_is_refused(tmp_path: Path) -> None:
    async with running_server(tmp_path) as srv, grpc.aio.insecure_channel(srv.address) as ch:
        st = Stub(ch)
        a = await st.AddMemory(s.AddMemoryRequest(content="Dinner with Sam on Friday at 7 pm."))
        b = await st.AddMemory(s.AddMemoryRequest(content="The printer on floor 3 is out of toner."))
        # an explicit update may make two memories identical (it does not pass the write gate)
        await st.UpdateMemory(
            s.UpdateMemoryRequest(id=b.memory.id, content="Dinner with Sam on Friday at 7 pm.")
        )
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await st.UpdateMemory(
                s.UpdateMemoryRequest(
                    locate=s.SemanticLocator(content="Dinner with Sam on Friday at 7 pm."),
                    content="Moved to 8 pm.",
                )
            )
        err = rich(info.value)
        assert (err.code, err.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "ERROR_REASON_AMBIGUOUS_MATCH")
        assert set(err.metadata["candidates"].split(",")) == {a.memory.id, b.memory.id}


class SlowEmbedder:
    """The real local embedder, made slow: a call past its deadline must write nothing."""

    def __init__(self, inner: Any, delay: float) -> None:
        self.inner, self.delay = inner, delay

    @property
    def model_id(self) -> str:
        return str(self.inner.model_id)

    @property
    def dimension(self) -> int:
        return int(self.inner.dimension)

    async def embed_documents(self, texts: Sequence[str]) -> Vector:
        await asyncio.sleep(self.delay)
        return await self.inner.embed_documents(texts)  # type: ignore[no-any-return]

    async def embed_queries(self, texts: Sequence[str]) -> Vector:
        await asyncio.sleep(self.delay)
        return await self.inner.embed_queries(texts)  # type: ignore[no-any-return]

    async def close(self) -> None:
        await self.inner.close()


SLOW_WRITES = {
    "AddMemory": s.AddMemoryRequest(content="Too slow to make it."),
    "AddMemories": s.AddMemoriesRequest(
        memories=[s.NewMemory(content="Too slow to make it."), s.NewMemory(content="Nor this one.")]
    ),
}


@pytest.mark.parametrize("method", list(SLOW_WRITES))
async def test_call_past_its_deadline_writes_nothing(tmp_path: Path, method: str) -> None:
    from engram_server.adapters.embedding.local import LocalE5Embedder  # noqa: PLC0415

    embedder = SlowEmbedder(LocalE5Embedder(), delay=1.0)
    async with (
        running_server(tmp_path, embedder=embedder) as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        call = getattr(Stub(ch), method)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call(SLOW_WRITES[method], timeout=0.3)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        await asyncio.sleep(1.5)  # longer than the embedder takes: the abandoned call must not write
        assert await srv.store.list_collections() == []
        await call(SLOW_WRITES[method], timeout=30)  # given enough time, it writes
        written = len(SLOW_WRITES[method].memories) if method == "AddMemories" else 1
        assert await srv.store.count("default", StoreFilter()) == written


async def test_oversized_message_is_refused_and_the_server_keeps_serving(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path, max_message_bytes=1024 * 1024) as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        st = Stub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await st.AddMemory(s.AddMemoryRequest(content="x" * (2 * 1024 * 1024)))
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        with pytest.raises(grpc.aio.AioRpcError) as info:  # under the message limit, over the content bound
            await st.AddMemory(s.AddMemoryRequest(content="y" * 100_000))
        assert rich(info.value).violations.keys() == {"content"}
        ok = await st.AddMemory(s.AddMemoryRequest(content="Still serving."))
        assert ok.outcome == s.ADD_OUTCOME_CREATED
