"""Shared fixtures: a real Engram server in-process (port 0, embedded Qdrant, the real local
model) and a real gRPC channel to it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from hypothesis import settings

from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.app import EngramServer
from engram_server.domain.clock import ManualClock
from engram_server.testing import running_server
from tests.support.qdrant import QdrantNode, qdrant_binary, running_node

# Property tests check properties, not speed: no per-example deadline (the default 200 ms fails on a
# loaded machine while the property holds).
settings.register_profile("engram", deadline=None)
settings.load_profile("engram")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def server(tmp_path: Path, clock: ManualClock) -> AsyncIterator[EngramServer]:
    """A live server on the embedded defaults, with a manual clock."""
    async with running_server(tmp_path / "data", clock=clock) as srv:
        yield srv


@pytest.fixture
async def engram_server(tmp_path: Path) -> AsyncIterator[str]:
    """Address ("127.0.0.1:PORT") of a live server on the embedded defaults, system clock."""
    async with running_server(tmp_path / "engram-data") as srv:
        yield srv.address


@pytest.fixture
async def stub(server: EngramServer) -> AsyncIterator[memory_service_pb2_grpc.MemoryServiceStub]:
    async with grpc.aio.insecure_channel(server.address) as channel:
        yield memory_service_pb2_grpc.MemoryServiceStub(channel)


@pytest.fixture(scope="session")
def qdrant_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QdrantNode]:
    """One real Qdrant server node for the whole session, on free ports with its own storage
    (skips, saying why, where there is no binary: see tests/support/qdrant.py). Tests share it:
    each uses its own collection prefix."""
    binary, why = qdrant_binary()
    if binary is None:
        pytest.skip(why)
    with running_node(binary, tmp_path_factory.mktemp("qdrant-server")) as node:
        yield node
