"""The client against the real server when things go wrong: every typed exception the live server
can produce, retries counted at the client (UNAVAILABLE retried, INVALID_ARGUMENT and NOT_FOUND
not), writes whose answer is lost made safe by the retry, and servers that are not there (nothing
listening: UnavailableError; a peer that never answers: DeadlineExceededError) failing within the
deadline instead of hanging."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram_client import (
    AddOutcome,
    AlreadyExistsError,
    AmbiguousMatchError,
    AsyncEngramClient,
    CollectionNotFoundError,
    DeadlineExceededError,
    EmbedderUnavailableError,
    EmbeddingMismatchError,
    EngramClient,
    FailedPreconditionError,
    IdempotencyConflictError,
    InvalidArgumentError,
    MemoryNotFoundError,
    MemorySupersededError,
    NoMatchError,
    NotFoundError,
    RetryPolicy,
    StorageUnavailableError,
    UnavailableError,
)
from engram_server.adapters.embedding.openai import OpenAIEmbedder
from engram_server.adapters.storage.edge import EdgeStore
from engram_server.app import EngramServer
from engram_server.domain.errors import StorageUnavailable
from engram_server.domain.model import CollectionSpec, ScoredPoint, StoredPoint
from engram_server.testing import running_server

FAST = RetryPolicy(max_attempts=4, initial_backoff=0.01, max_backoff=0.05, jitter=0.0)


class LossyStore(EdgeStore):
    """The real embedded store, except that the next ``lose_upserts`` writes and ``lose_deletes``
    deletes land and then report an outage (the answer is lost, not the work), and that searches
    fail while ``down`` (an outage before anything is written)."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.lose_upserts = 0
        self.lose_deletes = 0
        self.down = False

    async def search(self, *args: Any, **kwargs: Any) -> list[ScoredPoint]:
        if self.down:
            raise StorageUnavailable("storage unreachable (simulated)")
        return await super().search(*args, **kwargs)

    async def search_batch(self, *args: Any, **kwargs: Any) -> list[list[ScoredPoint]]:
        if self.down:
            raise StorageUnavailable("storage unreachable (simulated)")
        return await super().search_batch(*args, **kwargs)

    async def upsert(self, collection: str, points: Sequence[StoredPoint]) -> None:
        await super().upsert(collection, points)
        if self.lose_upserts:
            self.lose_upserts -= 1
            raise StorageUnavailable("storage connection dropped after the write (simulated)")

    async def delete(self, collection: str, ids: Sequence[str]) -> None:
        await super().delete(collection, ids)
        if self.lose_deletes:
            self.lose_deletes -= 1
            raise StorageUnavailable("storage connection dropped after the delete (simulated)")

    async def set_fields(self, collection: str, updates: Mapping[str, Mapping[str, Any]]) -> None:
        """A delete moves memories to the trash: a write of ``trashed_at``."""
        await super().set_fields(collection, updates)
        trashing = any(u.get("trashed_at") is not None for u in updates.values())
        if trashing and self.lose_deletes:
            self.lose_deletes -= 1
            raise StorageUnavailable("storage connection dropped after the delete (simulated)")


