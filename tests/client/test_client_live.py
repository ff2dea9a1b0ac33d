"""Round trips through the real server (in-process, port 0): add → search → update → delete with
both clients, and the typed errors the server's google.rpc.Status turns into."""

from __future__ import annotations

import asyncio

import pytest

from engram_client import (
    AddOutcome,
    AsyncEngramClient,
    EngramClient,
    InvalidArgumentError,
    MemoryFilter,
    MemoryNotFoundError,
    MemoryType,
    ProtectedMemoryError,
    ThresholdTooLowError,
)

FACT = "Frank prefers concise commit messages, imperative mood, no emoji."


async def test_async_round_trip(engram_server: str) -> None:
    async with AsyncEngramClient(engram_server, timeout=60) as engram:
        added = await engram.add(FACT, type="insight", importance=7, tags=["frank", "git"], collection="work")
        assert added.outcome is AddOutcome.CREATED and not added.replayed
        memory = added.memory
        assert memory.type is MemoryType.INSIGHT and memory.importance == 7 and memory.collection == "work"
        assert memory.created_at.tzinfo is not None and memory.version == 1

        again = await engram.add(FACT, type="insight", importance=7, tags=["frank", "git"], collection="work")
        assert again.outcome is AddOutcome.DUPLICATE and again.memory.id == memory.id
        assert again.duplicate_similarity is not None and again.duplicate_similarity > 0.92

        replay = await engram.add(
            FACT,
            type="insight",
            importance=7,
            tags=["frank", "git"],
            collection="work",
            request_id=added.request_id,
        )
        assert replay.replayed and replay.memory.id == memory.id

        hits = await engram.search("how does Frank like commit messages", collections="work", limit=3)
        assert hits and hits[0].memory.id == memory.id
        assert hits[0].score.final > 0 and 0 <= hits[0].score.relevance <= 1
        assert (
            await engram.search(
                "commit messages", collections="work", filter=MemoryFilter(types=[MemoryType.EVENT])
            )
            == []
        )

        updated = await engram.update(
            memory.id, collection="work", content="Frank wants one-line commit messages."
        )
        assert updated.changed and updated.memory.id == memory.id and updated.memory.version == 2
        assert updated.previous is not None and updated.previous.content == FACT
        unchanged = await engram.update(
            memory.id, collection="work", content="Frank wants one-line commit messages."
        )
        assert not unchanged.changed

        got = await engram.get(memory.id, collection="work", include_history=True)
        assert got.memory.content == "Frank wants one-line commit messages." and len(got.history) == 1
        listed = [m.id async for m in engram.iter_memories(collection="work", page_size=1)]
        assert listed == [memory.id]
        assert "work" in {c.name for c in await engram.list_collections()}

        deleted = await engram.delete(memory.id, collection="work")
        assert [m.id for m in deleted.deleted] == [memory.id] and not deleted.already_deleted
        with pytest.raises(MemoryNotFoundError):
            await engram.get(memory.id, collection="work")


async def test_sync_round_trip(engram_server: str) -> None:
    def scenario() -> None:
        with EngramClient(engram_server, timeout=60) as engram:
            added = engram.add(FACT, type="directive", importance=8, tags=["frank"])
            hits = engram.search("how does Frank like commit messages", limit=3)
            assert hits[0].memory.id == added.memory.id
            updated = engram.update(locate=FACT, content="Frank wants one-line commit messages.")
            assert updated.changed and updated.similarity is not None and updated.similarity >= 0.85
            with pytest.raises(ProtectedMemoryError) as info:
                engram.delete(added.memory.id)
            assert info.value.reason == "ERROR_REASON_PROTECTED_MEMORY"
            assert engram.get(added.memory.id).memory.version == 2  # nothing was deleted
            deleted = engram.delete(added.memory.id, force=True)
            assert [m.id for m in deleted.deleted] == [added.memory.id]

    await asyncio.to_thread(scenario)


async def test_typed_errors_from_the_server(engram_server: str) -> None:
    async with AsyncEngramClient(engram_server, timeout=60) as engram:
        await engram.add("The staging database lives in eu-west-1.", importance=4)
        with pytest.raises(ThresholdTooLowError) as low:
            await engram.update(locate="staging database region", threshold=0.5, content="x")
        assert low.value.min_threshold == pytest.approx(0.85)
        with pytest.raises(InvalidArgumentError) as bad:
            await engram.add("importance out of range", importance=11)
        assert type(bad.value) is InvalidArgumentError
        assert [v.field for v in bad.value.field_violations] == ["importance"]
        with pytest.raises(MemoryNotFoundError):
            await engram.delete("00000000-0000-4000-8000-000000000000")
