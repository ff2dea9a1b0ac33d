"""Deadline, metadata, retry with backoff (UNAVAILABLE only) and request_id reuse, against a scripted
grpc.aio MemoryService."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from engram_client import (
    AddOutcome,
    AsyncEngramClient,
    EngramClient,
    InvalidArgumentError,
    MemoryNotFoundError,
    MemoryType,
    NewMemory,
    ReflectionOutcome,
    RetryPolicy,
    StorageUnavailableError,
    UnavailableError,
    UnimplementedError,
)

from .fake_engram import UNAVAILABLE, ReflectingFake, Script, fake_server, rich_status

FAST = RetryPolicy(max_attempts=4, initial_backoff=0.01, max_backoff=0.05, jitter=0.0)
NOT_FOUND = rich_status(grpc.StatusCode.NOT_FOUND, "gone", reason="ERROR_REASON_MEMORY_NOT_FOUND")


async def test_add_retries_unavailable_twice_with_the_same_request_id() -> None:
    script = Script()
    script.fail("AddMemory", UNAVAILABLE, UNAVAILABLE)
    async with fake_server(script) as address, AsyncEngramClient(address, retry=FAST) as client:
        result = await client.add("hello", type="insight", importance=7, tags=["x"])
    attempts = script.attempts("AddMemory")
    assert len(attempts) == 3
    request_ids = {a.request.request_id for a in attempts}
    assert len(request_ids) == 1
    (request_id,) = request_ids
    assert len(request_id) == 36  # a uuid4
    assert result.request_id == request_id
    assert result.outcome is AddOutcome.CREATED and result.created
    assert attempts[0].request.type == 3 and attempts[0].request.importance == 7
    assert result.memory.type is MemoryType.EVENT  # what the fake answered
    assert result.near_duplicates[0].similarity == pytest.approx(0.8)


async def test_add_many_retries_with_the_same_request_id_per_item() -> None:
    script = Script()
    script.fail("AddMemories", UNAVAILABLE)
    async with fake_server(script) as address, AsyncEngramClient(address, retry=FAST) as client:
        results = await client.add_many(
            ["hello", NewMemory("hello again", type="insight", importance=7, tags=["x"], request_id="mine")],
            collection="imports",
        )
    attempts = script.attempts("AddMemories")
    assert len(attempts) == 2
    first, second = (a.request for a in attempts)
    assert first == second  # the retry is the same request, keys included
    assert first.collection == "imports" and [x.content for x in first.memories] == ["hello", "hello again"]
    assert len(first.memories[0].request_id) == 36 and first.memories[1].request_id == "mine"
    assert first.memories[1].type == 3 and first.memories[1].importance == 7
    assert not first.memories[0].HasField("importance")
    assert [r.request_id for r in results] == [first.memories[0].request_id, "mine"]
    assert results[0].created and results[0].duplicate_of_index is None
    assert results[1].outcome is AddOutcome.DUPLICATE and results[1].duplicate_of_index == 0
    assert results[1].duplicate_similarity == pytest.approx(1.0)


def test_add_many_refuses_a_string_for_the_list() -> None:
    with EngramClient("127.0.0.1:1") as client, pytest.raises(TypeError):
        client.add_many("not a list")  # type: ignore[arg-type]


def test_sync_client_retries_and_reuses_request_id() -> None:
    script = Script()
    script.fail("AddMemory", UNAVAILABLE, UNAVAILABLE)

    async def serve_and_call() -> str:
        async with fake_server(script) as address:

            def call() -> str:
                with EngramClient(address, retry=FAST) as client:
                    return client.add("hello", request_id="my-key").request_id

            return await asyncio.to_thread(call)

    assert asyncio.run(serve_and_call()) == "my-key"
    assert [a.request.request_id for a in script.attempts("AddMemory")] == ["my-key"] * 3


async def test_each_call_gets_a_fresh_request_id() -> None:
    script = Script()
    async with fake_server(script) as address, AsyncEngramClient(address) as client:
        first = await client.add("a")
        second = await client.add("a")
    assert first.request_id != second.request_id


async def test_gives_up_after_max_attempts() -> None:
    script = Script()
    script.fail("SearchMemories", *[UNAVAILABLE] * 5)
    async with fake_server(script) as address, AsyncEngramClient(address, retry=FAST) as client:
        with pytest.raises(StorageUnavailableError):
            await client.search("q")
    assert len(script.attempts("SearchMemories")) == 4


async def test_other_failures_are_not_retried() -> None:
    script = Script()
    script.fail(
        "AddMemory",
        rich_status(grpc.StatusCode.INVALID_ARGUMENT, "bad", reason="ERROR_REASON_INVALID_ARGUMENT"),
    )
    async with fake_server(script) as address, AsyncEngramClient(address, retry=FAST) as client:
        with pytest.raises(InvalidArgumentError):
            await client.add("x", importance=42)
    assert len(script.attempts("AddMemory")) == 1


async def test_backoff_grows_between_attempts() -> None:
    script = Script()
    script.fail("GetMemory", UNAVAILABLE, UNAVAILABLE)
    policy = RetryPolicy(max_attempts=3, initial_backoff=0.1, multiplier=2.0, jitter=0.0)
    async with fake_server(script) as address, AsyncEngramClient(address, retry=policy) as client:
        start = time.monotonic()
        await client.get("m-1")
        elapsed = time.monotonic() - start
    assert elapsed >= 0.1 + 0.2
    assert len(script.attempts("GetMemory")) == 3


async def test_retries_stop_at_the_deadline() -> None:
    script = Script()
    script.fail("GetMemory", *[UNAVAILABLE] * 10)
    policy = RetryPolicy(max_attempts=10, initial_backoff=1.0, multiplier=1.0, jitter=0.0)
    async with fake_server(script) as address, AsyncEngramClient(address, retry=policy) as client:
        start = time.monotonic()
        with pytest.raises(UnavailableError):
            await client.get("m-1", timeout=2.5)
        elapsed = time.monotonic() - start
    # Gave up at the deadline instead of waiting for a fourth attempt at 3 s (the bound leaves a loaded
    # machine room for the last attempt's own time).
    assert elapsed < 3.0
    # At 0, 1 and 2 s (a wait to 3 s would pass the deadline); on a loaded machine slow attempts
    # may leave room for two only. Ten would be the policy's bound without a deadline.
    assert 2 <= len(script.attempts("GetMemory")) <= 3


async def test_retry_after_from_the_server_lengthens_the_wait() -> None:
    script = Script()
    script.fail(
        "ListCollections",
        rich_status(
            grpc.StatusCode.UNAVAILABLE,
            "storage is restarting",
            reason="ERROR_REASON_STORAGE_UNAVAILABLE",
            retry_after_seconds=0.3,
        ),
    )
    async with fake_server(script) as address, AsyncEngramClient(address, retry=FAST) as client:
        start = time.monotonic()
        collections = await client.list_collections()
        assert time.monotonic() - start >= 0.3
    assert [c.name for c in collections] == ["default"]


async def test_metadata_api_key_and_deadline_reach_the_server() -> None:
    script = Script()
    async with (
        fake_server(script) as address,
        AsyncEngramClient(address, api_key="sekret", timeout=7.0, metadata=[("x-tenant", "t1")]) as client,
    ):
        await client.search("q", collections=["a", "b"], limit=3)
        await client.search("q", timeout=2.0)
    first, second = script.attempts("SearchMemories")
    assert first.metadata["authorization"] == "Bearer sekret"
    assert first.metadata["x-tenant"] == "t1"
    assert first.metadata["user-agent"].startswith("engram-client-python/")
    assert first.time_remaining is not None and 6.0 < first.time_remaining <= 7.1
    assert second.time_remaining is not None and 1.0 < second.time_remaining <= 2.1
    assert list(first.request.collections) == ["a", "b"] and first.request.limit == 3


def test_sync_metadata_from_environment() -> None:
    script = Script()

    async def serve_and_call() -> None:
        async with fake_server(script) as address:
            env = {"ENGRAM_ADDR": address, "ENGRAM_API_KEY": "from-env", "ENGRAM_TIMEOUT": "3"}

            def call() -> None:
                with EngramClient(env=env) as client:
                    client.get("m-1")

            await asyncio.to_thread(call)

    asyncio.run(serve_and_call())
    (attempt,) = script.attempts("GetMemory")
    assert attempt.metadata["authorization"] == "Bearer from-env"
    assert attempt.time_remaining is not None and 2.0 < attempt.time_remaining <= 3.1


async def test_delete_by_id_not_found_after_a_lost_attempt_is_already_deleted() -> None:
    script = Script()
    script.fail("DeleteMemory", UNAVAILABLE, NOT_FOUND)
    async with fake_server(script) as address, AsyncEngramClient(address, retry=FAST) as client:
        result = await client.delete("m-1")
    assert result.already_deleted and result.deleted == () and not result.dry_run
    assert len(script.attempts("DeleteMemory")) == 2


async def test_delete_by_id_not_found_on_first_attempt_is_raised() -> None:
    script = Script()
    script.fail("DeleteMemory", NOT_FOUND)
    async with fake_server(script) as address, AsyncEngramClient(address, retry=FAST) as client:
        with pytest.raises(MemoryNotFoundError):
            await client.delete("m-1")


async def test_delete_by_query_is_not_retried_but_its_dry_run_is() -> None:
    script = Script()
    script.fail("DeleteMemory", UNAVAILABLE, UNAVAILABLE)
    async with fake_server(script) as address, AsyncEngramClient(address, retry=FAST) as client:
        with pytest.raises(UnavailableError):
            await client.delete(query="old news", threshold=0.9, limit=2)
        assert len(script.attempts("DeleteMemory")) == 1
        result = await client.delete(query="old news", dry_run=True)
    assert len(script.attempts("DeleteMemory")) == 3
    assert [m.id for m in result.deleted] == ["m-1"]


async def test_connection_refused_is_retried_then_raised() -> None:
    policy = RetryPolicy(max_attempts=2, initial_backoff=0.01, jitter=0.0)
    async with AsyncEngramClient("127.0.0.1:1", retry=policy, timeout=2.0) as client:
        with pytest.raises(UnavailableError) as info:
            await client.list_collections()
    assert info.value.reason is None


async def test_reflection_on_a_server_without_the_rpc_is_a_clear_error() -> None:
    script = Script()  # the plain fake has no RunReflection: gRPC answers UNIMPLEMENTED
    async with fake_server(script) as address, AsyncEngramClient(address) as client:
        with pytest.raises(UnimplementedError, match="reflection is not available on this server") as info:
            await client.run_reflection()
    assert info.value.code is grpc.StatusCode.UNIMPLEMENTED
    assert isinstance(info.value.__cause__, UnimplementedError)


async def test_reflection_result_is_typed_and_only_a_dry_run_is_retried() -> None:
    script = Script()
    script.fail("RunReflection", UNAVAILABLE, UNAVAILABLE)
    async with (
        fake_server(script, ReflectingFake) as address,
        AsyncEngramClient(address, retry=FAST) as client,
    ):
        with pytest.raises(UnavailableError):
            await client.run_reflection(collection="work", force=True)
        result = await client.run_reflection(collection="work", dry_run=True)
    first, second, third = script.attempts("RunReflection")
    assert (first.request.collection, first.request.force, first.request.dry_run) == ("work", True, False)
    assert second.request.dry_run and third.request.dry_run
    assert result.outcome is ReflectionOutcome.COMPLETED and result.throttled_by is None
    assert [m.id for m in result.sources] == ["m-1", "m-2"]
    (insight,) = result.insights
    assert insight.type is MemoryType.INSIGHT and insight.derived_from == ("m-1", "m-2")
    assert result.duplicates[0].similarity == pytest.approx(0.95)
    assert (result.reflection_collection, result.model, result.unreflected_importance) == (
        "default_reflection",
        "gpt-4o-mini",
        44,
    )
