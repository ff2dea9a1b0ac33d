"""RunReflection end to end: a live Engram server whose LLM is the real ``openai`` client talking
over HTTP to a local server that speaks the OpenAI chat-completions wire protocol (no hosted LLM is
reachable here), scripted per test."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.app import EngramServer
from engram_server.domain.clock import ManualClock
from engram_server.testing import rich, running_server
from tests.support.wire import Recorded, Reply, WireServer

Stub = memory_service_pb2_grpc.MemoryServiceStub
HOUR = 3600.0

MEMORIES = [
    ("Ran the database migration on staging first; production went smoothly.", 8),
    ("Skipped staging for the cache migration and production broke for an hour.", 9),
    ("The rollback of the payments migration took 40 minutes because no dry run existed.", 8),
    ("Team agreed that every schema change needs a dry run on staging.", 7),
    ("Lunch was ramen today.", 2),
    ("Deployed the new search service on Thursday without issues.", 6),
]


def chat_reply(content: str, *, model: str = "test-llm", status: int = 200) -> Reply:
    return Reply.of_json(
        status,
        {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": 1_767_225_600,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": {"prompt_tokens": 321, "completion_tokens": 45, "total_tokens": 366},
        },
    )


def insights(*items: dict[str, Any]) -> str:
    return json.dumps({"insights": list(items)})


LESSONS = [
    "Caching the product catalogue in Redis cut page load time in half.",
    "The on-call rotation was changed to one week per engineer.",
    "Customers in Japan prefer invoices in yen with tax shown separately.",
    "Flaky integration tests were traced to a shared temporary directory.",
    "The marketing site moved from WordPress to a static generator.",
    "Backups are restored into a scratch cluster every Monday to verify them.",
    "A memory leak in the PDF renderer appeared only with embedded fonts.",
    "Support tickets spike every month right after the billing run.",
    "The Android app crashes on devices with less than 2 GB of RAM.",
    "Our GPU cluster is idle most nights; batch jobs could run there.",
    "Password reset emails were landing in spam because of a missing DKIM record.",
    "The data team wants column-level lineage for the finance tables.",
    "Kubernetes pods were evicted when log volumes filled the node disk.",
    "Sales asked for a CSV export of the usage dashboard.",
    "The office network drops every day at noon when the backup job starts.",
    "Design reviews go faster when mock-ups are shared a day in advance.",
]

GOOD = insights(
    {
        "content": "Schema migrations must be rehearsed with a dry run on staging before production.",
        "importance": 9,
        "confidence": 0.9,
        "tags": ["deploys", "databases"],
        "source_indices": [1, 2, 3, 4],
    },
    {
        "content": "The user may prefer noodle dishes for lunch.",
        "importance": 3,
        "confidence": 0.3,
        "tags": ["food"],
        "source_indices": [5],
    },
)


class Llm:
    """The scripted chat-completions endpoint."""

    def __init__(self, wire: WireServer) -> None:
        self.wire = wire
        self.replies: list[Reply | Callable[[Recorded], Any]] = []
        wire.handler = self._handle

    async def _handle(self, request: Recorded) -> Reply:
        assert request.path == "/v1/chat/completions", request.path
        if not self.replies:
            return chat_reply(insights())
        nxt = self.replies.pop(0)
        if callable(nxt):
            result = nxt(request)
            if asyncio.iscoroutine(result):
                result = await result
            assert isinstance(result, Reply)
            return result
        return nxt

    @property
    def calls(self) -> list[Recorded]:
        return [r for r in self.wire.requests if r.path == "/v1/chat/completions"]


def settings_for(llm: Llm, **extra: Any) -> dict[str, Any]:
    return {
        "llm_base_url": llm.wire.base_url,
        "llm_api_key": "sk-local-test",
        "llm_model": "test-llm",
        "llm_timeout_seconds": 2.0,
        "llm_max_retries": 1,
        **extra,
    }


@pytest.fixture
async def srv(tmp_path: Path, clock: ManualClock, llm: Llm) -> AsyncIterator[EngramServer]:
    async with running_server(tmp_path / "data", clock=clock, **settings_for(llm)) as server:
        yield server


@pytest.fixture
async def st(srv: EngramServer) -> AsyncIterator[Stub]:
    async with grpc.aio.insecure_channel(srv.address) as ch:
        yield Stub(ch)


async def seed(st: Stub, collection: str = "") -> list[s.AddMemoryResponse]:
    out = []
    for text, importance in MEMORIES:
        out.append(
            await st.AddMemory(s.AddMemoryRequest(content=text, importance=importance, collection=collection))
        )
    return out


async def reflect(st: Stub, **kw: Any) -> s.RunReflectionResponse:
    resp: s.RunReflectionResponse = await st.RunReflection(s.RunReflectionRequest(**kw))
    return resp


async def test_a_run_stores_insights_keeps_drafts_and_marks_sources(
    st: Stub, llm: Llm, clock: ManualClock
) -> None:
    added = await seed(st)
    llm.replies.append(chat_reply(GOOD))
    r = await reflect(st)
    assert r.outcome == s.REFLECTION_OUTCOME_COMPLETED, r.detail
    assert r.reflection_collection == "default_reflection" and r.model == "test-llm"
    assert r.unreflected_count == 6 and r.unreflected_importance == 40
    assert [x.importance for x in r.sources] == [9, 8, 8, 7, 6, 2]  # most important first

    # the request the real openai client sent: model, messages, strict JSON schema
    body = llm.calls[0].json
    assert body["model"] == "test-llm"
    assert llm.calls[0].headers["authorization"] == "Bearer sk-local-test"
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["strict"] is True
    assert "[1] (event, importance 9" in body["messages"][1]["content"]

    [ins] = r.insights
    assert ins.type == m.MEMORY_TYPE_INSIGHT and ins.source == m.SOURCE_SYSTEM
    assert ins.source_type == m.SOURCE_TYPE_REFLECTION and ins.collection == "default_reflection"
    assert list(ins.tags) == ["source:reflection", "deploys", "databases"] and ins.importance == 9
    by_content = {a.memory.content: a.memory.id for a in added}
    assert set(ins.derived_from) == {by_content[MEMORIES[i][0]] for i in (1, 0, 2, 3)}
    assert ins.metadata["confidence"] == "0.90" and not ins.draft
    assert not ins.HasField("valid_until")  # insight, importance ≥ 8: never expires

    [draft] = r.drafts
    assert draft.draft and draft.content.startswith("The user may prefer noodle")
    # drafts are retrievable but never searched
    got = await st.GetMemory(s.GetMemoryRequest(collection="default_reflection", id=draft.id))
    assert got.memory.draft
    found = await st.SearchMemories(
        s.SearchMemoriesRequest(query="noodle lunch preference", collections=["default_reflection"], limit=10)
    )
    assert draft.id not in [x.memory.id for x in found.results]
    found = await st.SearchMemories(
        s.SearchMemoriesRequest(
            query="how to run schema migrations", collections=["default", "default_reflection"]
        )
    )
    assert ins.id in [x.memory.id for x in found.results]
    listed = await st.ListMemories(s.ListMemoriesRequest(collection="default_reflection"))
    assert {x.id for x in listed.memories} == {ins.id, draft.id}

    # every source is marked reflected
    for a in added:
        mem = (await st.GetMemory(s.GetMemoryRequest(id=a.memory.id))).memory
        assert mem.reflected_at.seconds == int(clock.now())


async def test_gates_in_order(st: Stub, llm: Llm, clock: ManualClock) -> None:
    # importance gate first on an empty collection
    r = await reflect(st)
    assert (r.outcome, r.throttled_by) == (s.REFLECTION_OUTCOME_THROTTLED, s.REFLECTION_GATE_IMPORTANCE)
    await st.AddMemory(s.AddMemoryRequest(content="A single very important memory.", importance=10))
    r = await reflect(st)
    assert r.throttled_by == s.REFLECTION_GATE_IMPORTANCE and r.unreflected_importance == 10
    await seed(st)
    assert llm.calls == []  # no gate passed yet, no LLM call

    llm.replies.append(chat_reply(GOOD))
    assert (await reflect(st)).outcome == s.REFLECTION_OUTCOME_COMPLETED
    # interval gate: the next run is refused with the time it becomes allowed
    await seed(st, collection="")  # duplicates: nothing new, but the gate comes first anyway
    r = await reflect(st)
    assert (r.outcome, r.throttled_by) == (s.REFLECTION_OUTCOME_THROTTLED, s.REFLECTION_GATE_MIN_INTERVAL)
    assert r.next_run_after.seconds == int(clock.now() + 2 * HOUR)
    assert "minimum interval" in r.detail

    # daily cap: force skips the interval, not the cap
    produced = [
        "Performance work pays off most on the catalogue pages.",
        "Operational toil concentrates around monthly billing.",
    ]
    for i in range(2):
        for text in LESSONS[4 * i : 4 * i + 4]:
            await st.AddMemory(s.AddMemoryRequest(content=text, importance=10))
        proposal = {
            "content": produced[i],
            "importance": 7,
            "confidence": 0.8,
            "tags": [],
            "source_indices": [1],
        }
        llm.replies.append(chat_reply(insights(proposal)))
        r = await reflect(st, force=True)
        assert r.outcome == s.REFLECTION_OUTCOME_COMPLETED, r.detail
    for text in LESSONS[8:12]:
        await st.AddMemory(s.AddMemoryRequest(content=text, importance=10))
    r = await reflect(st, force=True)
    assert (r.outcome, r.throttled_by) == (s.REFLECTION_OUTCOME_THROTTLED, s.REFLECTION_GATE_DAILY_CAP)
    assert r.next_run_after.seconds == int(clock.now() + 24 * HOUR)
    clock.advance(24 * HOUR + 1)
    llm.replies.append(chat_reply(insights()))
    assert (await reflect(st)).outcome == s.REFLECTION_OUTCOME_NO_INSIGHT


async def test_dry_run_reports_without_calling_or_writing(st: Stub, llm: Llm) -> None:
    await seed(st)
    r = await reflect(st, dry_run=True)
    assert r.outcome == s.REFLECTION_OUTCOME_WOULD_RUN and len(r.sources) == 6
    assert llm.calls == []
    cols = await st.ListCollections(s.ListCollectionsRequest())
    assert [c.name for c in cols.collections] == ["default"]
    # and a dry run does not consume the interval
    llm.replies.append(chat_reply(GOOD))
    assert (await reflect(st)).outcome == s.REFLECTION_OUTCOME_COMPLETED


BAD_OUTPUTS = {
    "not json": chat_reply("Sure! Here are some insights: migrations are risky."),
    "json array": chat_reply("[1, 2, 3]"),
    "missing insights": chat_reply(json.dumps({"ideas": []})),
    "too many": chat_reply(
        insights(
            *(
                {"content": f"i{n}", "importance": 5, "confidence": 0.9, "tags": [], "source_indices": []}
                for n in range(4)
            )
        )
    ),
    "bad importance": chat_reply(
        insights({"content": "x", "importance": 11, "confidence": 0.9, "tags": [], "source_indices": []})
    ),
    "string confidence": chat_reply(
        insights({"content": "x", "importance": 5, "confidence": "high", "tags": [], "source_indices": []})
    ),
    "empty content": chat_reply(
        insights({"content": " ", "importance": 5, "confidence": 0.9, "tags": [], "source_indices": []})
    ),
    "empty answer": chat_reply(""),
}


@pytest.mark.parametrize("case", sorted(BAD_OUTPUTS))
async def test_bad_model_output_writes_nothing(st: Stub, llm: Llm, srv: EngramServer, case: str) -> None:
    added = await seed(st)
    llm.replies.append(BAD_OUTPUTS[case])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await reflect(st)
    err = rich(info.value)
    assert (err.code, err.reason) == (grpc.StatusCode.UNAVAILABLE, "ERROR_REASON_LLM_INVALID_OUTPUT"), err
    await assert_untouched(st, srv, added)


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_llm_http_errors_write_nothing_and_are_retried(
    st: Stub, llm: Llm, srv: EngramServer, status: int
) -> None:
    added = await seed(st)
    llm.replies += [chat_reply("{}", status=status), chat_reply("{}", status=status)]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await reflect(st)
    err = rich(info.value)
    assert (err.code, err.reason) == (grpc.StatusCode.UNAVAILABLE, "ERROR_REASON_LLM_UNAVAILABLE")
    assert err.metadata["http_status"] == str(status)
    assert len(llm.calls) == 2  # one retry (llm_max_retries=1)
    assert "sk-local-test" not in err.message
    await assert_untouched(st, srv, added)
    # a transient error then success: the bounded retry recovers
    llm.replies += [chat_reply("{}", status=status), chat_reply(GOOD)]
    assert (await reflect(st)).outcome == s.REFLECTION_OUTCOME_COMPLETED


async def test_llm_timeout_writes_nothing(st: Stub, llm: Llm, srv: EngramServer) -> None:
    added = await seed(st)

    async def stall(_: Recorded) -> Reply:
        await asyncio.sleep(5)
        return chat_reply(GOOD)

    llm.replies += [stall, stall]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await reflect(st)
    err = rich(info.value)
    assert err.reason == "ERROR_REASON_LLM_UNAVAILABLE" and "timed out" in err.message
    await assert_untouched(st, srv, added)


async def assert_untouched(st: Stub, srv: EngramServer, added: list[s.AddMemoryResponse]) -> None:
    cols = await st.ListCollections(s.ListCollectionsRequest())
    assert [c.name for c in cols.collections] == ["default"]  # no reflection collection written
    for a in added:
        assert not (await st.GetMemory(s.GetMemoryRequest(id=a.memory.id))).memory.HasField("reflected_at")
    assert await srv.store.get_state("reflection.default") is None  # the run was not counted


async def test_dedup_against_existing_insights(st: Stub, llm: Llm, clock: ManualClock) -> None:
    await seed(st)
    llm.replies.append(chat_reply(GOOD))
    first = await reflect(st)
    assert first.outcome == s.REFLECTION_OUTCOME_COMPLETED
    for text in LESSONS[:5]:
        await st.AddMemory(s.AddMemoryRequest(content=text, importance=9))
    clock.advance(3 * HOUR)
    same = json.loads(GOOD)["insights"][0]
    same["content"] = (
        "Schema migrations must be rehearsed with a dry run on staging before going to production."
    )
    llm.replies.append(chat_reply(insights(same)))
    r = await reflect(st)
    assert r.outcome == s.REFLECTION_OUTCOME_NO_INSIGHT, r.detail
    assert [d.id for d in r.duplicates] == [first.insights[0].id]
    assert r.duplicates[0].similarity >= 0.78
    # nothing produced: the new sources stay unreflected
    assert (await reflect(st, dry_run=True, force=True)).unreflected_count == 5


async def test_dedup_keeps_insights_whose_specifics_differ(st: Stub, llm: Llm, clock: ManualClock) -> None:
    """Reflection's own dedup checks the specifics as the write gate does: the same lesson with
    another number is a different insight, against stored insights and within one run."""
    await seed(st)
    base = json.loads(GOOD)["insights"][0]
    first = dict(base, content="Restoring the production database from backup takes about 2 hours.")
    llm.replies.append(chat_reply(insights(first)))
    done = await reflect(st)
    assert done.outcome == s.REFLECTION_OUTCOME_COMPLETED
    for text in LESSONS[:5]:
        await st.AddMemory(s.AddMemoryRequest(content=text, importance=9))
    clock.advance(3 * HOUR)
    changed = dict(base, content="Restoring the production database from backup takes about 6 hours.")
    copy = dict(base, content="Restoring the production database from backup takes about 2 hours.")
    llm.replies.append(chat_reply(insights(changed, copy)))
    r = await reflect(st)
    assert r.outcome == s.REFLECTION_OUTCOME_COMPLETED, r.detail
    assert [i.content for i in r.insights] == [changed["content"]]
    assert [d.id for d in r.duplicates] == [done.insights[0].id]  # the copy is still a duplicate


async def test_no_llm_configured_is_a_clear_precondition(tmp_path: Path) -> None:
    async with running_server(tmp_path) as server, grpc.aio.insecure_channel(server.address) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await Stub(ch).RunReflection(s.RunReflectionRequest())
        err = rich(info.value)
        assert (err.code, err.reason) == (
            grpc.StatusCode.FAILED_PRECONDITION,
            "ERROR_REASON_LLM_NOT_CONFIGURED",
        )
        assert "ENGRAM_LLM_BASE_URL" in err.message


async def test_reflection_collections_are_not_reflected_on(st: Stub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await reflect(st, collection="default_reflection")
    assert rich(info.value).violations.keys() == {"collection"}


async def test_throttle_state_survives_a_restart(tmp_path: Path, llm: Llm) -> None:
    clock = ManualClock()
    async with (
        running_server(tmp_path, clock=clock, **settings_for(llm)) as server,
        grpc.aio.insecure_channel(server.address) as ch,
    ):
        await seed(Stub(ch))
        llm.replies.append(chat_reply(GOOD))
        assert (await reflect(Stub(ch))).outcome == s.REFLECTION_OUTCOME_COMPLETED
    clock.advance(HOUR)
    async with (
        running_server(tmp_path, clock=clock, **settings_for(llm)) as server,
        grpc.aio.insecure_channel(server.address) as ch,
    ):
        r = await reflect(Stub(ch))
        assert r.throttled_by == s.REFLECTION_GATE_MIN_INTERVAL
        assert r.next_run_after.seconds == int(clock.now() + HOUR)


async def test_concurrent_runs_exactly_one_runs(st: Stub, llm: Llm) -> None:
    await seed(st)
    release = asyncio.Event()
    called = asyncio.Event()

    async def slow(_: Recorded) -> Reply:
        called.set()
        await release.wait()
        return chat_reply(GOOD)

    llm.replies.append(slow)
    first = asyncio.ensure_future(reflect(st))
    await asyncio.wait_for(called.wait(), 30)
    others = await asyncio.gather(*(reflect(st) for _ in range(4)))
    assert {(o.outcome, o.throttled_by) for o in others} == {
        (s.REFLECTION_OUTCOME_THROTTLED, s.REFLECTION_GATE_IN_PROGRESS)
    }
    release.set()
    assert (await first).outcome == s.REFLECTION_OUTCOME_COMPLETED
    assert len(llm.calls) == 1


async def test_periodic_reflection_is_activity_driven(tmp_path: Path, llm: Llm) -> None:
    clock = ManualClock()
    async with (
        running_server(tmp_path, clock=clock, **settings_for(llm)) as server,
        grpc.aio.insecure_channel(server.address) as ch,
    ):
        st = Stub(ch)
        await seed(st)
        llm.replies.append(chat_reply(GOOD))
        reports = await server.reflector.run_due()
        assert reports["default"].outcome.value == "completed"
        clock.advance(3 * HOUR)
        assert await server.reflector.run_due() == {}  # nothing written since: skipped, no LLM call
        assert len(llm.calls) == 1
        await st.AddMemory(s.AddMemoryRequest(content=LESSONS[12], importance=9))
        reports = await server.reflector.run_due()
        gate = reports["default"].gate
        assert gate is not None and gate.value == "importance"  # ran the gates again


async def runs(st: Stub, **kw: Any) -> list[s.ReflectionRun]:
    resp: s.ListReflectionRunsResponse = await st.ListReflectionRuns(s.ListReflectionRunsRequest(**kw))
    return list(resp.runs)


async def test_runs_that_called_the_llm_are_kept_newest_first_across_restarts(
    tmp_path: Path, llm: Llm
) -> None:
    clock = ManualClock()
    async with (
        running_server(tmp_path, clock=clock, **settings_for(llm)) as server,
        grpc.aio.insecure_channel(server.address) as ch,
    ):
        st = Stub(ch)
        assert await runs(st) == []
        added = await seed(st)
        llm.replies.append(chat_reply(GOOD))
        done = await reflect(st)
        started_first = int(clock.now())
        assert (await reflect(st)).outcome == s.REFLECTION_OUTCOME_THROTTLED  # answered, not kept
        assert (await reflect(st, dry_run=True, force=True)).outcome != s.REFLECTION_OUTCOME_COMPLETED

        clock.advance(3 * HOUR)
        for text in LESSONS[:5]:
            await st.AddMemory(s.AddMemoryRequest(content=text, importance=9))
        llm.replies += [chat_reply("{}", status=500), chat_reply("{}", status=500)]
        with pytest.raises(grpc.aio.AioRpcError):
            await reflect(st)

        clock.advance(3 * HOUR)
        llm.replies.append(chat_reply(insights()))
        assert (await server.reflector.run_due())["default"].outcome.value == "no_insight"

    async with (
        running_server(tmp_path, clock=clock, **settings_for(llm)) as server,
        grpc.aio.insecure_channel(server.address) as ch,
    ):
        st = Stub(ch)
        newest, failed, first = await runs(st)
        assert [r.outcome for r in (newest, failed, first)] == [
            s.REFLECTION_OUTCOME_NO_INSIGHT,
            s.REFLECTION_OUTCOME_FAILED,
            s.REFLECTION_OUTCOME_COMPLETED,
        ]
        assert (newest.scheduled, failed.scheduled, first.scheduled) == (True, False, False)
        assert first.started_at.seconds == started_first and first.model == "test-llm"
        assert list(first.insight_ids) == [x.id for x in done.insights]
        assert list(first.draft_ids) == [x.id for x in done.drafts]
        assert set(first.source_ids) == {a.memory.id for a in added}
        assert "LlmUnavailable" in failed.detail and not failed.insight_ids
        assert [r.outcome for r in await runs(st, limit=1)] == [s.REFLECTION_OUTCOME_NO_INSIGHT]
        assert await runs(st, collection="elsewhere") == []
        for bad in (-1, 51):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await runs(st, limit=bad)
            err = rich(info.value)
            assert (err.code, err.reason) == (
                grpc.StatusCode.INVALID_ARGUMENT,
                "ERROR_REASON_INVALID_ARGUMENT",
            )
            assert set(err.violations) == {"limit"}


# ------------------------------------------------------------------ slot compaction by the LLM


async def test_slot_overflow_is_summarised_by_the_llm(st: Stub, llm: Llm, srv: EngramServer) -> None:
    lines = [f"Preference {i}: the user likes keyboard layout number {i} on laptops." for i in range(5)]
    assert srv.service.tokenizer is not None
    # Four lines fit, the fifth overflows (the capacity counted by the model's own tokenizer).
    (four,) = await srv.service.tokenizer.count(["\n".join(lines[:4])])
    srv.service.slot_capacity_tokens = four
    llm.replies.append(chat_reply(json.dumps({"summary": "Likes keyboard layouts 0-1."})))
    for line in lines:
        got = await st.UpdateSlot(s.UpdateSlotRequest(name="user_preferences", content=line))
    assert got.compaction == s.SLOT_COMPACTION_LLM
    assert got.slot.content.startswith("Likes keyboard layouts 0-1.\n")
    assert got.slot.content == "Likes keyboard layouts 0-1.\n" + "\n".join(lines[2:])
    assert got.slot.tokens <= four and got.slot.compactions == 1
    (call,) = llm.calls
    sent = call.json
    assert lines[0] in sent["messages"][-1]["content"]  # the oldest content went to the model
    assert lines[-1] not in sent["messages"][-1]["content"]  # the newest stays verbatim


async def test_slot_falls_back_to_truncation_when_the_llm_fails(
    st: Stub, llm: Llm, srv: EngramServer
) -> None:
    srv.service.slot_capacity_tokens = 30
    llm.replies.extend([chat_reply("not json at all")] * 3)
    for i in range(4):
        got = await st.UpdateSlot(
            s.UpdateSlotRequest(name="guidance", content=f"Rule {i}: always double-check step {i} twice.")
        )
    assert got.compaction == s.SLOT_COMPACTION_TRUNCATION
    assert "earlier tokens removed" in got.slot.content and got.slot.tokens <= 30
