"""UpdateMemory located by a question (issue 26), through a real gRPC channel to a real server
(embedded Qdrant, the local model).

A locator that reads as a question ("When does the on-call rotation change?") names what to change,
not the text to change: it is read as search reads it (relevance), must clearly single out one
memory, and the new content must be about that memory (on its topic, and nearer to it than to the
question's other candidates: an update changes the fact, so it need not restate it). Otherwise the
update is refused with NO_MATCH or AMBIGUOUS_MATCH and ``reading: question`` in the error
metadata; nothing is written."""

from __future__ import annotations

import grpc

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.domain.service.commands import Policy
from tests.support.rpc import add, count, fails

Stub = memory_service_pb2_grpc.MemoryServiceStub
NO_MATCH = "ERROR_REASON_NO_MATCH"
AMBIGUOUS = "ERROR_REASON_AMBIGUOUS_MATCH"


def by_question(question: str, content: str, threshold: float = 0.0) -> s.UpdateMemoryRequest:
    return s.UpdateMemoryRequest(
        locate=s.SemanticLocator(content=question, threshold=threshold), content=content
    )


async def contents(stub: Stub, *ids: str) -> list[str]:
    out = []
    for memory_id in ids:
        got = await stub.GetMemory(s.GetMemoryRequest(id=memory_id))
        out.append(got.memory.content)
    return out


async def test_a_question_updates_the_memory_that_answers_it(stub: Stub) -> None:
    rotation = await add(stub, "The team's on-call rotation changes every Monday at 10:00.")
    standup = await add(stub, "The team's standup is at 9:30 every weekday.")
    resp = await stub.UpdateMemory(
        by_question(
            "When does the on-call rotation change?",
            "The team's on-call rotation changes every Tuesday at 10:00.",
        )
    )
    assert resp.memory.id == rotation.memory.id
    assert resp.memory.version == 2 and resp.changed
    assert "Monday" in resp.previous.content
    # The similarity of a question's match is its relevance, at or above the question floor.
    assert resp.similarity >= Policy().locate_question_min_relevance
    assert await contents(stub, standup.memory.id) == ["The team's standup is at 9:30 every weekday."]


async def test_chinese_and_mixed_script_questions(stub: Stub) -> None:
    home = await add(stub, "谢娟住在杭州西湖区。")
    await add(stub, "谢娟在一家银行上班。")
    sister = await add(stub, "谢娟的妹妹住在上海。")
    resp = await stub.UpdateMemory(by_question("谢娟现在住在哪里？", "谢娟住在北京朝阳区。"))
    assert resp.memory.id == home.memory.id
    assert await contents(stub, sister.memory.id) == ["谢娟的妹妹住在上海。"]

    editor = await add(stub, "Lin Wei 的默认编辑器是 Neovim。", collection="mixed")
    await add(stub, "Lin Wei 每周三晚上去游泳。", collection="mixed")
    resp = await stub.UpdateMemory(
        s.UpdateMemoryRequest(
            collection="mixed",
            locate=s.SemanticLocator(content="Lin Wei 现在用什么编辑器？"),
            content="Lin Wei 的默认编辑器是 VS Code。",
        )
    )
    assert resp.memory.id == editor.memory.id and resp.memory.version == 2


async def test_two_memories_answering_alike_are_ambiguous(stub: Stub) -> None:
    oslo = await add(stub, "Jonas's flight to Oslo leaves at 07:15 on Friday.")
    bergen = await add(stub, "Jonas's flight to Bergen leaves at 18:40 on Sunday.")
    err = await fails(
        stub.UpdateMemory(by_question("When does Jonas's flight leave?", "Jonas's flight leaves at 09:00.")),
        grpc.StatusCode.FAILED_PRECONDITION,
        AMBIGUOUS,
    )
    assert err.metadata["reading"] == "question"
    assert set(err.metadata["candidates"].split(",")) == {oslo.memory.id, bergen.memory.id}
    lead = float(err.metadata["best_relevance"]) - float(err.metadata["runner_up_relevance"])
    assert lead < Policy().locate_question_margin
    assert await count(stub, include_history=True) == 2  # nothing written