class CountingCall:
    """Stands in for one method of a client's stub and counts the attempts the client makes."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.attempts = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.attempts += 1
        return self.inner(*args, **kwargs)


def count(client: AsyncEngramClient | EngramClient, method: str) -> CountingCall:
    counter = CountingCall(getattr(client.stub, method))
    setattr(client.stub, method, counter)
    return counter


@pytest.fixture
async def lossy(tmp_path: Path) -> AsyncIterator[tuple[EngramServer, LossyStore]]:
    store = LossyStore(tmp_path / "data")
    async with running_server(tmp_path, store=store) as srv:
        yield srv, store


async def test_every_reason_the_live_server_sends_becomes_its_class(
    lossy: tuple[EngramServer, LossyStore],
) -> None:
    srv, _ = lossy
    async with AsyncEngramClient(srv.address, timeout=60, retry=FAST) as engram:
        dinner = await engram.add("Dinner with Sam on Friday at 7 pm.")
        printer = await engram.add("The printer on floor 3 is out of toner.")

        with pytest.raises(CollectionNotFoundError) as missing:
            await engram.delete_collection("never-created")
        assert isinstance(missing.value, NotFoundError) and missing.value.code is grpc.StatusCode.NOT_FOUND
        assert missing.value.metadata == {"collection": "never-created"}

        with pytest.raises(NoMatchError) as nomatch:
            await engram.update(locate="Quarterly tax filing for the Lisbon office", content="x")
        assert nomatch.value.reason == "ERROR_REASON_NO_MATCH" and nomatch.value.domain == "engram.v1"

        await engram.add("Sam is vegetarian.", request_id="req-1")
        with pytest.raises(IdempotencyConflictError) as conflict:
            await engram.add("Sam is vegan.", request_id="req-1")
        assert isinstance(conflict.value, AlreadyExistsError)
        assert conflict.value.code is grpc.StatusCode.ALREADY_EXISTS
        assert conflict.value.metadata["request_id"] == "req-1"

        moved = await engram.update(printer.memory.id, content="The printer on floor 3 was refilled.")
        old_id = (await engram.get(printer.memory.id, include_history=True)).history[0].id
        assert moved.changed and old_id != printer.memory.id
        with pytest.raises(MemorySupersededError) as superseded:
            await engram.update(old_id, importance=9)
        assert isinstance(superseded.value, FailedPreconditionError)
        assert superseded.value.superseded_by == printer.memory.id

        # An update by id may make two memories identical (it does not pass the write gate).
        await engram.update(printer.memory.id, content=dinner.memory.content)
        with pytest.raises(AmbiguousMatchError) as ambiguous:
            await engram.update(locate=dinner.memory.content, content="Moved to 8 pm.")
        assert set(ambiguous.value.metadata["candidates"].split(",")) == {
            dinner.memory.id,
            printer.memory.id,
        }

        await srv.store.create_collection(CollectionSpec("legacy", "another-model", 8, 0.0))
        with pytest.raises(EmbeddingMismatchError) as mismatch:
            await engram.search("anything", collections="legacy")
        assert mismatch.value.code is grpc.StatusCode.FAILED_PRECONDITION
        assert mismatch.value.metadata["collection_model"] == "another-model"

        with pytest.raises(InvalidArgumentError) as bad:
            await engram.search("x", limit=-1)
        assert bad.value.field_violations and bad.value.field_violations[0].field == "limit"


async def test_only_unavailable_is_retried_against_the_live_server(
    lossy: tuple[EngramServer, LossyStore],
) -> None:
    srv, store = lossy
    async with AsyncEngramClient(srv.address, timeout=60, retry=FAST) as engram:
        adds = count(engram, "AddMemory")
        with pytest.raises(InvalidArgumentError):
            await engram.add("importance out of range", importance=11)
        assert adds.attempts == 1

        gets = count(engram, "GetMemory")
        with pytest.raises(MemoryNotFoundError):
            await engram.get("00000000-0000-4000-8000-000000000000")
        assert gets.attempts == 1

        # The write lands, its answer is lost: retried with the same request_id, the second attempt
        # is answered with the first write (replayed), not a second memory or a DUPLICATE.
        store.lose_upserts = 1
        added = await engram.add("The VPN certificate expires on June 30.", type="event", importance=6)
        assert adds.attempts == 1 + 2 and store.lose_upserts == 0
        assert added.outcome is AddOutcome.CREATED and added.replayed
        assert [m.content for m in (await engram.list_memories()).memories] == [
            "The VPN certificate expires on June 30."
        ]

        # An update whose answer is lost: the retry re-applies the same change and writes nothing.
        updates = count(engram, "UpdateMemory")
        store.lose_upserts = 1
        updated = await engram.update(added.memory.id, content="The VPN certificate expires on July 31.")
        assert updates.attempts == 2 and not updated.changed
        got = await engram.get(added.memory.id, include_history=True)
        assert got.memory.content == "The VPN certificate expires on July 31." and len(got.history) == 1

        # A delete whose answer is lost: the retry finds it gone and says so instead of NOT_FOUND.
        deletes = count(engram, "DeleteMemory")
        store.lose_deletes = 1
        deleted = await engram.delete(added.memory.id)
        assert deletes.attempts == 2 and deleted.already_deleted and deleted.deleted == ()
        with pytest.raises(MemoryNotFoundError):
            await engram.get(added.memory.id)

        # A longer outage: out of attempts, the typed error of the last one; nothing was written.
        store.down = True
        with pytest.raises(StorageUnavailableError) as down:
            await engram.add("Written during a long outage.")
        assert adds.attempts == 1 + 2 + FAST.max_attempts and "simulated" in down.value.message
        store.down = False
        assert (await engram.list_memories()).memories == ()


async def test_embedder_down_is_retried_then_raised(tmp_path: Path) -> None:
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
        AsyncEngramClient(srv.address, timeout=30, retry=FAST) as engram,
    ):
        searches = count(engram, "SearchMemories")
        with pytest.raises(EmbedderUnavailableError) as info:
            await engram.add("Cannot be embedded right now.")
        assert isinstance(info.value, UnavailableError) and info.value.code is grpc.StatusCode.UNAVAILABLE
        await srv.store.create_collection(CollectionSpec("existing", embedder.model_id, 8, 0.0))
        with pytest.raises(EmbedderUnavailableError):
            await engram.search("anything", collections="existing")
        assert searches.attempts == FAST.max_attempts


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again: nothing listens there


@contextlib.contextmanager
def silent_peer() -> Iterator[str]:
    """A TCP port that accepts connections (the kernel does, from the backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


async def test_nothing_listening_fails_fast_with_unavailable() -> None:
    address = f"127.0.0.1:{_dead_port()}"
    # Fails fast: well before the (long) deadline, whatever the machine's load.
    async with AsyncEngramClient(address, timeout=120) as engram:  # the default retry policy
        start = time.monotonic()
        with pytest.raises(UnavailableError) as info:
            await engram.add("Nobody will store this.")
        elapsed = time.monotonic() - start
    assert type(info.value) is UnavailableError and info.value.reason is None
    assert info.value.code is grpc.StatusCode.UNAVAILABLE and info.value.message
    assert elapsed < 60

    def sync_call() -> tuple[UnavailableError, float]:
        with EngramClient(address, timeout=120) as engram:
            start = time.monotonic()
            with pytest.raises(UnavailableError) as info:
                engram.search("anything")
            return info.value, time.monotonic() - start

    error, elapsed = await asyncio.to_thread(sync_call)
    assert error.reason is None and elapsed < 60


async def test_a_peer_that_never_answers_hits_the_deadline() -> None:
    with silent_peer() as address:
        async with AsyncEngramClient(address, timeout=1.0) as engram:
            start = time.monotonic()
            with pytest.raises(DeadlineExceededError) as info:
                await engram.list_collections()
            elapsed = time.monotonic() - start
        assert info.value.code is grpc.StatusCode.DEADLINE_EXCEEDED
        # The deadline (not before it), not a hang; generous above it for a loaded machine.
        assert 0.9 <= elapsed < 30.0

        def sync_call() -> float:
            with EngramClient(address) as engram:
                start = time.monotonic()
                with pytest.raises(DeadlineExceededError):
                    engram.get("m-1", timeout=0.5)  # the per-call deadline wins over the default 10 s
                return time.monotonic() - start

        assert 0.4 <= await asyncio.to_thread(sync_call) < 2.5
