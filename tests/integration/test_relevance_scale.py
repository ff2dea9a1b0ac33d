"""One relevance scale (real model, embedded Qdrant, real gRPC): for the same two texts, the
relevance SearchMemories reports is the similarity AddMemory's write gate reports, within the
calibration's error; lexical and episode evidence are reported apart and never inflate it."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_server.app import EngramServer
from engram_server.domain.calibration import calibration_for
from engram_server.domain.clock import ManualClock
from tests.support.rpc import Stub, add, ts

# (stored memory, a second text): restatements and same-topic statements, English and Chinese.
PAIRS = (
    (
        "The staging database is backed up every night at 02:00 UTC.",
        "Every night at 2 AM UTC the staging DB is backed up.",
    ),
    ("Maria prefers window seats on long flights.", "On long flights Maria likes to sit by the window."),
    (
        "The office printer on floor 3 needs a new toner cartridge.",
        "Floor 3's printer is out of toner and needs a replacement cartridge.",
    ),
    ("林伟每周三下午在公司健身房练一个小时瑜伽。", "每个星期三下午，林伟都会去公司健身房做一小时瑜伽。"),
    ("项目周报每周五下午五点前发给王经理。", "每周五五点之前要把项目周报交给王经理。"),
    (
        "Our Kubernetes cluster runs on three nodes in eu-west-1.",
        "The Kubernetes cluster in eu-west-1 has three nodes.",
    ),
)
#: A statement query is embedded as a document and read on the document scale, as the gate reads a
#: pair: the two agree up to the storage's float rounding, nothing more.
TOLERANCE = 0.005


async def test_search_relevance_is_the_gates_similarity(stub: Stub) -> None:
    gaps: list[float] = []
    for i, (stored, other) in enumerate(PAIRS):
        gate_coll, search_coll = f"gate-{i}", f"search-{i}"
        first = await add(stub, stored, collection=gate_coll, type=m.MEMORY_TYPE_INSIGHT)
        kept = await add(stub, stored, collection=search_coll, type=m.MEMORY_TYPE_INSIGHT)
        second = await add(stub, other, collection=gate_coll, type=m.MEMORY_TYPE_INSIGHT)
        if second.outcome == s.ADD_OUTCOME_DUPLICATE:
            gate = second.duplicate_similarity
        else:
            near = {n.id: n.similarity for n in second.near_duplicates}
            assert first.memory.id in near, f"pair {i}: the gate reports no similarity (below 0.70)"
            gate = near[first.memory.id]
        found = await stub.SearchMemories(
            s.SearchMemoriesRequest(query=other, collections=[search_coll], limit=1)
        )
        (hit,) = found.results
        assert hit.memory.id == kept.memory.id
        gaps.append(abs(hit.score.relevance - gate))
    assert max(gaps) <= TOLERANCE, gaps


async def test_a_statement_reads_the_gate_scale_and_a_question_the_query_scale(
    stub: Stub, server: EngramServer
) -> None:
    """A statement query is a memory about to be written: embedded as a document and read on the
    document (gate) scale. A question or keywords are embedded as a query and read on the query
    scale. Checked against the model's own vectors and the calibration, computed here."""
    stored = "The staging database is backed up every night at 02:00 UTC."
    await add(stub, stored, collection="q", type=m.MEMORY_TYPE_INSIGHT)
    cal = calibration_for(server.embedder.model_id)
    (doc,) = await server.embedder.embed_documents([stored])

    async def expected(text: str, statement: bool) -> float:
        """The relevance the pair has on the reading's scale, from the model's own vectors."""
        if statement:
            (vec,) = await server.embedder.embed_documents([text])
            return cal.similarity(float(np.dot(vec, doc)))
        (vec,) = await server.embedder.embed_queries([text])
        return cal.relevance(float(np.dot(vec, doc)))

    cases = (
        # (text, reading asked for, read as a statement): unset readings follow the text's form,
        # a set one overrides it, both ways.
        ("The staging database is backed up nightly.", s.QUERY_READING_UNSPECIFIED, True),
        ("备份在每天夜里两点进行。", s.QUERY_READING_UNSPECIFIED, True),
        ("When is the staging database backed up?", s.QUERY_READING_UNSPECIFIED, False),
        ("staging database backup schedule", s.QUERY_READING_UNSPECIFIED, False),
        ("Backups. When do they run", s.QUERY_READING_UNSPECIFIED, False),
        ("When is the staging database backed up?", s.QUERY_READING_STATEMENT, True),
        ("The staging database is backed up nightly.", s.QUERY_READING_QUERY, False),
    )
    for text, reading, statement in cases:
        found = await stub.SearchMemories(
            s.SearchMemoriesRequest(query=text, collections=["q"], limit=1, reading=reading)
        )
        (hit,) = found.results
        want = await expected(text, statement)
        assert abs(hit.score.relevance - want) <= TOLERANCE, (text, reading, hit.score.relevance, want)


async def test_an_unknown_reading_is_invalid_argument(stub: Stub) -> None:
    await add(stub, "The staging database is backed up every night.", collection="q2")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.SearchMemories(s.SearchMemoriesRequest(query="backups", collections=["q2"], reading=7))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_lexical_and_episode_evidence_do_not_inflate_relevance(stub: Stub, clock: ManualClock) -> None:
    now = clock.now()
    answer = await add(
        stub,
        "Maria said the quarterly budget review moved to Thursday at 3 pm.",
        collection="ep",
        created_at=ts(now - 120),
    )
    remark = await add(
        stub,
        "Maria: by the way, my cat knocked a plant off the windowsill this morning.",
        collection="ep",
        created_at=ts(now - 60),
    )
    found = await stub.SearchMemories(
        s.SearchMemoriesRequest(query="When is the quarterly budget review?", collections=["ep"], limit=5)
    )
    by_id = {r.memory.id: r.score for r in found.results}
    assert found.results[0].memory.id == answer.memory.id
    lifted = by_id[remark.memory.id]
    # the episode lifts the remark's rank score, not its relevance
    assert lifted.episode > 0
    assert lifted.relevance < 0.70
    for score in by_id.values():
        assert score.lexical >= 0 and score.episode >= 0
        expected = (
            1.0 * (score.relevance + score.lexical + score.episode + score.rescore)
            + 0.05 * score.recency
            + 0.02 * score.importance
        )
        assert abs(score.final - expected) < 1e-5