async def test_new_content_must_be_about_the_located_memory(stub: Stub) -> None:
    rotation = await add(stub, "The team's on-call rotation changes every Monday at 10:00.")
    err = await fails(
        stub.UpdateMemory(
            by_question("When does the on-call rotation change?", "Buy oat milk on the way home.")
        ),
        grpc.StatusCode.NOT_FOUND,
        NO_MATCH,
    )
    assert err.metadata["reading"] == "question"
    assert err.metadata["candidate"] == rotation.memory.id
    assert float(err.metadata["restate_similarity"]) < Policy().locate_question_topic_min
    assert await contents(stub, rotation.memory.id) == [rotation.memory.content]


async def test_a_changed_value_replaces_the_memory_it_answers(stub: Stub) -> None:
    """A memory whose only content is the value changed ("Marta lives in Lisbon." -> "... Berlin.")
    is not restated by the new content (same topic, another fact), and is still the one updated."""
    home = await add(stub, "Marta lives in Lisbon.")
    await add(stub, "Marta teaches maths at a school in Coimbra.")
    brother = await add(stub, "Marta's brother Rui lives in Madrid.")
    resp = await stub.UpdateMemory(by_question("Where does Marta live now?", "Marta lives in Berlin."))
    assert resp.memory.id == home.memory.id and resp.memory.version == 2
    assert await contents(stub, brother.memory.id) == ["Marta's brother Rui lives in Madrid."]


async def test_new_content_nearer_to_a_neighbour_is_refused(stub: Stub) -> None:
    """The question finds Marta's home, but the new content is about her brother: it never
    replaces her memory."""
    home = await add(stub, "Marta lives in Lisbon.")
    brother = await add(stub, "Marta's brother Rui lives in Madrid.")
    err = await fails(
        stub.UpdateMemory(by_question("Where does Marta live now?", "Marta's brother Rui lives in Berlin.")),
        grpc.StatusCode.NOT_FOUND,
        NO_MATCH,
    )
    assert err.metadata["reading"] == "question"
    assert err.metadata["candidate"] == home.memory.id
    assert err.metadata["nearest"] == brother.memory.id
    assert float(err.metadata["nearest_similarity"]) > float(err.metadata["restate_similarity"])
    assert await contents(stub, home.memory.id, brother.memory.id) == [
        "Marta lives in Lisbon.",
        "Marta's brother Rui lives in Madrid.",
    ]


async def test_a_question_nothing_answers_is_no_match(stub: Stub) -> None:
    await add(stub, "Backups of the orders database run nightly at 02:00 UTC.")
    err = await fails(
        stub.UpdateMemory(
            by_question(
                "Which cloud provider hosts the billing service?", "The billing service runs on Hetzner."
            )
        ),
        grpc.StatusCode.NOT_FOUND,
        NO_MATCH,
    )
    assert err.metadata["reading"] == "question"
    assert float(err.metadata["best_relevance"]) < Policy().locate_question_min_relevance


async def test_an_explicit_threshold_raises_the_question_floor(stub: Stub) -> None:
    await add(stub, "The team's on-call rotation changes every Monday at 10:00.")
    err = await fails(
        stub.UpdateMemory(
            by_question(
                "When does the on-call rotation change?",
                "The team's on-call rotation changes every Tuesday at 10:00.",
                threshold=0.99,
            )
        ),
        grpc.StatusCode.NOT_FOUND,
        NO_MATCH,
    )
    assert err.metadata == err.metadata | {"reading": "question", "min_relevance": "0.9900"}


async def test_a_statement_locator_is_read_as_before(stub: Stub) -> None:
    first = await add(stub, "Ana lives in Lisbon.")
    resp = await stub.UpdateMemory(by_question("Ana lives in Lisbon.", "Ana lives in Berlin."))
    assert resp.memory.id == first.memory.id
    err = await fails(
        stub.UpdateMemory(by_question("Ana's favourite film is Amélie.", "Ana's favourite film is Heat.")),
        grpc.StatusCode.NOT_FOUND,
        NO_MATCH,
    )
    assert err.metadata["reading"] == "statement"
