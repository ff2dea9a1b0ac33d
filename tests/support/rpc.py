"""Helpers for tests that call a live server through the raw generated stub."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import grpc
import pytest
from google.protobuf import timestamp_pb2

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.testing import RichError, rich

Stub = memory_service_pb2_grpc.MemoryServiceStub


def ts(seconds: float) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=int(seconds))


async def fails(call: Awaitable[Any], code: grpc.StatusCode, reason: str) -> RichError:
    """Await ``call``, which must fail with ``code`` and the ErrorInfo ``reason``."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    err = rich(info.value)
    assert (err.code, err.reason) == (code, reason), err
    assert err.domain == "engram.v1"
    return err


async def add(stub: Stub, content: str, **kw: Any) -> s.AddMemoryResponse:
    resp: s.AddMemoryResponse = await stub.AddMemory(s.AddMemoryRequest(content=content, **kw))
    return resp


async def count(stub: Stub, collection: str = "", include_history: bool = False) -> int:
    page = await stub.ListMemories(
        s.ListMemoriesRequest(collection=collection, page_size=1000, include_history=include_history)
    )
    return len(page.memories)
