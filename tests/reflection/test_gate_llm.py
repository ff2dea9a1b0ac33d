"""The write gate's LLM judge end to end: a live Engram server with ``ENGRAM_GATE_LLM`` on, whose LLM
is the real ``openai`` client talking over HTTP to the local OpenAI-wire server of
:mod:`tests.reflection.test_reflection`, scripted per test (no hosted LLM runs here). The pairs
below are restatements the rules leave undecided (no duplicate, no conflicting specifics), so only
the judge can refuse them; a pair whose specifics conflict must never reach it."""

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
from engram_server.domain.gate import JUDGE_SCHEMA, JUDGE_SYSTEM_PROMPT
from engram_server.testing import running_server
from tests.reflection.test_reflection import Llm, chat_reply, settings_for
from tests.support.rpc import add, count
from tests.support.wire import Recorded, Reply

Stub = memory_service_pb2_grpc.MemoryServiceStub

#: One claim, reworded with an idiom no rule reads.
OLD = "The user prefers metric units."
NEW = "The user would rather use metric units."
#: One claim, translated with a word neither dictionary relates (宕机 / "down").
OLD_EN = "The database server was down for two hours last night."
NEW_ZH = "数据库服务器昨晚宕机了两个小时。"


def restates(index: int) -> str:
    return json.dumps({"restates": index})


@pytest.fixture
async def srv(tmp_path: Path, clock: ManualClock, llm: Llm) -> AsyncIterator[EngramServer]:
    async with running(tmp_path, clock, llm) as server:
        yield server


def running(tmp_path: Path, clock: ManualClock, llm: Llm | None, **extra: Any) -> Any:
    settings = settings_for(llm, gate_llm=True, **extra) if llm is not None else {"gate_llm": True, **extra}
    return running_server(tmp_path / "data", clock=clock, **settings)


@pytest.fixture
async def st(srv: EngramServer) -> AsyncIterator[Stub]:
    async with grpc.aio.insecure_channel(srv.address) as ch:
        yield Stub(ch)


async def test_the_judge_refuses_a_restatement_the_rules_leave_undecided(st: Stub, llm: Llm) -> None:
    old = await add(st, OLD)
    assert old.outcome == s.ADD_OUTCOME_CREATED
    assert llm.calls == []  # nothing near: nothing to judge
    llm.replies.append(chat_reply(restates(1)))
    new = await add(st, NEW)

    assert new.outcome == s.ADD_OUTCOME_DUPLICATE
    assert new.memory.id == old.memory.id and new.gate_reason == "judged_same"
    assert 0.82 <= new.duplicate_similarity <= 0.92  # below the threshold: the rules alone write it
    assert await count(st) == 1

    # the request the real openai client sent: the judge prompt and the strict JSON schema
    (call,) = llm.calls
    body = call.json
    assert body["model"] == "test-llm"
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"] == {"name": "restatement", "schema": JUDGE_SCHEMA, "strict": True}
    system, user = body["messages"]
    assert system == {"role": "system", "content": JUDGE_SYSTEM_PROMPT}
    assert user == {"role": "user", "content": f"NEW: {NEW}\nSTORED:\n[1] {OLD}"}


async def test_the_judge_refuses_a_translation_the_dictionaries_cannot_align(st: Stub, llm: Llm) -> None:
    old = await add(st, OLD_EN)
    llm.replies.append(chat_reply(restates(1)))
    new = await add(st, NEW_ZH)
    assert new.outcome == s.ADD_OUTCOME_DUPLICATE
    assert new.memory.id == old.memory.id and new.gate_reason == "judged_same"
    assert new.duplicate_similarity < 0.70  # a translation sits below the near-duplicate zone
    (call,) = llm.calls
    assert call.json["messages"][1]["content"] == f"NEW: {NEW_ZH}\nSTORED:\n[1] {OLD_EN}"


async def test_the_judge_saying_none_writes_the_memory(st: Stub, llm: Llm) -> None:
    old = await add(st, OLD)
    llm.replies.append(chat_reply(restates(0)))
    new = await add(st, NEW)
    assert new.outcome == s.ADD_OUTCOME_CREATED and new.gate_reason == ""
    assert len(llm.calls) == 1
    (near,) = [n for n in new.near_duplicates if n.id == old.memory.id]
    assert 0.82 <= near.similarity <= 0.92
    assert await count(st) == 2


