"""Sessions and agents on memories, the per-session search cap, the context pack (GetContext),
triggers (GetTriggers) and slots, through a live server (real model, embedded store, real gRPC)."""

from __future__ import annotations

import grpc

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.adapters.tokenizer import E5_TOKENIZER_NAME, E5Tokenizer
from engram_server.app import EngramServer
from engram_server.domain.clock import ManualClock
from tests.support.rpc import add, fails, ts

Stub = memory_service_pb2_grpc.MemoryServiceStub
HOUR = 3600.0
BAD = "ERROR_REASON_INVALID_ARGUMENT"
SECTIONS = [
    s.CONTEXT_SECTION_KIND_CORE,
    s.CONTEXT_SECTION_KIND_TRIGGERS,
    s.CONTEXT_SECTION_KIND_OPEN_ITEMS,
    s.CONTEXT_SECTION_KIND_RELEVANT,
    s.CONTEXT_SECTION_KIND_RECENT,
    s.CONTEXT_SECTION_KIND_TOPICS,
]


def section(pack: s.GetContextResponse, kind: int) -> s.ContextSection:
    (found,) = [x for x in pack.sections if x.kind == kind]
    return found


def contents(sec: s.ContextSection) -> list[str]:
    return [i.memory.content for i in sec.items if i.memory.id]


# ------------------------------------------------------------------ sessions and agents


async def test_session_and_agent_are_stored_kept_by_updates_and_filter(stub: Stub) -> None:
    a = await add(stub, "The build uses Bazel 7", session_id="s1", agent_id="coder")
    assert (a.memory.session_id, a.memory.agent_id) == ("s1", "coder")
    batch = await stub.AddMemories(
        s.AddMemoriesRequest(
            memories=[
                s.NewMemory(content="Deploys go through Argo CD", session_id="s2", agent_id="coder"),
                s.NewMemory(content="The office plant needs water on Fridays", agent_id="butler"),
            ]
        )
    )
    assert [(r.memory.session_id, r.memory.agent_id) for r in batch.results] == [
        ("s2", "coder"),
        ("", "butler"),
    ]
    updated = await stub.UpdateMemory(s.UpdateMemoryRequest(id=a.memory.id, content="The build uses Bazel 8"))
    assert (updated.memory.session_id, updated.memory.agent_id) == ("s1", "coder")

    listed = await stub.ListMemories(s.ListMemoriesRequest(filter=m.MemoryFilter(session_ids=["s1", "s2"])))
    assert sorted(x.content for x in listed.memories) == [
        "Deploys go through Argo CD",
        "The build uses Bazel 8",
    ]
    listed = await stub.ListMemories(s.ListMemoriesRequest(filter=m.MemoryFilter(agent_ids=["butler"])))
    assert [x.content for x in listed.memories] == ["The office plant needs water on Fridays"]
    found = await stub.SearchMemories(
        s.SearchMemoriesRequest(query="how is it built", filter=m.MemoryFilter(agent_ids=["coder"]), limit=10)
    )
    assert {r.memory.agent_id for r in found.results} == {"coder"}


async def test_bad_session_and_agent_ids_are_refused(stub: Stub) -> None:
    err = await fails(
        add(stub, "x marks the spot", session_id="has space"), grpc.StatusCode.INVALID_ARGUMENT, BAD
    )
    assert "session_id" in err.violations
    err = await fails(add(stub, "x marks the spot", agent_id="-lead"), grpc.StatusCode.INVALID_ARGUMENT, BAD)
    assert "agent_id" in err.violations
    err = await fails(
        stub.ListMemories(s.ListMemoriesRequest(filter=m.MemoryFilter(session_ids=[""]))),
        grpc.StatusCode.INVALID_ARGUMENT,
        BAD,
    )
    assert "filter.session_ids[0]" in err.violations


async def test_per_session_cap_makes_results_session_diverse(stub: Stub) -> None:
    long_session = [
        "Coffee beans from Ethiopia taste fruity",
        "Coffee grinders should be burr grinders",
        "Coffee brewed at 94 degrees tastes best",
        "Coffee tastes bitter when over-extracted",
        "Coffee beans stay fresh for a month after roasting",
    ]
    await stub.AddMemories(
        s.AddMemoriesRequest(memories=[s.NewMemory(content=c, session_id="long") for c in long_session])
    )
    await add(stub, "The user drinks coffee with oat milk", session_id="other")
    await add(stub, "Espresso coffee needs a fine grind")
    plain = await stub.SearchMemories(s.SearchMemoriesRequest(query="coffee", limit=5))
    assert sum(r.memory.session_id == "long" for r in plain.results) > 2  # without the cap: > 2
    capped = await stub.SearchMemories(s.SearchMemoriesRequest(query="coffee", limit=5, max_per_session=2))
    sessions = [r.memory.session_id for r in capped.results]
    assert sessions.count("long") == 2
    assert "other" in sessions and "" in sessions  # their places went to the next best of others
    assert len(capped.results) == 4  # only 4 memories qualify: 2 + 1 + 1
    await fails(
        stub.SearchMemories(s.SearchMemoriesRequest(query="coffee", max_per_session=101)),
        grpc.StatusCode.INVALID_ARGUMENT,
        BAD,
    )


