"""A stateful Hypothesis test: three principals, each granted one collection, run random add /
search / update / delete / get / list sequences — and cross-tenant attempts — against one live
server. No response may ever contain another principal's memory; the leaks found are counted
(must be 0) and reported with the steps run in the security figures."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any, ClassVar

import grpc
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from engram_client.proto.engram.v1 import memory_pb2 as m
from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1.memory_service_pb2_grpc import MemoryServiceStub
from tests.security.support import add_figure, bearer, threaded_server, write_auth_file

TENANTS = ("ann", "bob", "cat")
KEYS = {t: f"{t}-isolation-key" for t in TENANTS}
MARK = re.compile(r"\[owner:(\w+)\]")
WORDS = st.sampled_from(
    ["peanuts", "commits", "coffee", "Berlin", "deadline", "password", "cat", "garden", "flight", "budget"]
)
DENIED = (grpc.StatusCode.PERMISSION_DENIED,)
# Answers that are fine for a tenant in its own collection (nothing is there / locate missed / ...).
EXPECTED_FAILURES = (
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.INVALID_ARGUMENT,
)


@pytest.fixture(scope="module")
def address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("isolation")
    auth_file = write_auth_file(
        root / "auth.json", {t: {"key": KEYS[t], "grants": {f"c-{t}": "write"}} for t in TENANTS}
    )
    with threaded_server(root / "data", auth_file=auth_file, rate_limit_rps=0.0) as server:
        yield server.address


class Isolation(RuleBasedStateMachine):
    address: ClassVar[str] = ""
    leaks: ClassVar[int] = 0
    steps: ClassVar[int] = 0
    cross_attempts: ClassVar[int] = 0
    owners: ClassVar[dict[str, str]] = {}

    def __init__(self) -> None:
        super().__init__()
        self.channel = grpc.insecure_channel(self.address)
        self.stub = MemoryServiceStub(self.channel)
        self.owner = type(self).owners  # memory id -> tenant, across examples (one server)
        self.serial = 0

    def teardown(self) -> None:
        self.channel.close()

    # --- helpers ----------------------------------------------------------------------------

    def call(self, tenant: str, method: str, request: Any) -> Any:
        type(self).steps += 1
        return getattr(self.stub, method)(request, metadata=bearer(KEYS[tenant]), timeout=60)

    def check(self, tenant: str, memories: list[m.Memory]) -> None:
        for memory in memories:
            marks = set(MARK.findall(memory.content))
            foreign = self.owner.get(memory.id, tenant) != tenant or marks - {tenant}
            if foreign:
                type(self).leaks += 1
            assert not foreign, f"{tenant} received {memory.id} ({memory.content!r})"

    def expect_denied(self, tenant: str, method: str, request: Any) -> None:
        type(self).cross_attempts += 1
        with pytest.raises(grpc.RpcError) as err:
            self.call(tenant, method, request)
        assert err.value.code() in DENIED  # type: ignore[attr-defined]

    def ids_of(self, tenant: str) -> list[str]:
        return sorted(i for i, t in self.owner.items() if t == tenant)

    # --- rules ----------------------------------------------------------------------------

    @rule(tenant=st.sampled_from(TENANTS), words=st.lists(WORDS, min_size=1, max_size=4))
    def add(self, tenant: str, words: list[str]) -> None:
        self.serial += 1
        content = f"[owner:{tenant}] note {self.serial}: " + " ".join(words)
        added = self.call(tenant, "AddMemory", s.AddMemoryRequest(content=content, collection=f"c-{tenant}"))
        if added.memory.id not in self.owner:
            self.owner[added.memory.id] = tenant
        self.check(tenant, [added.memory])
        for near in added.near_duplicates:
            assert self.owner.get(near.id, tenant) == tenant and tenant in near.content

    @rule(tenant=st.sampled_from(TENANTS), query=WORDS, limit=st.integers(1, 50))
    def search(self, tenant: str, query: str, limit: int) -> None:
        # No collection named: every collection the tenant may read, and never another's.
        request = s.SearchMemoriesRequest(query=query, limit=limit)
        found = self.call(tenant, "SearchMemories", request)
        self.check(tenant, [r.memory for r in found.results])
        assert {r.memory.collection for r in found.results} <= {f"c-{tenant}", f"c-{tenant}_reflection"}

    @rule(tenant=st.sampled_from(TENANTS), victim=st.sampled_from(TENANTS), query=WORDS)
    def search_across(self, tenant: str, victim: str, query: str) -> None:
        if victim == tenant:
            return
        for collections in ([f"c-{victim}"], [f"c-{tenant}", f"c-{victim}"], [f"c-{victim}_reflection"]):
            self.expect_denied(
                tenant, "SearchMemories", s.SearchMemoriesRequest(query=query, collections=collections)
            )

    @rule(
        tenant=st.sampled_from(TENANTS),
        pick=st.integers(0, 10_000),
        words=st.lists(WORDS, min_size=1, max_size=3),
    )
    def update(self, tenant: str, pick: int, words: list[str]) -> None:
        ids = sorted(self.owner)
        if not ids:
            return
        target = ids[pick % len(ids)]
        content = f"[owner:{tenant}] updated {pick}: " + " ".join(words)
        request = s.UpdateMemoryRequest(collection=f"c-{tenant}", id=target, content=content)
        try:
            updated = self.call(tenant, "UpdateMemory", request)
        except grpc.RpcError as exc:
            assert exc.code() in EXPECTED_FAILURES  # type: ignore[attr-defined]
            return
        assert self.owner[target] == tenant, "updated another tenant's memory through its own collection"
        self.check(tenant, [updated.memory, updated.previous])

    @rule(tenant=st.sampled_from(TENANTS), pick=st.integers(0, 10_000))
    def get(self, tenant: str, pick: int) -> None:
        ids = sorted(self.owner)
        if not ids:
            return
        target = ids[pick % len(ids)]
        try:
            got = self.call(
                tenant,
                "GetMemory",
                s.GetMemoryRequest(collection=f"c-{tenant}", id=target, include_history=True),
            )
        except grpc.RpcError as exc:
            assert exc.code() in EXPECTED_FAILURES  # type: ignore[attr-defined]
            return
        self.check(tenant, [got.memory, *got.history])

    @rule(tenant=st.sampled_from(TENANTS), victim=st.sampled_from(TENANTS), pick=st.integers(0, 10_000))
    def touch_across(self, tenant: str, victim: str, pick: int) -> None:
        if victim == tenant:
            return
        ids = self.ids_of(victim) or ["none"]
        target = ids[pick % len(ids)]
        coll = f"c-{victim}"
        self.expect_denied(tenant, "GetMemory", s.GetMemoryRequest(collection=coll, id=target))
        self.expect_denied(tenant, "ListMemories", s.ListMemoriesRequest(collection=coll))
        self.expect_denied(
            tenant, "UpdateMemory", s.UpdateMemoryRequest(collection=coll, id=target, content="x")
        )
        self.expect_denied(
            tenant, "DeleteMemory", s.DeleteMemoryRequest(collection=coll, id=target, force=True)
        )
        self.expect_denied(tenant, "AddMemory", s.AddMemoryRequest(collection=coll, content="planted"))
        self.expect_denied(tenant, "DeleteCollection", s.DeleteCollectionRequest(name=coll))
        self.expect_denied(tenant, "RunReflection", s.RunReflectionRequest(collection=coll, dry_run=True))

    @rule(tenant=st.sampled_from(TENANTS), pick=st.integers(0, 10_000), by_query=st.booleans())
    def delete(self, tenant: str, pick: int, by_query: bool) -> None:
        ids = sorted(self.owner)
        if not ids:
            return
        target = ids[pick % len(ids)]
        if by_query:
            request = s.DeleteMemoryRequest(
                collection=f"c-{tenant}",
                query=s.DeleteQuery(query="note", threshold=0.7, limit=1),
                force=True,
            )
        else:
            request = s.DeleteMemoryRequest(collection=f"c-{tenant}", id=target, force=True)
        try:
            deleted = self.call(tenant, "DeleteMemory", request)
        except grpc.RpcError as exc:
            assert exc.code() in EXPECTED_FAILURES  # type: ignore[attr-defined]
            return
        self.check(tenant, list(deleted.deleted))
        for memory in deleted.deleted:
            self.owner.pop(memory.id, None)

    @rule(tenant=st.sampled_from(TENANTS))
    def list_all(self, tenant: str) -> None:
        try:
            page = self.call(
                tenant,
                "ListMemories",
                s.ListMemoriesRequest(collection=f"c-{tenant}", page_size=1000, include_history=True),
            )
        except grpc.RpcError as err:
            # the tenant has not written yet: its collection does not exist (nothing to leak)
            assert err.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]
        else:
            self.check(tenant, list(page.memories))
        listed = self.call(tenant, "ListCollections", s.ListCollectionsRequest())
        names = {c.name for c in listed.collections}
        assert names <= {f"c-{tenant}", f"c-{tenant}_reflection"}, names

    @invariant()
    def no_leaks(self) -> None:
        assert type(self).leaks == 0


def test_no_principal_ever_sees_another_principals_memory(address: str) -> None:
    Isolation.address = address
    run_state_machine_as_test(
        Isolation,
        settings=settings(
            max_examples=int(os.environ.get("ENGRAM_ISOLATION_EXAMPLES", "6")),
            stateful_step_count=25,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
    add_figure("isolation state-machine steps (RPCs)", Isolation.steps)
    add_figure("isolation cross-tenant attempts refused", Isolation.cross_attempts)
    add_figure("cross-tenant leaks", Isolation.leaks)
    assert Isolation.leaks == 0