async def test_a_pair_with_conflicting_specifics_never_reaches_the_judge(st: Stub, llm: Llm) -> None:
    await add(st, "Invoice 4471 was paid on March 3.")
    new = await add(st, "Invoice 4472 was paid on March 3.")
    assert new.outcome == s.ADD_OUTCOME_CREATED and new.gate_reason == "conflicting_specifics"
    await add(st, "The staging cluster has 12 worker nodes.")
    new = await add(st, "The staging cluster has sixteen worker nodes.")
    assert new.outcome == s.ADD_OUTCOME_CREATED
    assert llm.calls == []
    assert await count(st, include_history=True) == 4  # the 12 nodes superseded by the 16, not lost


async def test_a_memory_on_the_same_topic_only_never_reaches_the_judge(st: Stub, llm: Llm) -> None:
    # below the restatement level (0.82) the calibrated scale says "the same topic": no call
    old = await add(st, OLD)
    new = await add(st, "The user measures distances in kilometres.")
    assert new.outcome == s.ADD_OUTCOME_CREATED
    (near,) = [n for n in new.near_duplicates if n.id == old.memory.id]
    assert 0.70 <= near.similarity < 0.82 and not near.reason  # in the zone, no rule's reason
    assert llm.calls == []


async def test_a_duplicate_the_rules_find_never_reaches_the_judge(st: Stub, llm: Llm) -> None:
    old = await add(st, OLD)
    new = await add(st, "The user prefers metric units!")
    assert new.outcome == s.ADD_OUTCOME_DUPLICATE and new.memory.id == old.memory.id
    assert new.gate_reason != "judged_same"
    new = await add(st, NEW, allow_duplicate=True)  # written anyway: nothing to ask
    assert new.outcome == s.ADD_OUTCOME_CREATED
    assert llm.calls == []


async def stall(_: Recorded) -> Reply:
    await asyncio.sleep(5)  # past llm_timeout_seconds (2 s)
    return chat_reply(restates(1))


@pytest.mark.parametrize(
    ("replies", "calls"),
    [
        # HTTP 500 on the call and on the openai client's one retry (llm_max_retries=1)
        ([Reply.of_json(500, {"error": {"message": "boom"}})] * 2, 2),
        ([chat_reply("this is not JSON")], 1),
        ([chat_reply(json.dumps({"restates": "yes"}))], 1),  # JSON, but not the schema's shape
        ([chat_reply(restates(7))], 1),  # no such stored memory
        ([stall, stall], 2),  # times out on the call and on the retry
    ],
    ids=["http-500-twice", "invalid-json", "malformed", "index-out-of-range", "timeout"],
)
async def test_a_judge_failure_leaves_the_rules_answer_and_the_add_succeeds(
    st: Stub, llm: Llm, replies: list[Any], calls: int
) -> None:
    await add(st, OLD)
    llm.replies.extend(replies)
    new = await add(st, NEW)
    assert new.outcome == s.ADD_OUTCOME_CREATED and new.memory.content == NEW
    assert len(llm.calls) == calls and llm.replies == []
    assert await count(st) == 2


async def test_without_the_setting_the_judge_is_not_asked(
    tmp_path: Path, clock: ManualClock, llm: Llm
) -> None:
    async with (
        running_server(tmp_path / "data", clock=clock, **settings_for(llm)) as server,
        grpc.aio.insecure_channel(server.address) as ch,
    ):
        stub = Stub(ch)
        await add(stub, OLD)
        new = await add(stub, NEW)
        assert new.outcome == s.ADD_OUTCOME_CREATED and llm.calls == []


async def test_the_setting_without_an_llm_warns_and_gates_by_the_rules(
    tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="engram_server.app"):
        async with running(tmp_path, clock, None) as server, grpc.aio.insecure_channel(server.address) as ch:
            stub = Stub(ch)
            await add(stub, OLD)
            new = await add(stub, NEW)
            assert new.outcome == s.ADD_OUTCOME_CREATED
    assert any("ENGRAM_GATE_LLM is on but no LLM" in r.getMessage() for r in caplog.records)


async def test_the_judge_never_outlasts_the_callers_deadline(
    tmp_path: Path, clock: ManualClock, llm: Llm
) -> None:
    async def slow(_: Recorded) -> Reply:
        await asyncio.sleep(20)
        return chat_reply(restates(1))

    # the client's own timeout is longer than the call's deadline: only the deadline can end it
    async with (
        running(tmp_path, clock, llm, llm_timeout_seconds=60.0) as server,
        grpc.aio.insecure_channel(server.address) as ch,
    ):
        stub = Stub(ch)
        await add(stub, OLD)
        llm.replies.append(slow)
        new = await stub.AddMemory(s.AddMemoryRequest(content=NEW), timeout=6.0)
        assert new.outcome == s.ADD_OUTCOME_CREATED and new.memory.content == NEW  # the rules' answer
        assert len(llm.calls) == 1
        assert await count(stub) == 2