# ------------------------------------------------------------------ the context pack


async def _seed(stub: Stub, clock: ManualClock) -> None:
    await add(
        stub, "I am Ada, a coding agent for the Orbit project", type=m.MEMORY_TYPE_IDENTITY, importance=9
    )
    await add(stub, "Always run the tests before pushing", type=m.MEMORY_TYPE_DIRECTIVE, importance=8)
    await add(
        stub,
        "Never deploy on Fridays: the on-call team is thin",
        type=m.MEMORY_TYPE_DIRECTIVE,
        importance=9,
        tags=["trigger:deploy"],
    )
    await add(stub, "Run the database migrations before a deploy", importance=7, tags=["trigger:deploy/prod"])
    await add(stub, "Rebase on main before git push", importance=6, tags=["trigger:Git Push"])
    await add(stub, "Write the release notes for v2.3", importance=6, tags=["pending"])
    await add(stub, "The staging cluster runs Kubernetes 1.29", session_id="monday", agent_id="ada")
    clock.advance(24 * HOUR)


async def test_context_pack_sections_markdown_and_why(stub: Stub, clock: ManualClock) -> None:
    await _seed(stub, clock)
    await stub.UpdateSlot(s.UpdateSlotRequest(name="persona", content="Terse, precise, cites sources."))
    # Session "tuesday" of agent ada: its last session is "monday" (it wrote a memory then).
    await add(stub, "The login page moved to /auth", session_id="tuesday", agent_id="ada")
    clock.advance(HOUR)
    pack = await stub.GetContext(
        s.GetContextRequest(
            query="which Kubernetes version does staging run", session_id="wednesday", agent_id="ada"
        )
    )
    assert [x.kind for x in pack.sections] == SECTIONS
    assert pack.tokenizer == E5_TOKENIZER_NAME
    assert pack.token_budget == 2000 and 0 < pack.tokens_used <= 2000
    assert pack.since_source == s.SINCE_SOURCE_LAST_SESSION and pack.last_session_id == "tuesday"

    core = section(pack, s.CONTEXT_SECTION_KIND_CORE)
    assert core.items[0].slot == "persona" and core.items[0].reason == "slot persona"
    assert contents(core) == [
        "I am Ada, a coding agent for the Orbit project",
        "Never deploy on Fridays: the on-call team is thin",
        "Always run the tests before pushing",
    ]
    assert core.items[1].reason == "identity, importance 9"
    triggers = section(pack, s.CONTEXT_SECTION_KIND_TRIGGERS)
    assert [(i.trigger, i.count) for i in triggers.items] == [
        ("deploy", 1),
        ("deploy/prod", 1),
        ("git-push", 1),
    ]
    assert contents(section(pack, s.CONTEXT_SECTION_KIND_OPEN_ITEMS)) == ["Write the release notes for v2.3"]
    relevant = section(pack, s.CONTEXT_SECTION_KIND_RELEVANT)
    assert contents(relevant)[0] == "The staging cluster runs Kubernetes 1.29"
    assert relevant.items[0].reason.startswith("relevance ")
    recent = section(pack, s.CONTEXT_SECTION_KIND_RECENT)
    assert contents(recent) == ["The login page moved to /auth"]  # since tuesday started
    assert "tuesday" in recent.items[0].reason
    topics = section(pack, s.CONTEXT_SECTION_KIND_TOPICS)  # the topic index's top level
    assert topics.items and all(
        i.topic.id and i.topic.size > 0 and i.reason == "topic index" for i in topics.items
    )
    assert [i.topic.size for i in topics.items] == sorted((i.topic.size for i in topics.items), reverse=True)
    # No memory appears twice.
    ids = [i.memory.id for x in pack.sections for i in x.items if i.memory.id]
    assert len(ids) == len(set(ids))

    md = pack.markdown
    assert md.startswith("## Core\n- **persona**: Terse, precise, cites sources.\n")
    for title in ("## Triggers", "## Open items", "## Relevant to the task", "## Recent (since "):
        assert title in md
    assert "## Topics" in md
    for x in pack.sections:
        for i in x.items:
            assert i.text in md and i.tokens > 0
    # Counted with the named tokenizer, independently.
    assert E5Tokenizer().count_now(md) == pack.tokens_used

    again = await stub.GetContext(
        s.GetContextRequest(
            query="which Kubernetes version does staging run", session_id="wednesday", agent_id="ada"
        )
    )
    assert again == pack  # deterministic for the same state


