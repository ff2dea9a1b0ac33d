"""What only the qdrant-client adapter has: connection errors, collection prefixes, specs in
collection metadata, and the local-mode path lock."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from qdrant_client import AsyncQdrantClient, models

from engram_server.adapters.storage.qdrant import QdrantStore
from engram_server.domain.errors import StorageUnavailable
from engram_server.domain.model import CollectionSpec, StoreFilter


def spec(name: str) -> CollectionSpec:
    return CollectionSpec(name=name, embedding_model="test/random", dimension=8, created_at=2.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("prefer_grpc", [False, True])
async def test_unreachable_server_is_storage_unavailable(prefer_grpc: bool) -> None:
    port = free_port()  # nothing listens there
    store = QdrantStore(f"http://127.0.0.1:{port}", prefer_grpc=prefer_grpc, timeout=2)
    with pytest.raises(StorageUnavailable, match=f"127.0.0.1:{port}"):
        await store.open()
    await store.close()


async def test_prefixes_share_one_qdrant_without_seeing_each_other(tmp_path: Path) -> None:
    # one local-mode directory can only be opened once, so share the client's storage via :memory:
    # semantics by opening two stores over the same path one after the other.
    path = f"path:{tmp_path}"
    a = QdrantStore(path, prefix="tenant_a_")
    await a.open()
    await a.create_collection(spec("default"))
    await a.close()
    b = QdrantStore(path, prefix="tenant_b_")
    await b.open()
    assert await b.list_collections() == []
    await b.create_collection(spec("default"))
    assert await b.count("default", StoreFilter()) == 0
    await b.close()
    a = QdrantStore(path, prefix="tenant_a_")
    await a.open()
    assert await a.list_collections() == [spec("default")]
    await a.close()


async def test_spec_lives_in_collection_metadata_and_foreign_collections_are_ignored(tmp_path: Path) -> None:
    client = AsyncQdrantClient(path=str(tmp_path))
    await client.create_collection(
        "not_engram", vectors_config=models.VectorParams(size=4, distance=models.Distance.DOT)
    )
    await client.close()

    store = QdrantStore(f"path:{tmp_path}")
    await store.open()
    await store.create_collection(spec("mine"))
    assert await store.list_collections() == [spec("mine")]
    assert await store.get_collection("not_engram") is None
    await store.close()

    client = AsyncQdrantClient(path=str(tmp_path))
    info = await client.get_collection("mine")
    assert info.config.metadata is not None
    assert info.config.metadata["engram"]["embedding_model"] == "test/random"
    await client.close()


async def test_local_path_held_by_another_store_is_storage_unavailable(tmp_path: Path) -> None:
    first = QdrantStore(f"path:{tmp_path}")
    await first.open()
    try:
        second = QdrantStore(f"path:{tmp_path}")
        with pytest.raises(StorageUnavailable):
            await second.open()
    finally:
        await first.close()
