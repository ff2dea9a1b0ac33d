"""ExtractMemories and the privacy filter end to end: a live server (embedded Qdrant, the real local
model, real gRPC). The LLM path talks, through the real ``openai`` client, to a local server that
speaks the OpenAI wire protocol, scripted per test; the rule path needs no LLM."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.domain.clock import ManualClock
from engram_server.testing import rich, running_server
from tests.reflection.test_reflection import Llm, chat_reply, settings_for
from tests.support.wire import Reply, WireServer

Stub = memory_service_pb2_grpc.MemoryServiceStub

GH = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"

CONVERSATION = [
    ("user", "Hi! My name is Alice Moreau and I work as a nurse at St. Mary's hospital."),
    ("assistant", "Nice to meet you, Alice. How can I help?"),
    ("user", "What should I cook tonight? I'm vegetarian, by the way."),
    ("assistant", "You could try a lentil curry."),
    ("user", "Also, we decided to move the clinic's booking app from Express to Fastify last week."),
    ("user", "From now on, always answer me in French."),
    ("user", "Thanks!"),
]


def conversation(turns: list[tuple[str, str]], start: float | None = None) -> s.Conversation:
    conv = s.Conversation()
    for i, (role, text) in enumerate(turns):
        msg = conv.messages.add(role=role, content=text)
        if start is not None:
            msg.created_at.FromSeconds(int(start + 60 * i))
    return conv


@pytest.fixture
async def llm() -> AsyncIterator[Llm]:
    wire = WireServer()
    await wire.start()
    try:
        yield Llm(wire)
    finally:
        await wire.stop()


@pytest.fixture
async def st(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Stub]:
    """No LLM configured: the rules extract."""
    async with (
        running_server(tmp_path / "data", clock=clock) as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        yield Stub(ch)


@pytest.fixture
async def llm_st(tmp_path: Path, clock: ManualClock, llm: Llm) -> AsyncIterator[Stub]:
    async with (
        running_server(tmp_path / "data", clock=clock, **settings_for(llm)) as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        yield Stub(ch)


async def extract(st: Stub, **kw: Any) -> s.ExtractMemoriesResponse:
    resp: s.ExtractMemoriesResponse = await st.ExtractMemories(s.ExtractMemoriesRequest(**kw))
    return resp


def memories(*items: dict[str, Any]) -> str:
    return json.dumps({"memories": list(items)})


# ---------------------------------------------------------------- rules


async def test_rules_keep_the_facts_of_a_conversation_and_skip_the_rest(st: Stub, clock: ManualClock) -> None:
    start = clock.now() - 3600
    r = await extract(st, conversation=conversation(CONVERSATION, start))
    assert r.extractor == s.EXTRACTOR_RULES and not r.fallback_reason and not r.dry_run
    got = [(x.type, x.content) for x in r.memories]
    assert got == [
        (
            m.MEMORY_TYPE_IDENTITY,
            "User: My name is Alice Moreau and I work as a nurse at St. Mary's hospital",
        ),
        (m.MEMORY_TYPE_DIRECTIVE, "User: I'm vegetarian, by the way"),
        (
            m.MEMORY_TYPE_EVENT,
            "User: Also, we decided to move the clinic's booking app from Express to Fastify last week",
        ),
        (m.MEMORY_TYPE_DIRECTIVE, "User: From now on, always answer me in French"),
    ]
    for x in r.memories:
        assert x.result.outcome == s.ADD_OUTCOME_CREATED
        assert "source:extraction" in x.tags
        assert x.result.memory.metadata["extractor"] == "rules"
        assert x.result.memory.metadata["extracted_from"] == "conversation"
        assert x.result.memory.source_type == m.SOURCE_TYPE_USER_INPUT
    # each memory carries the time of the turn it came from
    assert r.memories[0].created_at.seconds == int(start)
    assert r.memories[2].result.memory.created_at.seconds == int(start + 4 * 60)
    # they are searchable like any memory
    hits = await st.SearchMemories(
        s.SearchMemoriesRequest(query="which web framework does the booking app use?")
    )
    assert "Fastify" in hits.results[0].memory.content


async def test_chinese_conversation_with_rules(st: Stub) -> None:
    r = await extract(
        st,
        conversation=conversation(
            [
                ("user", "你好！我叫王伟，我住在杭州。"),
                ("assistant", "你好王伟，有什么可以帮你？"),
                ("user", "我们的项目用的是 PostgreSQL 15，端口 5433。今天天气怎么样？"),
                ("user", "以后请用中文回答我。我不喜欢太长的解释。"),
            ]
        ),
        dry_run=True,
    )
    assert r.dry_run and r.extractor == s.EXTRACTOR_RULES
    assert [x.content for x in r.memories] == [
        "用户：我叫王伟，我住在杭州。",
        "用户：我们的项目用的是 PostgreSQL 15，端口 5433。",
        "用户：以后请用中文回答我。",
        "用户：我不喜欢太长的解释。",
    ]
    assert all(not x.HasField("result") for x in r.memories)
    listed = await st.ListMemories(s.ListMemoriesRequest())
    assert not listed.memories  # dry run wrote nothing


async def test_a_tool_observation_becomes_one_line_and_repeats_are_dropped(st: Stub) -> None:
    obs = s.ToolObservation(
        tool_name="Bash",
        input=json.dumps({"command": "npm test", "description": "Run the tests"}),
        error="Exit code 1\n> jest\nFAIL src/cart.test.ts\n"
        "Error: Cannot find module 'stripe' from 'src/cart.ts'",
    )
    r = await extract(st, observation=obs, tags=["project:shop"])
    [x] = r.memories
    assert x.content == "Command `npm test` failed: FAIL src/cart.test.ts"
    assert x.type == m.MEMORY_TYPE_EVENT
    assert list(x.tags) == ["source:extraction", "tool:bash", "tool-failure", "project:shop"]
    assert x.result.memory.source_type == m.SOURCE_TYPE_TOOL_OUTPUT
    assert x.result.memory.metadata["tool"] == "Bash"
    again = await extract(st, observation=obs, tags=["project:shop"])
    assert again.deduplicated and again.extractor == s.EXTRACTOR_NONE and not again.memories
    # reading a file is not worth a memory
    quiet = await extract(
        st, observation=s.ToolObservation(tool_name="Read", input='{"file_path": "/a"}', output="x")
    )
    assert not quiet.memories and not quiet.deduplicated


async def test_the_dedup_window_expires(st: Stub, clock: ManualClock) -> None:
    obs = s.ToolObservation(tool_name="Write", input='{"file_path": "/src/app.py", "content": "print(1)"}')
    first = await extract(st, observation=obs)
    assert [x.content for x in first.memories] == ["Wrote /src/app.py"]
    assert (await extract(st, observation=obs)).deduplicated
    clock.advance(601)
    later = await extract(st, observation=obs)
    assert not later.deduplicated
    assert later.memories[0].result.outcome == s.ADD_OUTCOME_DUPLICATE  # the gate still knows it


async def test_secrets_never_reach_the_store(st: Stub) -> None:
    r = await extract(
        st,
        text=f"We decided to deploy with token {GH} tomorrow. <private>My salary is 90k.</private>",
    )
    assert list(r.redactions) == ["private", "github_token"]
    [x] = r.memories
    assert GH not in x.content and "[REDACTED:github_token]" in x.content and "salary" not in x.content
    listed = await st.ListMemories(s.ListMemoriesRequest())
    assert all(GH not in mem.content and "salary" not in mem.content for mem in listed.memories)


async def test_bad_input_is_invalid_argument(st: Stub) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({}, "input"),
        ({"text": "   "}, "input"),
        ({"observation": s.ToolObservation(tool_name="")}, "observation.tool_name"),
        ({"conversation": conversation([("user", "")])}, "conversation.messages[0].content"),
        ({"text": "x" * 100_001}, "input"),
        ({"text": "I live in Oslo", "collection": "Bad Name"}, "collection"),
        ({"text": "I live in Oslo", "mode": 99}, "mode"),
    ]
    for kw, fieldname in cases:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await extract(st, **kw)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, kw
        status = rich(info.value)
        assert status.reason == "ERROR_REASON_INVALID_ARGUMENT", kw
        assert fieldname in status.violations, (kw, status.violations)


# ---------------------------------------------------------------- LLM


async def test_the_llm_extracts_with_a_json_schema(llm_st: Stub, llm: Llm, clock: ManualClock) -> None:
    llm.replies.append(
        chat_reply(
            memories(
                {
                    "content": "The user, Alice Moreau, is a nurse at St. Mary's hospital.",
                    "type": "identity",
                    "importance": 8,
                    "tags": ["work"],
                    "message_index": 1,
                },
                {
                    "content": "The booking app moved from Express to Fastify.",
                    "type": "event",
                    "importance": 6,
                    "tags": ["stack", "Stack"],
                    "message_index": 5,
                },
                {"content": "", "type": "event", "importance": 3, "tags": [], "message_index": 0},
                {
                    "content": "Odd type and importance.",
                    "type": "rumour",
                    "importance": 99,
                    "tags": [],
                    "message_index": 0,
                },
            )
        )
    )
    start = clock.now() - 600
    r = await extract(llm_st, conversation=conversation(CONVERSATION, start))
    assert r.extractor == s.EXTRACTOR_LLM and r.model == "test-llm"
    assert [(x.content, x.type, x.importance) for x in r.memories] == [
        ("The user, Alice Moreau, is a nurse at St. Mary's hospital.", m.MEMORY_TYPE_IDENTITY, 8),
        ("The booking app moved from Express to Fastify.", m.MEMORY_TYPE_EVENT, 6),
        ("Odd type and importance.", m.MEMORY_TYPE_EVENT, 10),
    ]
    assert list(r.memories[1].tags) == ["source:extraction", "stack"]
    assert r.memories[1].created_at.seconds == int(start + 4 * 60)
    assert r.memories[0].result.memory.metadata["extractor"] == "llm"
    body = llm.calls[0].json
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["name"] == "extracted_memories"
    assert "[5] user (" in body["messages"][1]["content"]


async def test_the_llm_never_sees_a_secret(llm_st: Stub, llm: Llm) -> None:
    llm.replies.append(chat_reply(memories()))
    r = await extract(
        llm_st,
        observation=s.ToolObservation(
            tool_name="Bash",
            input=json.dumps({"command": "psql postgres://app:s3cr3tPw@db:5432/prod"}),
            output="password=hunter2\n<private>internal only</private>",
        ),
    )
    assert r.extractor == s.EXTRACTOR_LLM and not r.memories
    sent = llm.calls[0].json["messages"][1]["content"]
    assert "s3cr3tPw" not in sent and "hunter2" not in sent and "internal only" not in sent
    assert sorted(r.redactions) == ["assigned_secret", "connection_string_password", "private"]


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (Reply.of_json(429, {"error": {"message": "Rate limit reached", "type": "rate_limit"}}), "HTTP 429"),
        (Reply.of_json(500, {"error": {"message": "boom"}}), "HTTP 500"),
        (chat_reply("this is not json"), "not JSON"),
        (chat_reply(json.dumps({"facts": []})), "no 'memories' list"),
    ],
)
async def test_when_the_llm_fails_the_rules_take_over(
    llm_st: Stub, llm: Llm, reply: Reply, reason: str
) -> None:
    llm.replies.extend([reply, reply, reply])  # the client retries 429/5xx once (llm_max_retries=1)
    r = await extract(llm_st, text="My name is Bruno and I live in Porto. Nice weather today.")
    assert r.extractor == s.EXTRACTOR_RULES
    assert reason in r.fallback_reason
    [x] = r.memories
    assert x.content == "User: My name is Bruno and I live in Porto"
    assert x.result.outcome == s.ADD_OUTCOME_CREATED


async def test_rules_mode_skips_a_configured_llm(llm_st: Stub, llm: Llm) -> None:
    r = await extract(llm_st, text="I prefer tabs over spaces.", mode=s.EXTRACTION_MODE_RULES)
    assert r.extractor == s.EXTRACTOR_RULES and not llm.calls
    assert [x.content for x in r.memories] == ["User: I prefer tabs over spaces"]


# ---------------------------------------------------------------- the filter on every write path


async def test_add_add_many_and_update_store_only_filtered_text(st: Stub) -> None:
    a = await st.AddMemory(
        s.AddMemoryRequest(
            content=f"CI uses {GH} to push releases",
            metadata={"note": "DB_PASSWORD=hunter2"},
        )
    )
    assert a.memory.content == "CI uses [REDACTED:github_token] to push releases"
    assert a.memory.metadata["note"] == "DB_PASSWORD=[REDACTED:assigned_secret]"
    many = await st.AddMemories(
        s.AddMemoriesRequest(
            memories=[
                s.NewMemory(content="Staging DSN is postgres://app:pw12345@staging:5432/app"),
                s.NewMemory(content="The user likes jazz <private>and is seeing a therapist</private>"),
            ]
        )
    )
    assert (
        many.results[0].memory.content
        == "Staging DSN is postgres://app:[REDACTED:connection_string_password]@staging:5432/app"
    )
    assert many.results[1].memory.content == "The user likes jazz"
    u = await st.UpdateMemory(
        s.UpdateMemoryRequest(
            id=a.memory.id, content="CI now uses sk_live_4eC39HqLyjWDarjtT1zdp7dc for billing"
        )
    )
    assert u.memory.content == "CI now uses [REDACTED:stripe_key] for billing"
    got = await st.GetMemory(s.GetMemoryRequest(id=a.memory.id, include_history=True))
    assert all(GH not in x.content for x in [got.memory, *got.history])
    # nothing left once the private part is gone: a clear refusal, nothing stored
    for call in (
        st.AddMemory(s.AddMemoryRequest(content="<private>only this</private>")),
        st.UpdateMemory(s.UpdateMemoryRequest(id=a.memory.id, content="<private>only this</private>")),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "privacy filter" in rich(info.value).violations["content"]


async def test_the_filter_can_be_turned_off_and_extended(tmp_path: Path) -> None:
    async with (
        running_server(
            tmp_path / "data", privacy_filter=True, privacy_extra_patterns="\\bEMP-\\d{5}\\b"
        ) as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        r = await Stub(ch).AddMemory(s.AddMemoryRequest(content="Badge EMP-12345 opens the lab"))
        assert r.memory.content == "Badge [REDACTED:custom] opens the lab"
    async with (
        running_server(tmp_path / "data2", privacy_filter=False) as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        r = await Stub(ch).AddMemory(s.AddMemoryRequest(content="DB_PASSWORD=hunter2 on the old box"))
        assert r.memory.content == "DB_PASSWORD=hunter2 on the old box"


async def test_a_search_query_is_filtered_before_it_is_embedded(st: Stub) -> None:
    await st.AddMemory(s.AddMemoryRequest(content="The deploy token lives in the CI secrets store"))
    hits = await st.SearchMemories(s.SearchMemoriesRequest(query=f"where does {GH} live?"))
    assert hits.results  # the rest of the query still searches
    empty = await st.SearchMemories(s.SearchMemoriesRequest(query="<private>my diagnosis</private>"))
    assert not empty.results