async def test_context_budget_is_honoured_and_never_cuts_a_memory(stub: Stub, clock: ManualClock) -> None:
    await _seed(stub, clock)
    long_facts = [
        f"Fact {i}: the service {chr(65 + i)} listens on port {8000 + i} in every environment"
        for i in range(20)
    ]
    await stub.AddMemories(s.AddMemoriesRequest(memories=[s.NewMemory(content=c) for c in long_facts]))
    counter = E5Tokenizer()
    full = await stub.GetContext(s.GetContextRequest(token_budget=32000))
    assert not full.truncated
    for budget in (30, 60, 120, 250, 500):
        pack = await stub.GetContext(s.GetContextRequest(token_budget=budget))
        assert counter.count_now(pack.markdown) == pack.tokens_used <= budget
        assert pack.truncated
        assert sum(x.omitted for x in pack.sections) > 0
        for x in pack.sections:  # every item whole: exactly one of the full pack's items
            for i in x.items:
                assert i.text in full.markdown
    small = await stub.GetContext(s.GetContextRequest(token_budget=60))
    assert (
        contents(section(small, s.CONTEXT_SECTION_KIND_CORE))[0]
        == "I am Ada, a coding agent for the Orbit project"
    )


async def test_context_since_and_default_window(stub: Stub, clock: ManualClock) -> None:
    old = await add(stub, "The first sprint started in January", type=m.MEMORY_TYPE_INSIGHT)
    clock.advance(10 * 24 * HOUR)
    await add(stub, "The second sprint focuses on search")
    pack = await stub.GetContext(s.GetContextRequest())
    assert pack.since_source == s.SINCE_SOURCE_DEFAULT_WINDOW
    assert contents(section(pack, s.CONTEXT_SECTION_KIND_RECENT)) == ["The second sprint focuses on search"]
    pack = await stub.GetContext(s.GetContextRequest(since=ts(old.memory.created_at.seconds)))
    assert pack.since_source == s.SINCE_SOURCE_REQUEST
    assert contents(section(pack, s.CONTEXT_SECTION_KIND_RECENT)) == [
        "The second sprint focuses on search",
        "The first sprint started in January",
    ]


async def test_context_session_start_is_remembered(stub: Stub, clock: ManualClock) -> None:
    first = await stub.GetContext(s.GetContextRequest(session_id="one", agent_id="bot"))
    assert first.since_source == s.SINCE_SOURCE_DEFAULT_WINDOW
    clock.advance(HOUR)
    await add(stub, "Session one learned that the API key rotates weekly")
    clock.advance(HOUR)
    second = await stub.GetContext(s.GetContextRequest(session_id="two", agent_id="bot"))
    assert second.since_source == s.SINCE_SOURCE_LAST_SESSION and second.last_session_id == "one"
    assert contents(section(second, s.CONTEXT_SECTION_KIND_RECENT)) == [
        "Session one learned that the API key rotates weekly"
    ]
    # After a compaction within session two, its last session is still one; another agent has none.
    assert (
        await stub.GetContext(s.GetContextRequest(session_id="two", agent_id="bot"))
    ).last_session_id == "one"
    other = await stub.GetContext(s.GetContextRequest(session_id="x", agent_id="someone-else"))
    assert other.since_source == s.SINCE_SOURCE_DEFAULT_WINDOW


async def test_context_bad_input(stub: Stub) -> None:
    for budget in (0, -5, 32001):
        err = await fails(
            stub.GetContext(s.GetContextRequest(token_budget=budget)), grpc.StatusCode.INVALID_ARGUMENT, BAD
        )
        assert "token_budget" in err.violations
    err = await fails(
        stub.GetContext(s.GetContextRequest(session_id="bad id")), grpc.StatusCode.INVALID_ARGUMENT, BAD
    )
    assert "session_id" in err.violations
    await fails(
        stub.GetContext(s.GetContextRequest(collections=["nope"])),
        grpc.StatusCode.NOT_FOUND,
        "ERROR_REASON_COLLECTION_NOT_FOUND",
    )


async def test_empty_store_gives_an_empty_pack(stub: Stub) -> None:
    pack = await stub.GetContext(s.GetContextRequest(query="anything"))
    assert pack.markdown == "" and pack.tokens_used == 0 and not pack.truncated
    assert [x.kind for x in pack.sections] == SECTIONS


# ------------------------------------------------------------------ triggers


