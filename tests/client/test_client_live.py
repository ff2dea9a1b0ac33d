"""Round trips through the real server (in-process, port 0): add → search → update → delete with
both clients, and the typed errors the server's google.rpc.Status turns into."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from engram_client import (
    AddOutcome,
    AddResult,
    AsyncEngramClient,
    CollectionInTrashError,
    CollectionNotFoundError,
    EngramClient,
    InvalidArgumentError,
    LlmNotConfiguredError,
    MemoryFilter,
    MemoryNotFoundError,
    MemoryType,
    NewMemory,
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
        with pytest.raises(InvalidArgumentError) as empty:
            await engram.add("")
        [violation] = empty.value.field_violations
        assert violation.field == "content" and violation.description.startswith("must not be empty")
        said = f"{violation.field}: {violation.description}"
        assert str(empty.value).count(said) == 1, str(empty.value)  # said once, not repeated
        with pytest.raises(MemoryNotFoundError):
            await engram.delete("00000000-0000-4000-8000-000000000000")


async def test_every_other_method_async(engram_server: str) -> None:
    async with AsyncEngramClient(engram_server, timeout=60) as engram:
        for text, importance in (
            ("Paris is the capital of France.", 3),
            ("Lisbon hosts the team offsite.", 8),
        ):
            await engram.add(text, collection="geo", importance=importance, tags=["geo"])
        first = await engram.list_memories(collection="geo", page_size=1)
        assert len(first.memories) == 1 and first.next_page_token is not None
        second = await engram.list_memories(collection="geo", page_size=1, page_token=first.next_page_token)
        assert {m.content for m in first.memories + second.memories} == {
            "Paris is the capital of France.",
            "Lisbon hosts the team offsite.",
        }
        important = await engram.list_memories(collection="geo", filter=MemoryFilter(min_importance=5))
        assert [m.content for m in important.memories] == ["Lisbon hosts the team offsite."]

        preview = await engram.update(locate="Lisbon hosts the team offsite.", collection="geo", dry_run=True)
        assert preview.dry_run and preview.memory.content == "Lisbon hosts the team offsite."
        would = await engram.delete(
            query="Paris is the capital of France", collection="geo", threshold=0.85, dry_run=True
        )
        assert would.dry_run and [m.content for m in would.deleted] == ["Paris is the capital of France."]
        gone = await engram.delete(query="Paris is the capital of France.", collection="geo")
        assert [m.content for m in gone.deleted] == ["Paris is the capital of France."]
        assert gone.purge_at is not None and gone.deleted[0].trashed_at is not None
        trash = await engram.list_trash(collection="geo")
        assert [m.id for m in trash.memories] == [gone.deleted[0].id] and trash.next_page_token is None
        assert trash.memories[0].purge_at is not None
        back = await engram.restore(gone.deleted[0].id, collection="geo")
        assert back.memory.content == "Paris is the capital of France." and back.memory.trashed_at is None
        assert back.near_duplicates == ()
        await engram.delete(back.memory.id, collection="geo")
        assert await engram.purge_trash([back.memory.id], collection="geo") == 1
        assert (await engram.list_trash(collection="geo")).memories == ()

        dropped = await engram.delete_collection("geo")
        assert dropped.deleted_count == 1 and dropped.deleted_at is not None and not dropped.already_deleted
        assert dropped.purge_at is not None
        assert "geo" not in {c.name for c in await engram.list_collections()}
        [trashed] = await engram.list_trashed_collections()
        assert (trashed.name, trashed.memory_count) == ("geo", 1) and trashed.purge_at is not None
        restored = await engram.restore_collection("geo")
        assert restored.name == "geo" and restored.memory_count == 1
        await engram.delete_collection("geo")
        assert await engram.purge_trash(collection="geo", purge_collection=True) == 1
        assert await engram.list_trashed_collections() == []

        with pytest.raises(LlmNotConfiguredError) as reflection:  # this server has no LLM endpoint
            await engram.run_reflection(dry_run=True)
        assert reflection.value.code is grpc.StatusCode.FAILED_PRECONDITION


async def test_every_other_method_sync(engram_server: str) -> None:
    def scenario() -> None:
        with EngramClient(engram_server, timeout=60) as engram:
            added = engram.add("The team standup is at 9:30.", collection="sync", importance=6)
            other = engram.add("The cafeteria closes at 3 pm.", collection="sync", importance=2)
            page = engram.list_memories(collection="sync", page_size=1)
            assert len(page.memories) == 1 and page.next_page_token is not None
            ids = [m.id for m in engram.iter_memories(collection="sync", page_size=1)]
            assert sorted(ids) == sorted([added.memory.id, other.memory.id])
            got = engram.get(added.memory.id, collection="sync")
            assert got.memory.importance == 6 and got.history == ()
            counts = {c.name: c.memory_count for c in engram.list_collections()}
            assert counts["sync"] == 2
            would = engram.delete(query="The cafeteria closes at 3 pm", collection="sync", dry_run=True)
            assert would.dry_run and [m.id for m in would.deleted] == [other.memory.id]
            assert engram.delete_collection("sync").deleted_count == 2
            with pytest.raises(CollectionInTrashError):  # it is in the trash now
                engram.delete_collection("sync")
            assert [c.name for c in engram.list_trashed_collections()] == ["sync"]
            assert engram.restore_collection("sync").memory_count == 2
            engram.delete(other.memory.id, collection="sync")
            assert [m.id for m in engram.list_trash(collection="sync").memories] == [other.memory.id]
            assert engram.restore(other.memory.id, collection="sync").memory.id == other.memory.id
            assert engram.purge_trash(collection="sync") == 0
            with pytest.raises(CollectionNotFoundError):
                engram.restore_collection("sync")
            with pytest.raises(LlmNotConfiguredError):
                engram.run_reflection(collection="sync", dry_run=True)

    await asyncio.to_thread(scenario)


BATCH = [
    NewMemory(FACT, type="directive", importance=8, tags=["frank", "git"]),
    "The staging server is rebuilt every night at 02:00.",
    NewMemory(FACT.upper(), source_type="user_input"),  # a copy of the first item
]


def _check_batch(results: list[AddResult]) -> None:
    assert [r.outcome for r in results] == [AddOutcome.CREATED, AddOutcome.CREATED, AddOutcome.DUPLICATE]
    first = results[0].memory
    assert first.type is MemoryType.DIRECTIVE and first.importance == 8 and first.tags == ("frank", "git")
    assert results[1].memory.content == BATCH[1] and results[1].memory.type is MemoryType.EVENT
    assert results[2].memory.id == first.id and results[2].duplicate_of_index == 0
    assert results[2].duplicate_similarity == pytest.approx(1.0)
    assert len({r.request_id for r in results}) == 3


async def test_add_many_async(engram_server: str) -> None:
    async with AsyncEngramClient(engram_server, timeout=60) as engram:
        results = await engram.add_many(BATCH, collection="batch")
        _check_batch(results)
        # The same memories with the same keys: the first answers again.
        replay = await engram.add_many(
            [NewMemory(BATCH[1], request_id=results[1].request_id)], collection="batch"
        )
        assert replay[0].replayed and replay[0].memory.id == results[1].memory.id
        with pytest.raises(InvalidArgumentError) as err:
            await engram.add_many(["fine", NewMemory("", importance=99)], collection="batch")
        assert {v.field for v in err.value.field_violations} == {
            "memories[1].content",
            "memories[1].importance",
        }
        assert len((await engram.list_memories(collection="batch")).memories) == 2


async def test_add_many_sync(engram_server: str) -> None:
    def scenario() -> None:
        with EngramClient(engram_server, timeout=60) as engram:
            _check_batch(engram.add_many(BATCH, collection="batch-sync"))
            with pytest.raises(InvalidArgumentError) as err:
                engram.add_many([], collection="batch-sync")
            assert [v.field for v in err.value.field_violations] == ["memories"]

    await asyncio.to_thread(scenario)


async def test_extract_with_both_clients(engram_server: str) -> None:
    from datetime import UTC, datetime, timedelta  # noqa: PLC0415

    from engram_client import ConversationMessage, ToolObservation  # noqa: PLC0415

    when = datetime.now(UTC) - timedelta(days=2)
    async with AsyncEngramClient(engram_server, timeout=60) as engram:
        r = await engram.extract(
            messages=[
                ConversationMessage("user", "My name is Priya and I live in Pune.", when),
                ("assistant", "Hello Priya!"),
            ],
            collection="extract",
        )
        assert r.extractor == "rules" and not r.deduplicated and not r.dry_run
        [x] = r.memories
        assert x.type is MemoryType.IDENTITY and x.content == "User: My name is Priya and I live in Pune"
        assert x.created_at is not None and abs((x.created_at - when).total_seconds()) < 1
        assert x.result is not None and x.result.outcome is AddOutcome.CREATED
        with pytest.raises(ValueError, match="exactly one of text, messages or observation"):
            await engram.extract(text="a", observation=ToolObservation("Bash"))
        with pytest.raises(ValueError, match="mode must be one of"):
            await engram.extract(text="a", mode="llm")

    def scenario() -> None:
        with EngramClient(engram_server, timeout=60) as sync:
            obs = ToolObservation("Bash", '{"command": "make build"}', error="make: *** [build] Error 2")
            first = sync.extract(observation=obs, collection="extract")
            assert [m.content for m in first.memories] == [
                "Command `make build` failed: make: *** [build] Error 2"
            ]
            assert sync.extract(observation=obs, collection="extract").deduplicated
            preview = sync.extract(
                text="I prefer dark mode in every editor.", dry_run=True, collection="extract"
            )
            assert preview.dry_run and preview.memories[0].result is None
            with pytest.raises(InvalidArgumentError):
                sync.extract(text="   ", collection="extract")

    await asyncio.to_thread(scenario)
