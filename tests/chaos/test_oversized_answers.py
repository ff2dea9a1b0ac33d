"""Answers never exceed the message limit (issue 27, item 3), through a real gRPC channel to a live
in-process server (embedded qdrant-edge, the real local model).

Memories at the documented input limits (8,192 characters of content, 32 tags of 64 characters,
64 metadata values of 2,048 characters, tags and metadata in four-byte UTF-8 characters) take
≈ 560 kB each on
the wire. Before byte-sized answers, ``ListMemories(page_size=1000)`` and
``SearchMemories(limit=100)`` over a handful of them failed with RESOURCE_EXHAUSTED "Sent message
larger than max" on every attempt. Now a page ends early and its token continues exactly there,
a search keeps its best results that fit and says ``truncated``, and GetMemory's history does
the same."""

from __future__ import annotations

import random

import grpc
import pytest

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.app import EngramServer
from engram_server.testing import running_server

Stub = memory_service_pb2_grpc.MemoryServiceStub

#: Embedding memories of 8,192 characters is slow on a loaded 2-core machine: a wider bound.
pytestmark = pytest.mark.timeout(900)

#: grpc's default limit: the server's (ENGRAM_MAX_MESSAGE_BYTES default) and this channel's.
LIMIT = 4 * 1024 * 1024
#: Four UTF-8 bytes each.
WIDE = "😀𝔄𝔅𝔇𐍈"

WORDS = (
    "river",
    "mountain",
    "ledger",
    "violin",
    "copper",
    "harbor",
    "pepper",
    "tundra",
    "orbit",
    "lantern",
    "basil",
    "quartz",
    "meadow",
    "saddle",
    "glacier",
    "walnut",
    "comet",
    "anchor",
    "thimble",
    "canyon",
    "marble",
    "prairie",
    "falcon",
    "ember",
    "cobalt",
    "dune",
    "willow",
    "cipher",
    "tulip",
    "granite",
    "beacon",
    "oyster",
    "juniper",
    "velvet",
    "cactus",
    "summit",
)


def big_memory(rng: random.Random, n: int) -> s.NewMemory:
    """A memory at the documented limits, with content of its own (the write gate keeps it)."""
    words = rng.sample(WORDS, 12)  # a topic of its own, repeated to the longest content
    content = (f"Memory {n}: " + " ".join(rng.choice(words) for _ in range(2000)))[:8192]
    tags = [f"{n:02d}" + "".join(rng.choice(WIDE) for _ in range(62)) for _ in range(32)]
    metadata = {
        f"k{i:03d}{rng.choice(WIDE) * 120}": "".join(rng.choice(WIDE) for _ in range(2048)) for i in range(64)
    }
    return s.NewMemory(content=content, tags=tags, metadata=metadata, importance=5)


async def fill(stub: Stub, collection: str, count: int) -> set[str]:
    rng = random.Random(27)
    ids: set[str] = set()
    items = [big_memory(rng, n) for n in range(count)]
    for i in range(0, count, 4):  # 4 × ≈ 560 kB per request stays under the 4 MiB limit
        resp = await stub.AddMemories(s.AddMemoriesRequest(collection=collection, memories=items[i : i + 4]))
        for r in resp.results:
            assert r.outcome == s.ADD_OUTCOME_CREATED
            ids.add(r.memory.id)
    assert len(ids) == count
    return ids


@pytest.fixture
async def server(tmp_path) -> EngramServer:  # type: ignore[no-untyped-def]
    async with running_server(tmp_path / "data") as srv:
        yield srv


@pytest.fixture
async def stub(server: EngramServer) -> Stub:  # type: ignore[misc]
    async with grpc.aio.insecure_channel(server.address) as channel:  # the default 4 MiB receive limit
        yield memory_service_pb2_grpc.MemoryServiceStub(channel)


