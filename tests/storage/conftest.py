"""The Store under test: every behaviour test runs once per adapter."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from engram_server.adapters.storage.edge import EdgeStore
from engram_server.adapters.storage.qdrant import QdrantStore
from engram_server.ports import Store


def make_store(backend: str, data_dir: Path) -> Store:
    if backend == "edge":
        return EdgeStore(data_dir / "edge")
    if backend == "qdrant-memory":
        return QdrantStore(":memory:")
    if backend == "qdrant-path":
        return QdrantStore(f"path:{data_dir / 'qdrant'}")
    raise ValueError(backend)


@pytest.fixture(params=["edge", "qdrant-memory", "qdrant-path"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def new_store(backend: str, tmp_path: Path) -> Callable[[], Store]:
    """A fresh (unopened) store on this test's data dir; call again to reopen the same data."""
    return lambda: make_store(backend, tmp_path)


@pytest.fixture
async def store(new_store: Callable[[], Store]) -> AsyncIterator[Store]:
    s = new_store()
    await s.open()
    try:
        yield s
    finally:
        await s.close()
