"""The client's view of answers sized to the message limit and of a full server disk."""

from __future__ import annotations

import grpc

from engram_client import ResourceExhaustedError, SearchResults, StorageFullError
from engram_client._convert import delete_result, get_result, search_results
from engram_client.errors import error_from_status
from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s

from .fake_engram import rich_status


def memory(n: int) -> m.Memory:
    return m.Memory(id=f"00000000-0000-4000-8000-{n:012d}", collection="c", content=f"memory {n}", version=1)


def test_search_results_say_when_truncated() -> None:
    results = search_results(
        s.SearchMemoriesResponse(results=[s.SearchResult(memory=memory(1))], truncated=True)
    )
    assert isinstance(results, SearchResults) and isinstance(results, list)
    assert results.truncated and len(results) == 1
    assert not search_results(s.SearchMemoriesResponse()).truncated


def test_delete_and_get_carry_the_counts() -> None:
    cut = delete_result(s.DeleteMemoryResponse(deleted=[memory(1)], deleted_count=5, truncated=True))
    assert cut.truncated and cut.deleted_count == 5 and len(cut.deleted) == 1
    whole = delete_result(s.DeleteMemoryResponse(deleted=[memory(1), memory(2)]))  # an older server
    assert not whole.truncated and whole.deleted_count == 2
    got = get_result(s.GetMemoryResponse(memory=memory(3), history=[memory(2)], history_truncated=True))
    assert got.history_truncated and len(got.history) == 1


def test_storage_full_is_its_own_error() -> None:
    status = rich_status(grpc.StatusCode.RESOURCE_EXHAUSTED, "disk full", reason="ERROR_REASON_STORAGE_FULL")
    err = error_from_status(grpc.StatusCode.RESOURCE_EXHAUSTED, status.message, status)
    assert isinstance(err, StorageFullError) and isinstance(err, ResourceExhaustedError)
