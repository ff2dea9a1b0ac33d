"""The contradiction LLM judge end to end (issue 30): a live Engram server with
``ENGRAM_CONTRADICTION_LLM`` on, whose LLM is the real ``openai`` client talking over HTTP to the
local OpenAI-wire server of :mod:`tests.reflection.test_reflection`, scripted per test. The pairs
below are ones the rules leave undecided (checked first with the real embedder and
:func:`engram_server.domain.contradictions.judge`), so only the LLM can call them contradictions."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.app import EngramServer
from engram_server.domain.clock import ManualClock
from engram_server.domain.contradictions import JUDGE_SCHEMA, JUDGE_SYSTEM_PROMPT, judge
from engram_server.domain.specifics import conflicts
from engram_server.testing import running_server
from tests.reflection.test_reflection import Llm, chat_reply, settings_for
from tests.support.rpc import add, count
from tests.support.wire import Recorded, Reply

Stub = memory_service_pb2_grpc.MemoryServiceStub

#: Same subject, another value, no specific the rules can compare and no change statement.
OLD = "The user prefers tea in the morning."
NEW = "The user prefers coffee in the morning."


def verdicts(*items: tuple[int, bool, str]) -> str:
    return json.dumps({"verdicts": [{"index": i, "contradicts": c, "explanation": e} for i, c, e in items]})


@pytest.fixture
async def srv(tmp_path: Path, clock: ManualClock, llm: Llm) -> AsyncIterator[EngramServer]:
    settings = settings_for(llm, contradiction_llm=True)
    async with running_server(tmp_path / "data", clock=clock, **settings) as server:
        yield server


@pytest.fixture
async def st(srv: EngramServer) -> AsyncIterator[Stub]:
    async with grpc.aio.insecure_channel(srv.address) as ch:
        yield Stub(ch)


async def undecided_pair(st: Stub) -> s.AddMemoryResponse:
    """Store OLD and check the rules leave (OLD, NEW) undecided at the gate's similarity."""
    old = await add(st, OLD)
    assert old.outcome == s.ADD_OUTCOME_CREATED
    probe = await st.SearchMemories(s.SearchMemoriesRequest(query=NEW, limit=1))
    (hit,) = probe.results
    assert hit.memory.id == old.memory.id
    return old


def test_the_pair_is_one_the_rules_leave_undecided() -> None:
    # At any similarity in the gate's contradiction band the rules cannot tell.
    for similarity in (0.72, 0.8, 0.9):
        v = judge(OLD, NEW, similarity, tuple(conflicts(OLD, NEW)))
        assert v.contradiction is None, v


async def test_the_llm_calls_an_undecided_pair_a_contradiction_and_it_is_superseded(
    st: Stub, llm: Llm
) -> None:
    old = await undecided_pair(st)
    assert llm.calls == []  # the first add had nothing to judge
    llm.replies.append(chat_reply(verdicts((1, True, "the preferred morning drink changed"))))
    new = await add(st, NEW)
    assert new.outcome == s.ADD_OUTCOME_CREATED

    (conflict,) = new.conflicts
    assert conflict.memory_id == old.memory.id and conflict.content == OLD
    assert conflict.basis == "llm" and conflict.superseded
    assert conflict.explanation == "the preferred morning drink changed"
    # the rules alone leave the pair undecided at the similarity the gate measured
    assert judge(OLD, NEW, conflict.similarity, tuple(conflicts(OLD, NEW))).contradiction is None
    got = await st.GetMemory(s.GetMemoryRequest(id=old.memory.id))
    assert got.memory.superseded_by == new.memory.id
    found = await st.SearchMemories(s.SearchMemoriesRequest(query=OLD, limit=10))
    assert old.memory.id not in [r.memory.id for r in found.results]
    assert await count(st) == 1 and await count(st, include_history=True) == 2

    # (4) the request the real openai client sent: the judge prompt and the strict JSON schema
    (call,) = llm.calls
    body = call.json
    assert body["model"] == "test-llm"
    assert call.headers["authorization"] == "Bearer sk-local-test"
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"] == {"name": "contradictions", "schema": JUDGE_SCHEMA, "strict": True}
    system, user = body["messages"]
    assert system == {"role": "system", "content": JUDGE_SYSTEM_PROMPT}
    assert user["role"] == "user"
    assert user["content"] == f"NEW: {NEW}\nSTORED:\n[1] {OLD}"


