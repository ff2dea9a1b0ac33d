"""The embedded store's two ways of running a search's reads give the same answers.

A search's storage reads (its candidates, the winners' records) run on the event loop when the
store's io thread is idle (``EdgeEngine._read``), and queued on the io thread behind other work
otherwise. This runs one fixed corpus (several collections, the four memory types, sessions,
tags, importances, creation times spread over days) and one fixed set of searches (filters, time
windows, several collections, per-session caps, lexical and cross-collection queries, MMR) three
ways on one live server: one at a time with reads on the loop, all at once with every read forced
through the io thread's queue (concurrent reads run there in batches, ``_run_reads``), and all at
once as the store chooses (a mix, as under load). Ids,
order and every ScoreBreakdown field must be equal. Real server, real gRPC channel, the real local
model, a manual clock."""

# ruff: noqa: E501
from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.adapters.storage.edge import EdgeStore
from engram_server.app import EngramServer
from engram_server.domain.clock import ManualClock
from engram_server.testing import running_server
from tests.support.rpc import ts

Stub = memory_service_pb2_grpc.MemoryServiceStub
HOUR = 3600.0
T = m.MemoryType

# fmt: off
FACTS = [  # (collection, type, content, importance, tags)
    ("work", T.MEMORY_TYPE_IDENTITY, "My name is Ada Lovelace and I work as a data engineer in Lisbon.", 8, ["me"]),
    ("work", T.MEMORY_TYPE_DIRECTIVE, "Always answer in British English and keep replies short.", 7, ["style"]),
    ("work", T.MEMORY_TYPE_EVENT, "We moved the nightly ETL job from cron to Airflow on Tuesday.", 5, ["etl"]),
    ("work", T.MEMORY_TYPE_EVENT, "The Airflow DAG for billing failed twice because of a timezone bug.", 6, ["etl"]),
    ("work", T.MEMORY_TYPE_EVENT, "Fixed the billing DAG: timestamps are now stored in UTC.", 6, ["etl", "fix"]),
    ("work", T.MEMORY_TYPE_INSIGHT, "Ada prefers Postgres over MySQL for analytics workloads.", 4, ["db"]),
    ("work", T.MEMORY_TYPE_EVENT, "Meeting with Bruno about the Q3 data warehouse budget: 40k EUR approved.", 7, ["budget"]),
    ("work", T.MEMORY_TYPE_EVENT, "Bruno asked for a dashboard of weekly active users by country.", 5, ["dash"]),
    ("work", T.MEMORY_TYPE_INSIGHT, "Dashboards get read more when they are sent by email on Monday mornings.", 3, []),
    ("work", T.MEMORY_TYPE_EVENT, "The spare office key is in the drawer under the printer.", 2, ["office"]),
    ("home", T.MEMORY_TYPE_IDENTITY, "Ada has a cat called Pascal who is afraid of the vacuum cleaner.", 6, ["pets"]),
    ("home", T.MEMORY_TYPE_EVENT, "Pascal went to the vet on Friday for his vaccination.", 5, ["pets", "vet"]),
    ("home", T.MEMORY_TYPE_EVENT, "The vet said Pascal should lose some weight: less dry food.", 6, ["pets", "vet"]),
    ("home", T.MEMORY_TYPE_DIRECTIVE, "Remind me to water the plants every Sunday evening.", 5, ["plants"]),
    ("home", T.MEMORY_TYPE_EVENT, "Bought a new basil plant and a lemon tree at the market.", 3, ["plants"]),
    ("home", T.MEMORY_TYPE_EVENT, "The spare house key is under the blue flower pot by the door.", 4, ["keys"]),
    ("home", T.MEMORY_TYPE_INSIGHT, "Ada sleeps better when she stops using screens an hour before bed.", 4, []),
    ("home", T.MEMORY_TYPE_EVENT, "我们周六去了里斯本的海边，天气很好。", 4, ["trip"]),
    ("home", T.MEMORY_TYPE_EVENT, "Dinner with Marta at the Thai place; she recommended the green curry.", 3, ["food"]),
    ("home", T.MEMORY_TYPE_EVENT, "Marta's birthday is on the 14th of March; she likes jazz records.", 6, ["marta"]),
    ("default", T.MEMORY_TYPE_EVENT, "Booked flights to Porto for the 3rd of May, returning on the 7th.", 6, ["travel"]),
    ("default", T.MEMORY_TYPE_EVENT, "The hotel in Porto is near the Ribeira, check-in after 3 pm.", 5, ["travel"]),
    ("default", T.MEMORY_TYPE_INSIGHT, "Train tickets are cheaper when booked two weeks ahead.", 3, ["travel"]),
    ("default", T.MEMORY_TYPE_DIRECTIVE, "Use metric units in every answer.", 6, ["style"]),
    ("default", T.MEMORY_TYPE_EVENT, "Lost the car key at the gym; found it at the reception the next day.", 4, ["keys"]),
    ("default", T.MEMORY_TYPE_EVENT, "Paid the electricity bill: 87 EUR for February.", 3, ["bills"]),
]
# fmt: on