async def test_triggers_match_the_action_and_its_parents_ranked(stub: Stub, clock: ManualClock) -> None:
    await _seed(stub, clock)
    await add(stub, "Tell the channel before a production deploy", importance=7, tags=["trigger:deploy/prod"])
    got = await stub.GetTriggers(s.GetTriggersRequest(action="Deploy/Prod"))
    assert got.action == "deploy/prod" and list(got.matched) == ["deploy/prod", "deploy"]
    assert [x.content for x in got.memories] == [
        "Never deploy on Fridays: the on-call team is thin",  # importance 9
        "Tell the channel before a production deploy",  # 7, newer
        "Run the database migrations before a deploy",  # 7, older
    ]
    got = await stub.GetTriggers(s.GetTriggersRequest(action="deploy"))
    assert [x.content for x in got.memories] == [
        "Never deploy on Fridays: the on-call team is thin"
    ]  # no children
    got = await stub.GetTriggers(s.GetTriggersRequest(action="  git   PUSH "))
    assert got.action == "git-push" and [x.content for x in got.memories] == [
        "Rebase on main before git push"
    ]
    assert (await stub.GetTriggers(s.GetTriggersRequest(action="git"))).memories == []  # not a prefix match
    got = await stub.GetTriggers(s.GetTriggersRequest(action="deploy/prod", limit=1))
    assert len(got.memories) == 1 and got.truncated


async def test_trigger_names_are_validated(stub: Stub) -> None:
    for action in ("", "deploy!", "rm -rf /", "a//b", "x" * 65):
        err = await fails(
            stub.GetTriggers(s.GetTriggersRequest(action=action)), grpc.StatusCode.INVALID_ARGUMENT, BAD
        )
        assert "action" in err.violations
    err = await fails(
        add(stub, "bad trigger tag", tags=["trigger:dep loy!"]), grpc.StatusCode.INVALID_ARGUMENT, BAD
    )
    assert "tags[0]" in err.violations
    ok = await add(stub, "a normalised trigger tag", tags=["trigger:Git Push"])
    assert list(ok.memory.tags) == ["trigger:git-push"]


# ------------------------------------------------------------------ slots


async def test_slots_edit_list_and_compact_by_truncation(server: EngramServer, stub: Stub) -> None:
    server.service.slot_capacity_tokens = 40
    listed = await stub.ListSlots(s.ListSlotsRequest())
    assert [x.name for x in listed.slots] == [
        "persona",
        "user_preferences",
        "project_context",
        "pending_items",
        "guidance",
    ]
    assert all(x.content == "" and x.capacity_tokens == 40 for x in listed.slots)
    assert listed.tokenizer == E5_TOKENIZER_NAME
    got = await stub.UpdateSlot(
        s.UpdateSlotRequest(name="user_preferences", content="Prefers tabs over spaces")
    )
    assert got.slot.content == "Prefers tabs over spaces" and got.compaction == s.SLOT_COMPACTION_UNSPECIFIED
    got = await stub.UpdateSlot(s.UpdateSlotRequest(name="user_preferences", content="Uses dark mode"))
    assert got.slot.content == "Prefers tabs over spaces\nUses dark mode"
    for i in range(8):
        got = await stub.UpdateSlot(
            s.UpdateSlotRequest(
                name="user_preferences", content=f"Preference number {i} is about keyboard layout {i}"
            )
        )
    assert got.compaction == s.SLOT_COMPACTION_TRUNCATION
    assert got.slot.tokens <= 40 and got.slot.compactions > 0
    assert got.slot.content.startswith("[… ") and "earlier tokens removed …]" in got.slot.content
    assert got.slot.content.endswith("Preference number 7 is about keyboard layout 7")  # the newest stays
    assert "Prefers tabs" not in got.slot.content  # the oldest went
    got = await stub.UpdateSlot(
        s.UpdateSlotRequest(name="user_preferences", content="Only this", mode=s.SLOT_UPDATE_MODE_REPLACE)
    )
    assert got.slot.content == "Only this"
    listed = await stub.ListSlots(s.ListSlotsRequest())
    assert listed.slots[1].content == "Only this" and listed.slots[1].tokens > 0


async def test_slot_bad_input(stub: Stub) -> None:
    err = await fails(
        stub.UpdateSlot(s.UpdateSlotRequest(name="mood", content="happy")),
        grpc.StatusCode.INVALID_ARGUMENT,
        BAD,
    )
    assert "name" in err.violations
    err = await fails(
        stub.UpdateSlot(s.UpdateSlotRequest(name="persona", content="  ")),
        grpc.StatusCode.INVALID_ARGUMENT,
        BAD,
    )
    assert "content" in err.violations
    await fails(
        stub.ListSlots(s.ListSlotsRequest(collection="nope")),
        grpc.StatusCode.NOT_FOUND,
        "ERROR_REASON_COLLECTION_NOT_FOUND",
    )
