"""Contradictions supersede (issue 30, item 2), through a real gRPC channel to a real server
(embedded Qdrant, the local model): a new memory that states another value for the same subject
retires the stored one (history, never searched), says so in ``conflicts``; different subjects
are left alone; report mode, the server setting and the protected types."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.domain.clock import ManualClock
from engram_server.testing import running_server
from tests.support.rpc import add, count, ts

Stub = memory_service_pb2_grpc.MemoryServiceStub


async def search_ids(stub: Stub, query: str) -> list[str]:
    resp = await stub.SearchMemories(s.SearchMemoriesRequest(query=query, limit=10))
    return [r.memory.id for r in resp.results]


async def assert_superseded(
    stub: Stub, old: s.AddMemoryResponse, new: s.AddMemoryResponse, basis: str
) -> None:
    (conflict,) = [c for c in new.conflicts if c.memory_id == old.memory.id]
    assert conflict.superseded, conflict.explanation
    assert conflict.basis == basis
    assert conflict.content == old.memory.content and conflict.explanation
    # Kept in history: the stored memory names its successor, the successor lists it.
    got = await stub.GetMemory(s.GetMemoryRequest(id=old.memory.id))
    assert got.memory.superseded_by == new.memory.id
    current = await stub.GetMemory(s.GetMemoryRequest(id=new.memory.id, include_history=True))
    assert old.memory.id in [h.id for h in current.history]
    # Never returned by search, even for its own words.
    found = await search_ids(stub, old.memory.content)
    assert old.memory.id not in found and new.memory.id in found


async def test_moved_from_x_to_y_supersedes_the_old_fact(stub: Stub) -> None:
    old = await add(stub, "The project uses Express for its HTTP server.")
    new = await add(stub, "The project moved from Express to Fastify.")
    assert new.outcome == s.ADD_OUTCOME_CREATED
    await assert_superseded(stub, old, new, "change_statement")
    assert await count(stub) == 1
    assert await count(stub, include_history=True) == 2


async def test_a_changed_number_supersedes_with_the_old_and_new_values(stub: Stub) -> None:
    old = await add(stub, "The staging cluster has 12 nodes.")
    new = await add(stub, "The staging cluster has 16 nodes.")
    await assert_superseded(stub, old, new, "specifics")
    (conflict,) = new.conflicts
    (spec,) = conflict.specifics
    assert (spec.kind, list(spec.existing_values), list(spec.new_values)) == ("number", ["12"], ["16"])


async def test_a_changed_date_and_a_negation_supersede(stub: Stub) -> None:
    freeze = await add(stub, "The deploy freeze starts on Friday.")
    moved = await add(stub, "The deploy freeze starts on Monday.")
    await assert_superseded(stub, freeze, moved, "specifics")
    diet = await add(stub, "Maria is vegetarian.")
    changed = await add(stub, "Maria is not vegetarian anymore.")
    await assert_superseded(stub, diet, changed, "change_statement")


async def test_chinese_change_statements_and_numbers_supersede(stub: Stub) -> None:
    home = await add(stub, "用户住在北京。")
    moved = await add(stub, "用户从北京搬到了上海。")
    await assert_superseded(stub, home, moved, "change_statement")
    nodes = await add(stub, "测试集群有12个节点。")
    more = await add(stub, "测试集群有16个节点。")
    await assert_superseded(stub, nodes, more, "specifics")
    coffee = await add(stub, "用户每天喝咖啡。")
    quit_ = await add(stub, "用户不再喝咖啡了。")
    await assert_superseded(stub, coffee, quit_, "change_statement")


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("Invoice 4471 was paid on March 3.", "Invoice 4472 was paid on March 5."),
        ("发票4471已于3月3日付款。", "发票4472已于3月5日付款。"),
        ("Priya leads the payments team.", "Daniel leads the search team."),
        ("The user ran 5 km on Monday.", "The user ran 8 km on Wednesday."),
        ("Server db-eu-3 has 64 GB of RAM.", "Server db-eu-4 has 64 GB of RAM."),
        # Templated records told apart by a counter-like label after any noun.
        (
            "writer 1 noted fact number 10 about billing.",
            "writer 2 noted fact number 10 about billing.",
        ),
        ("作者3记录了第10条关于计费的事实。", "作者4记录了第10条关于计费的事实。"),
    ],
)
async def test_different_subjects_are_not_superseded(stub: Stub, first: str, second: str) -> None:
    a = await add(stub, first)
    b = await add(stub, second)
    assert b.outcome == s.ADD_OUTCOME_CREATED
    assert not [c for c in b.conflicts if c.superseded]
    got = await stub.GetMemory(s.GetMemoryRequest(id=a.memory.id))
    assert got.memory.superseded_by == ""
    assert await count(stub) == 2


async def test_report_mode_per_request_lists_the_conflict_and_changes_nothing(stub: Stub) -> None:
    old = await add(stub, "The API rate limit is 100 requests per minute.")
    new = await add(
        stub, "The API rate limit is 250 requests per minute.", contradictions=s.CONTRADICTION_MODE_REPORT
    )
    (conflict,) = new.conflicts
    assert conflict.memory_id == old.memory.id and not conflict.superseded
    assert conflict.basis == "specifics"
    got = await stub.GetMemory(s.GetMemoryRequest(id=old.memory.id))
    assert got.memory.superseded_by == ""
    assert await count(stub) == 2
    off = await add(
        stub, "The API rate limit is 300 requests per minute.", contradictions=s.CONTRADICTION_MODE_OFF
    )
    assert list(off.conflicts) == []


async def test_the_server_setting_report_only_reports(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path / "data", contradictions="report") as srv,
        grpc.aio.insecure_channel(srv.address) as ch,
    ):
        stub = Stub(ch)
        old = await add(stub, "The staging cluster has 12 nodes.")
        new = await add(stub, "The staging cluster has 16 nodes.")
        assert [c.superseded for c in new.conflicts] == [False]
        # A request may still ask for supersede.
        newer = await add(
            stub, "The staging cluster has 20 nodes.", contradictions=s.CONTRADICTION_MODE_SUPERSEDE
        )
        assert {c.memory_id for c in newer.conflicts if c.superseded} >= {new.memory.id}
        assert old.memory.id in {c.memory_id for c in newer.conflicts}


async def test_a_protected_memory_is_superseded_only_by_its_own_type(stub: Stub) -> None:
    ident: dict[str, Any] = {"type": m.MEMORY_TYPE_IDENTITY}
    old = await add(stub, "The user's manager is Priya.", **ident)
    event = await add(stub, "The user's manager is Daniel.")
    (conflict,) = event.conflicts
    assert not conflict.superseded and "identity" in conflict.explanation
    assert (await stub.GetMemory(s.GetMemoryRequest(id=old.memory.id))).memory.superseded_by == ""
    again = await add(stub, "The user's manager is Tomas.", **ident)
    assert old.memory.id in {c.memory_id for c in again.conflicts if c.superseded}


async def test_an_older_import_does_not_supersede_a_newer_memory(stub: Stub, clock: ManualClock) -> None:
    new = await add(stub, "The staging cluster has 16 nodes.")
    old_import = await add(stub, "The staging cluster has 12 nodes.", created_at=ts(clock.now() - 86_400))
    (conflict,) = old_import.conflicts
    assert not conflict.superseded and "older" in conflict.explanation
    assert (await stub.GetMemory(s.GetMemoryRequest(id=new.memory.id))).memory.superseded_by == ""


async def test_a_batch_supersedes_an_earlier_item_of_the_same_call(stub: Stub) -> None:
    resp = await stub.AddMemories(
        s.AddMemoriesRequest(
            memories=[
                s.NewMemory(content="The staging cluster has 12 nodes."),
                s.NewMemory(content="The staging cluster has 16 nodes."),
            ]
        )
    )
    first, second = resp.results
    assert [c.memory_id for c in second.conflicts if c.superseded] == [first.memory.id]
    got = await stub.GetMemory(s.GetMemoryRequest(id=first.memory.id))
    assert got.memory.superseded_by == second.memory.id
    assert await count(stub) == 1


async def test_a_replay_writes_nothing_again(stub: Stub) -> None:
    await add(stub, "The staging cluster has 12 nodes.")
    first = await add(stub, "The staging cluster has 16 nodes.", request_id="r-1")
    replay = await add(stub, "The staging cluster has 16 nodes.", request_id="r-1")
    assert replay.replayed and replay.memory.id == first.memory.id
    assert await count(stub) == 1