def _searches(t0: float) -> list[s.SearchMemoriesRequest]:
    Q = s.SearchMemoriesRequest
    F = m.MemoryFilter
    return [
        Q(query="where is the spare key?", limit=5),
        Q(query="where is the spare key?", limit=10, collections=["home", "work", "default"]),
        Q(query="what happened with the billing DAG", limit=5, collections=["work"]),
        Q(query="Pascal vet weight", limit=3, collections=["home"], filter=F(types=[T.MEMORY_TYPE_EVENT])),
        Q(query="travel plans", limit=10, filter=F(tags_any=["travel", "keys"])),
        Q(query="what did we do on the weekend", limit=10, collections=["home"],
          filter=F(created_after=ts(t0 + 20 * HOUR), created_before=ts(t0 + 60 * HOUR))),
        Q(query="budget and dashboards", limit=10, collections=["work"], filter=F(min_importance=5)),
        Q(query="events this week", limit=10, max_per_session=2, collections=["work", "home"]),
        Q(query="events this week", limit=4, max_per_session=1),
        Q(query="海边", limit=5, collections=["home"]),
        Q(query="how should answers be written", limit=5, filter=F(types=[T.MEMORY_TYPE_DIRECTIVE])),
        Q(query="Marta", limit=10, diversify=True, collections=["home", "default"]),
        Q(query="keys", limit=10, min_relevance=0.3, collections=["home", "work", "default"]),
        Q(query="who am I", limit=3, filter=F(session_ids=["s1", "s3"])),
    ]  # fmt: skip


def _answer(resp: s.SearchMemoriesResponse) -> list[tuple[Any, ...]]:
    return [
        (
            r.memory.id,
            r.memory.collection,
            r.memory.content,
            r.score.final,
            r.score.relevance,
            r.score.recency,
            r.score.importance,
            r.score.raw_similarity,
            r.score.lexical,
            r.score.episode,
        )
        for r in resp.results
    ]


@pytest.fixture
async def live(tmp_path: Path, clock: ManualClock) -> AsyncIterator[tuple[EngramServer, Stub, float]]:
    # Every search reads storage (no candidate cache, no nearest lists), and no access counter is
    # written between the runs (their reinforcement would change the later runs' scores).
    async with (
        running_server(tmp_path / "data", clock=clock, search_cache_entries=0, nearest_lists=0) as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        srv.service._note_access = lambda records, now: None  # type: ignore[method-assign]
        stub = Stub(ch)
        t0 = clock.now()
        for i, (collection, kind, content, importance, tags) in enumerate(FACTS):
            clock.advance(3 * HOUR if i % 4 else 11 * HOUR)
            await stub.AddMemory(
                s.AddMemoryRequest(
                    collection=collection,
                    content=content,
                    type=kind,
                    importance=importance,
                    tags=tags,
                    session_id=f"s{i % 4}" if kind == T.MEMORY_TYPE_EVENT else "",
                    allow_duplicate=True,
                )
            )
        clock.advance(5 * HOUR)
        yield srv, stub, t0


async def test_reads_on_the_loop_and_through_the_io_thread_rank_alike(
    live: tuple[EngramServer, Stub, float],
) -> None:
    server, stub, t0 = live
    store = server.store
    assert isinstance(store, EdgeStore)
    searches = _searches(t0)

    inline_reads = queued_reads = 0
    real_read = store._read

    release = threading.Event()  # (lets the io thread's busy job below end)

    async def counting_read(fn: Any) -> Any:
        nonlocal inline_reads, queued_reads
        if store._queued or store._busy.locked():
            queued_reads += 1
            release.set()
        else:
            inline_reads += 1
        return await real_read(fn)

    store._read = counting_read  # type: ignore[method-assign]
    one_by_one = [_answer(await stub.SearchMemories(q)) for q in searches]
    assert inline_reads > 0
    assert all(one_by_one[:3]) and any(len(a) > 3 for a in one_by_one)

    store._read = store._read_queued  # type: ignore[method-assign]  # every read queued on the io thread
    queued = [_answer(r) for r in await asyncio.gather(*(stub.SearchMemories(q) for q in searches * 3))]
    # As the store chooses, while the io thread is kept busy for a while (a read arriving then is
    # queued behind that work; the others run on the loop). The busy job lasts until a read was
    # queued behind it (not a fixed time: on a loaded machine the searches may reach their reads
    # only after any fixed time), and the searches' later reads find the thread idle.
    store._read = counting_read  # type: ignore[method-assign]
    release.clear()
    inline_reads, queued_reads, calls = 0, 0, [stub.SearchMemories(q) for q in searches * 3]
    busy = [store._submit(release.wait, 120.0)]
    mixed = [_answer(r) for r in await asyncio.gather(*calls)]
    await asyncio.gather(*(asyncio.wrap_future(b) for b in busy))
    assert inline_reads > 0 and queued_reads > 0

    for run in (queued, mixed):
        for i, got in enumerate(run):
            assert got == one_by_one[i % len(searches)], searches[i % len(searches)]
