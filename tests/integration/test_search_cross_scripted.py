"""Cross-script lexical credit reads the other script's candidates first, and ranks as reading all.

A search gives its best candidates lexical credit for the query's words they match across scripts
(an English word through a Chinese word's glosses or a name's reading, a Chinese word through an
English one). Only a candidate with words in a script the query has none in can match that way, so
the service reads those candidates' texts first, and the others' (whose direct matches weigh the
query's words) only when one of them does match. These run a chat of English, Chinese and mixed
turns through a live server and check, query by query, that the answer (ids, order, every score
field) is the answer of the plain way, which reads every candidate's text whenever one of them is
in the other script, and that fewer texts are read. Real server, real local model, a manual clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.adapters.storage.edge import EdgeStore
from engram_server.app import EngramServer
from engram_server.domain import crosslingual
from engram_server.domain.clock import ManualClock
from engram_server.domain.ranking import Weights, fuse_value, glossed_lexical, lexical_lift
from engram_server.domain.service.commands import SearchHit, SearchQuery, _Ranked
from engram_server.domain.text import lexically_blind
from engram_server.testing import running_server
from tests.integration.test_rescore_cues import _add

Stub = memory_service_pb2_grpc.MemoryServiceStub
COLLECTION = "chat"

# fmt: off
CHAT = [
    "Ann: Hi Bob! Did you finish the painting you started last week?",
    "Bob: Yes, I finished it on Sunday. It is a sunrise over the lake.",
    "Ann: I moved to Porto in March. The new flat is near the river.",
    "Bob: I started a pottery class on Thursdays. My first bowl cracked in the kiln.",
    "Ann: My sister is visiting in May; we are going hiking in the Gerês park.",
    "Zhang Min works as a nurse at the city hospital.",
    "Zhang Min's brother lives in Chengdu with his family.",
    "张敏每个周末都去打网球。",
    "林伟现在用 Emacs 写代码，他以前用 Sublime Text。",
    "Zhao Lei 的女儿今年上小学一年级。",
    "Zhao Lei 每周三晚上去游泳。",
    "He moved his code editing from Sublime Text to Emacs this spring and uses it every day.",
    "我的猫叫帕斯卡，它喜欢看船。",
    "我的陶艺课在星期四。",
    "代码审查请在周五之前完成。",
    "The user's laptop battery was replaced under warranty.",
    "Lin Wei booked a table for the team dinner on Friday.",
]
QUERIES = [
    "Does Zhang Min play tennis on weekends?",  # answered in Chinese: a cross match
    "Which editor does Lin Wei use?",  # the name by its pinyin
    "Zhao Lei 现在用什么编辑器写代码？",  # mixed question
    "你的猫叫什么名字？",  # Chinese question, English candidates
    "What happened to Bob's first bowl?",  # English, Chinese candidates that match nothing
    "When is the pottery class?",
    "team dinner",
    "陶艺课",
]
# fmt: on


async def _plain_cross_scripted(
    svc: Any, ranked: list[_Ranked], query: Any, depth: int, weights: Weights, *, lexical: set[str]
) -> list[_Ranked]:
    """The cross-script credit the plain way: every candidate's text read whenever one of them
    has words in a script the query has none in (the service before it read those first)."""
    other = {"cjk": "latin", "latin": "cjk"}
    wanted = {other[sc] for sc in query.word_scripts if sc in other}
    head, tail = ranked[:depth], ranked[depth:]
    usable = [r for r in head if r.collection in lexical]
    if not wanted or not any(wanted.intersection(r.script.split("+")) for r in usable):
        return ranked
    crosslingual.warm()
    full = await svc._full_records(usable)
    usable = [r for r in usable if r.id in full]
    q = crosslingual.glossed(query.text)
    matches = [crosslingual.cross_matches(q, crosslingual.glossed(full[r.id].content)) for r in usable]
    norms = glossed_lexical(np.array([r.lexical_norm for r in usable]), matches, q.units)
    if not any(across for _, across in matches):
        return ranked
    lifts = lexical_lift(np.array([r.score.relevance for r in usable]), norms, svc.policy.hybrid)
    changed: dict[str, _Ranked] = {}
    for r, lift in zip(usable, lifts.tolist(), strict=True):
        if lexically_blind(query.word_scripts, r.script):
            lift = max(lift, r.score.lexical)  # noqa: PLW2901
        if lift == r.score.lexical:
            continue
        s0 = r.score
        final = fuse_value(
            s0.relevance + lift + s0.episode + s0.rescore,
            s0.recency,
            s0.importance * 10.0,
            weights,
            mode=svc.policy.hybrid.fusion,
        )
        changed[r.id] = dataclasses.replace(r, score=dataclasses.replace(s0, final=final, lexical=lift))
    if not changed:
        return ranked
    created = {r.id: full[r.id].created_at if r.id in full else 0.0 for r in head}
    out = [changed.get(r.id, r) for r in head]
    out.sort(key=lambda r: (-r.score.final, -created.get(r.id, 0.0), r.id))
    return out + tail


@pytest.fixture
async def live(tmp_path: Path, clock: ManualClock) -> AsyncIterator[tuple[EngramServer, Stub]]:
    async with (
        running_server(
            tmp_path / "data", clock=clock, search_cache_entries=0, nearest_lists=0, rerank="off"
        ) as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        # (access counters written between the two searches of a query would reorder the second)
        setattr(srv.service, "_note_access", lambda records, now: None)  # noqa: B010
        yield srv, Stub(ch)


def _fields(hits: Sequence[SearchHit]) -> list[tuple[Any, ...]]:
    return [(h.memory.id, h.memory.content, dataclasses.astuple(h.score)) for h in hits]


async def test_answers_are_those_of_reading_every_candidate(
    live: tuple[EngramServer, Stub], clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, stub = live
    await _add(stub, clock, CHAT)
    clock.advance(3600.0)
    svc: Any = server.service
    store = server.store
    assert isinstance(store, EdgeStore)
    read: list[str] = []
    real = store.retrieve

    async def counting(collection: str, ids: Sequence[str], **kw: Any) -> Any:
        read.extend(ids)
        return await real(collection, ids, **kw)

    real_texts = store.texts

    async def counting_texts(collection: str, ids: Sequence[str]) -> Any:
        read.extend(ids)
        return await real_texts(collection, ids)

    monkeypatch.setattr(store, "retrieve", counting)
    monkeypatch.setattr(store, "texts", counting_texts)
    lifted = 0
    reads = {"new": 0, "plain": 0}
    plain = _plain_cross_scripted
    for q in QUERIES:
        query = SearchQuery(query=q, collections=(COLLECTION,), limit=10)
        read.clear()
        new = await svc.search(query)
        reads["new"] += len(read)
        read.clear()
        monkeypatch.setattr(svc, "_cross_scripted", lambda r, q, d, w, lx: plain(svc, r, q, d, w, lexical=lx))
        old = await svc.search(query)
        monkeypatch.undo()
        monkeypatch.setattr(store, "retrieve", counting)
        monkeypatch.setattr(store, "texts", counting_texts)
        reads["plain"] += len(read)
        assert _fields(new) == _fields(old), q
        lifted += any(h.score.lexical > 0 and h.memory.content in CHAT[7:9] for h in new)
    assert lifted >= 1  # a Chinese answer got credit for English words (the path is exercised)
    assert reads["new"] < reads["plain"], reads
