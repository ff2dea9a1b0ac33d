"""The Store under test: every behaviour test runs once per adapter.

``qdrant-server`` is a real Qdrant server (the session's ``qdrant_server``, see ``tests/conftest.py``);
each test gets its own collection prefix on it, so its collections are fresh. Where no server binary
is found, those tests skip with the reason.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from engram_server.adapters.storage.edge import EdgeStore
from engram_server.adapters.storage.qdrant import QdrantStore
from engram_server.ports import Store
from tests.support.qdrant import QdrantNode


def make_store(backend: str, data_dir: Path, server: QdrantNode | None = None, prefix: str = "") -> Store:
    if backend == "edge":
        return EdgeStore(data_dir / "edge")
    if backend == "qdrant-memory":
        return QdrantStore(":memory:")
    if backend == "qdrant-path":
        return QdrantStore(f"path:{data_dir / 'qdrant'}")
    if backend == "qdrant-server" and server is not None:
        return QdrantStore(server.url, grpc_port=server.grpc_port, prefix=prefix)
    raise ValueError(backend)


@pytest.fixture(params=["edge", "qdrant-memory", "qdrant-path", "qdrant-server"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def new_store(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[], Store]:
    """A fresh (unopened) store on this test's data dir; call again to reopen the same data."""
    if backend != "qdrant-server":
        return lambda: make_store(backend, tmp_path)
    node: QdrantNode = request.getfixturevalue("qdrant_server")
    prefix = f"t{uuid.uuid4().hex[:12]}_"  # this test's own collections on the shared server
    return lambda: make_store(backend, tmp_path, node, prefix)


@pytest.fixture
async def store(new_store: Callable[[], Store]) -> AsyncIterator[Store]:
    s = new_store()
    await s.open()
    try:
        yield s
    finally:
        await s.close()