async def test_largest_memories_list_and_search_within_the_limit(stub: Stub) -> None:
    ids = await fill(stub, "big", 8)  # ≈ 4.6 MB: more than one message

    # ListMemories(page_size=1000): pages of what fits, continued by the token, each id once.
    seen: list[str] = []
    pages = 0
    token = ""
    while True:
        page = await stub.ListMemories(
            s.ListMemoriesRequest(collection="big", page_size=1000, page_token=token)
        )
        pages += 1
        assert page.ByteSize() <= LIMIT
        assert page.memories, "a page that continues always makes progress"
        for mem in page.memories:  # nothing is cut inside a memory
            assert len(mem.content) == 8192 and len(mem.tags) == 32 and len(mem.metadata) == 64
        seen.extend(mem.id for mem in page.memories)
        token = page.next_page_token
        if not token:
            break
    assert len(seen) == len(set(seen)) == 8
    assert set(seen) == ids
    assert pages >= 2

    # SearchMemories at the largest limit: the best results that fit, flagged.
    resp = await stub.SearchMemories(
        s.SearchMemoriesRequest(query="river mountain", collections=["big"], limit=100)
    )
    assert resp.ByteSize() <= LIMIT
    assert resp.truncated
    assert 1 <= len(resp.results) < 8
    finals = [r.score.final for r in resp.results]
    assert finals == sorted(finals, reverse=True)
    # The kept results are the head of the full ranking: a search that fits is not truncated and
    # ranks the same memories first.
    small = await stub.SearchMemories(
        s.SearchMemoriesRequest(query="river mountain", collections=["big"], limit=len(resp.results))
    )
    assert not small.truncated
    assert [r.memory.id for r in small.results] == [r.memory.id for r in resp.results]


async def test_history_of_a_large_memory_is_bounded(stub: Stub) -> None:
    rng = random.Random(7)
    first = big_memory(rng, 0)
    added = await stub.AddMemory(
        s.AddMemoryRequest(collection="hist", content=first.content, tags=first.tags, metadata=first.metadata)
    )
    mid = added.memory.id
    for n in range(1, 9):  # 8 updates: 8 history versions of ≈ 560 kB
        nxt = big_memory(rng, n)
        await stub.UpdateMemory(s.UpdateMemoryRequest(collection="hist", id=mid, content=nxt.content))
    resp = await stub.GetMemory(s.GetMemoryRequest(collection="hist", id=mid, include_history=True))
    assert resp.ByteSize() <= LIMIT
    assert resp.history_truncated
    assert 1 <= len(resp.history) < 8
    versions = [h.version for h in resp.history]
    assert versions == sorted(versions, reverse=True) and versions[0] == resp.memory.version - 1
    # Every version is still listed, page by page.
    listed: list[int] = []
    token = ""
    while True:
        page = await stub.ListMemories(
            s.ListMemoriesRequest(collection="hist", page_size=1000, page_token=token, include_history=True)
        )
        listed.extend(mm.version for mm in page.memories)
        token = page.next_page_token
        if not token:
            break
    assert sorted(listed) == list(range(1, 10))


async def test_small_answers_are_unchanged(stub: Stub) -> None:
    for text in ("I live in Berlin.", "My cat is called Miso.", "The tax deadline is April 15."):
        await stub.AddMemory(s.AddMemoryRequest(collection="small", content=text, type=m.MEMORY_TYPE_EVENT))
    page = await stub.ListMemories(s.ListMemoriesRequest(collection="small", page_size=2))
    assert len(page.memories) == 2 and page.next_page_token
    rest = await stub.ListMemories(
        s.ListMemoriesRequest(collection="small", page_size=2, page_token=page.next_page_token)
    )
    assert len(rest.memories) == 1 and not rest.next_page_token
    resp = await stub.SearchMemories(s.SearchMemoriesRequest(query="cat", collections=["small"], limit=100))
    assert len(resp.results) == 3 and not resp.truncated


async def test_batch_of_duplicates_of_large_memories_is_abridged(stub: Stub) -> None:
    """64 short items that each duplicate a 560 kB memory would answer 36 MB: the results that do
    not fit keep the memory's identity and say ``abridged``."""
    rng = random.Random(11)
    big = big_memory(rng, 0)
    first = await stub.AddMemory(
        s.AddMemoryRequest(
            collection="dups", content="I live in Berlin.", tags=big.tags, metadata=big.metadata
        )
    )
    resp = await stub.AddMemories(
        s.AddMemoriesRequest(
            collection="dups", memories=[s.NewMemory(content="I live in Berlin.") for _ in range(64)]
        )
    )
    assert resp.ByteSize() <= LIMIT
    assert len(resp.results) == 64
    assert all(r.outcome == s.ADD_OUTCOME_DUPLICATE and r.memory.id == first.memory.id for r in resp.results)
    whole = [r for r in resp.results if not r.abridged]
    assert whole and len(whole) < 64
    assert all(len(r.memory.metadata) == 64 and r.memory.content == "I live in Berlin." for r in whole)
    for r in resp.results:
        if r.abridged:
            assert not r.memory.content and not r.memory.metadata and r.memory.version == 1