async def test_report_mode_lists_the_llm_contradiction_without_superseding(st: Stub, llm: Llm) -> None:
    old = await undecided_pair(st)
    llm.replies.append(chat_reply(verdicts((1, True, "another drink"))))
    new = await add(st, NEW, contradictions=s.CONTRADICTION_MODE_REPORT)
    (conflict,) = new.conflicts
    assert conflict.basis == "llm" and not conflict.superseded
    got = await st.GetMemory(s.GetMemoryRequest(id=old.memory.id))
    assert not got.memory.superseded_by


async def test_the_llm_saying_no_leaves_the_pair_alone(st: Stub, llm: Llm) -> None:
    old = await undecided_pair(st)
    llm.replies.append(chat_reply(verdicts((1, False, "both can be true"))))
    new = await add(st, NEW)
    assert new.outcome == s.ADD_OUTCOME_CREATED
    assert list(new.conflicts) == []
    assert len(llm.calls) == 1  # it was asked
    (near,) = [n for n in new.near_duplicates if n.id == old.memory.id]
    assert 0.72 <= near.similarity < 0.92  # in the contradiction band, not a duplicate
    got = await st.GetMemory(s.GetMemoryRequest(id=old.memory.id))
    assert not got.memory.superseded_by
    assert await count(st) == 2


async def stall(_: Recorded) -> Reply:
    await asyncio.sleep(5)  # past llm_timeout_seconds (2 s)
    return chat_reply(verdicts((1, True, "too late")))


@pytest.mark.parametrize(
    ("replies", "calls"),
    [
        # HTTP 500 on the call and on the openai client's one retry (llm_max_retries=1)
        ([Reply.of_json(500, {"error": {"message": "boom"}})] * 2, 2),
        ([chat_reply("this is not JSON")], 1),
        ([chat_reply(json.dumps({"verdicts": "yes"}))], 1),  # JSON, but not the schema's shape
        ([chat_reply(verdicts((7, True, "no such stored memory")))], 1),  # index out of range
        ([stall, stall], 2),  # times out on the call and on the retry
    ],
    ids=["http-500-twice", "invalid-json", "malformed-verdicts", "index-out-of-range", "timeout"],
)
async def test_an_llm_failure_leaves_the_rules_answer_and_the_add_succeeds(
    st: Stub, llm: Llm, replies: list[Any], calls: int
) -> None:
    old = await undecided_pair(st)
    llm.replies.extend(replies)
    new = await add(st, NEW)
    assert new.outcome == s.ADD_OUTCOME_CREATED and new.memory.content == NEW
    assert len(llm.calls) == calls and llm.replies == []
    assert list(new.conflicts) == []
    got = await st.GetMemory(s.GetMemoryRequest(id=old.memory.id))
    assert not got.memory.superseded_by
    assert await count(st) == 2


async def test_a_rule_decided_pair_never_goes_to_the_llm(st: Stub, llm: Llm) -> None:
    old = await add(st, "The staging cluster has 12 nodes.")
    new = await add(st, "The staging cluster has 16 nodes.")
    (conflict,) = new.conflicts
    assert conflict.memory_id == old.memory.id
    assert conflict.basis == "specifics" and conflict.superseded
    assert llm.calls == []


async def test_without_the_setting_the_llm_is_not_asked(tmp_path: Path, clock: ManualClock, llm: Llm) -> None:
    async with (
        running_server(tmp_path / "data", clock=clock, **settings_for(llm)) as server,
        grpc.aio.insecure_channel(server.address) as ch,
    ):
        stub = Stub(ch)
        old = await undecided_pair(stub)
        new = await add(stub, NEW)
        assert list(new.conflicts) == [] and llm.calls == []
        got = await stub.GetMemory(s.GetMemoryRequest(id=old.memory.id))
        assert not got.memory.superseded_by


async def test_the_setting_without_an_llm_warns_and_judges_by_the_rules(
    tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="engram_server.app"):
        async with (
            running_server(tmp_path / "data", clock=clock, contradiction_llm=True) as server,
            grpc.aio.insecure_channel(server.address) as ch,
        ):
            stub = Stub(ch)
            await undecided_pair(stub)
            new = await add(stub, NEW)
            assert new.outcome == s.ADD_OUTCOME_CREATED and list(new.conflicts) == []
    assert any("ENGRAM_CONTRADICTION_LLM is on but no LLM" in r.getMessage() for r in caplog.records)
