"""Topic names from the LLM, end to end: a live server whose LLM is the real ``openai`` client
talking over HTTP to the local OpenAI-wire server of :mod:`tests.reflection.test_reflection`.

The LLM names the topics when one is configured; when it fails (5xx, an answer that is not the
JSON asked for, a timeout) the topics keep their salient-terms (c-TF-IDF) names and naming is not
tried again before ``NAMING_RETRY_SECONDS``; the names it gives are cleaned and bounded before
they reach ListTopics or a context pack."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.app import EngramServer
from engram_server.domain.clock import ManualClock
from engram_server.domain.service.topics import NAMING_RETRY_SECONDS
from engram_server.domain.topics import MAX_NAME_CHARS, MAX_NAME_WORDS
from engram_server.testing import running_server
from tests.integration.test_topics import leaves, seed
from tests.reflection.test_reflection import chat_reply, insights, settings_for
from tests.support.wire import Recorded, Reply, WireServer

Stub = memory_service_pb2_grpc.MemoryServiceStub


class NamingLlm:
    """The chat endpoint: topic-naming requests go to ``name``, anything else (reflection) gets
    an empty answer."""

    def __init__(self, wire: WireServer) -> None:
        self.wire = wire
        self.base_url = wire.base_url
        self.name: Callable[[Recorded], Reply] = lambda _: chat_reply(json.dumps({"name": "unused"}))
        wire.handler = self._handle

    async def _handle(self, request: Recorded) -> Reply:
        if _is_naming(request):
            reply = self.name(request)
            if asyncio.iscoroutine(reply):
                return await reply  # type: ignore[no-any-return]
            return reply
        return chat_reply(insights())

    @property
    def naming_calls(self) -> list[Recorded]:
        return [r for r in self.wire.requests if _is_naming(r)]


def _is_naming(request: Recorded) -> bool:
    if request.path != "/v1/chat/completions":
        return False
    fmt = request.json.get("response_format") or {}
    return (fmt.get("json_schema") or {}).get("name") == "topic_name"


def _prompt(request: Recorded) -> str:
    return "\n".join(str(m.get("content")) for m in request.json["messages"])


@pytest.fixture
async def llm() -> AsyncIterator[NamingLlm]:
    wire = WireServer()
    await wire.start()
    try:
        yield NamingLlm(wire)
    finally:
        await wire.stop()


@pytest.fixture
async def srv(tmp_path: Path, clock: ManualClock, llm: NamingLlm) -> AsyncIterator[EngramServer]:
    async with running_server(tmp_path / "data", clock=clock, **settings_for(llm)) as server:  # type: ignore[arg-type]
        yield server


@pytest.fixture
async def st(srv: EngramServer) -> AsyncIterator[Stub]:
    async with grpc.aio.insecure_channel(srv.address) as ch:
        yield Stub(ch)


async def named(st: Stub, srv: EngramServer) -> dict[str, s.Topic]:
    """Read the topics (which starts naming the stale ones), wait for the naming, read again."""
    await leaves(st)
    await srv.service.drain()
    out = await leaves(st)
    page = await st.ListTopics(s.ListTopicsRequest())
    out.update({t.id: t for t in page.topics})
    return out


def clean(name: str) -> bool:
    return (
        0 < len(name) <= MAX_NAME_CHARS
        and len(name.split()) <= MAX_NAME_WORDS
        and "`" not in name
        and "\n" not in name
        and name == name.strip(" \"'.")
    )


async def test_the_llm_names_topics_and_its_names_are_cleaned(
    st: Stub, srv: EngramServer, llm: NamingLlm
) -> None:
    def name(request: Recorded) -> Reply:
        prompt = _prompt(request)
        if "Kubernetes" in prompt or "kubectl" in prompt:
            raw = '  "Kubernetes `ops`\n on\tclusters."  '
        else:
            raw = "Cooking\u0007 and " + " ".join(f"word{i}" for i in range(30)) + "!!"
        return chat_reply(json.dumps({"name": raw}))

    llm.name = name
    await seed(st)
    topics = await named(st, srv)
    assert llm.naming_calls, "the LLM was never asked"
    for call in llm.naming_calls:  # the prompt carries the topic's memories
        assert "Memories of one topic:" in _prompt(call)
    by_llm = [t for t in topics.values() if t.named_by == "llm"]
    assert by_llm, [(t.name, t.named_by, t.size) for t in topics.values()]
    assert all(clean(t.name) for t in by_llm), [t.name for t in by_llm]
    assert "Kubernetes ops on clusters" in {t.name for t in by_llm}
    assert all(t.named_by == "llm" for t in topics.values() if t.size >= 3)
    # The pack shows the LLM's names, with each topic's collection.
    pack = await st.GetContext(s.GetContextRequest(token_budget=4000))
    assert pack.topics and all(t.collection == "default" for t in pack.topics)
    shown = {t.name for t in pack.topics}
    assert shown <= {t.name for t in topics.values()} and shown & {t.name for t in by_llm}


def _server_error(_: Recorded) -> Reply:
    return Reply.of_json(500, {"error": {"message": "boom", "type": "server_error"}})


def _not_json(_: Recorded) -> Reply:
    return chat_reply("Sure! The topic is about cooking.")


async def _too_slow(_: Recorded) -> Reply:
    await asyncio.sleep(3.0)  # past llm_timeout_seconds (2 s)
    return chat_reply(json.dumps({"name": "late"}))


@pytest.mark.parametrize("failure", [_server_error, _not_json, _too_slow], ids=["5xx", "bad-json", "timeout"])
async def test_a_failing_llm_leaves_the_terms_names_and_is_retried_later(
    st: Stub, srv: EngramServer, llm: NamingLlm, clock: ManualClock, failure: Callable[[Recorded], Reply]
) -> None:
    llm.name = failure
    await seed(st)
    topics = await named(st, srv)
    calls = len(llm.naming_calls)
    assert calls >= 1
    assert all(t.named_by == "terms" and t.name for t in topics.values()), [
        (t.name, t.named_by) for t in topics.values()
    ]
    # Not asked again at every read while the LLM is failing...
    await named(st, srv)
    assert len(llm.naming_calls) == calls
    # ...but once the retry time has passed, and then its names are used.
    llm.name = lambda _: chat_reply(json.dumps({"name": "Things the user does"}))
    clock.advance(NAMING_RETRY_SECONDS + 1)
    topics = await named(st, srv)
    assert len(llm.naming_calls) > calls
    assert "Things the user does" in {t.name for t in topics.values() if t.named_by == "llm"}
