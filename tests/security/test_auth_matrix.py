"""The auth matrix: every RPC × no key / bad key / read-only / read-write / admin / other tenant,
against a live server with an auth file; plus ListCollections filtering, header forms, reflection
collections, open health/reflection, and the start-up rules."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1.memory_service_pb2_grpc import MemoryServiceStub
from engram_server.api.auth import build_auth_interceptor, is_loopback
from engram_server.app import EngramServer
from engram_server.config import ConfigError, Settings
from tests.security.support import add_figure, bearer, details, threaded_server, write_auth_file

KEYS = {
    "reader": "key-reader-0123456789",
    "writer": "key-writer-0123456789",
    "admin": "key-admin-0123456789",
    "other": "key-other-0123456789",
}
PRINCIPALS = {
    "reader": {"key": KEYS["reader"], "grants": {"alpha": "read"}},
    "writer": {"key": KEYS["writer"], "grants": {"alpha": "write"}},
    "admin": {"key": KEYS["admin"], "grants": {"*": "admin"}},
    "other": {"key": KEYS["other"], "grants": {"beta": "admin"}},
}
CALLERS: dict[str, str | None] = {
    "no_key": None,
    "bad_key": "not-a-key-anyone-has",
    "read_only": KEYS["reader"],
    "read_write": KEYS["writer"],
    "admin": KEYS["admin"],
    "other_tenant": KEYS["other"],
}

OK, DENIED, UNAUTH = "ok", "denied", "unauth"
# The least role each call needs on collection "alpha".
NEEDS = {
    "AddMemory": "write",
    "AddMemories": "write",
    "SearchMemories": "read",
    "UpdateMemory": "write",
    "DeleteMemory": "write",
    "GetMemory": "read",
    "ListMemories": "read",
    "ListCollections": "any",  # answered for everyone authenticated, filtered
    "DeleteCollection": "admin",
    "RunReflection": "write",
    "RunReflection(force)": "admin",
    "ListGateDecisions": "read",
    "ListReflectionRuns": "read",
    "ExtractMemories": "write",
    "ListTrash": "read",
    "RestoreMemory": "write",
    "PurgeTrash": "write",
    "PurgeTrash(collection)": "admin",
    "RestoreCollection": "admin",
    "GetContext": "read",
    "GetTriggers": "read",
    "ListSlots": "read",
    "UpdateSlot": "write",
    "RunConsolidation": "write",
    "RunConsolidation(force)": "admin",
    "ExportMemories": "admin",  # admin on each collection exported
    "ImportMemories": "admin",  # store-wide: only a "*" admin grant
    "BackupStore": "admin",  # store-wide
    "ListTopics": "read",
    "GetTopic": "read",
}
HOLDS = {"read_only": "read", "read_write": "write", "admin": "admin", "other_tenant": "none"}
RANK = {"none": 0, "any": 0, "read": 1, "write": 2, "admin": 3}


def expected(caller: str, call: str) -> str:
    if caller in ("no_key", "bad_key"):
        return UNAUTH
    return OK if RANK[HOLDS[caller]] >= RANK[NEEDS[call]] else DENIED


NOT_TRASHED = "00000000-0000-4000-8000-000000000000"


def requests(memory_id: str) -> dict[str, tuple[str, Any]]:
    return {
        "AddMemory": ("AddMemory", s.AddMemoryRequest(content="matrix probe", collection="alpha")),
        "AddMemories": (
            "AddMemories",
            s.AddMemoriesRequest(collection="alpha", memories=[s.NewMemory(content="matrix batch probe")]),
        ),
        "SearchMemories": ("SearchMemories", s.SearchMemoriesRequest(query="probe", collections=["alpha"])),
        "UpdateMemory": (
            "UpdateMemory",
            s.UpdateMemoryRequest(collection="alpha", id=memory_id, content="changed", dry_run=True),
        ),
        "DeleteMemory": (
            "DeleteMemory",
            s.DeleteMemoryRequest(collection="alpha", id=memory_id, dry_run=True),
        ),
        "GetMemory": ("GetMemory", s.GetMemoryRequest(collection="alpha", id=memory_id)),
        "ListMemories": ("ListMemories", s.ListMemoriesRequest(collection="alpha")),
        "ListCollections": ("ListCollections", s.ListCollectionsRequest()),
        # The admin cell asks for "alpha-gone" instead (NOT_FOUND), so alpha survives the matrix.
        "DeleteCollection": ("DeleteCollection", s.DeleteCollectionRequest(name="alpha")),
        "RunReflection": ("RunReflection", s.RunReflectionRequest(collection="alpha", dry_run=True)),
        "RunReflection(force)": (
            "RunReflection",
            s.RunReflectionRequest(collection="alpha", dry_run=True, force=True),
        ),
        "ListGateDecisions": ("ListGateDecisions", s.ListGateDecisionsRequest(collection="alpha")),
        "ListReflectionRuns": ("ListReflectionRuns", s.ListReflectionRunsRequest(collection="alpha")),
        "ExtractMemories": (
            "ExtractMemories",
            s.ExtractMemoriesRequest(collection="alpha", text="I prefer tabs over spaces.", dry_run=True),
        ),
        # The trash calls name nothing in the trash: past auth they answer NOT_FOUND, harmlessly.
        "ListTrash": ("ListTrash", s.ListTrashRequest(collection="alpha")),
        "RestoreMemory": ("RestoreMemory", s.RestoreMemoryRequest(collection="alpha", id=NOT_TRASHED)),
        "PurgeTrash": ("PurgeTrash", s.PurgeTrashRequest(collection="alpha", ids=[NOT_TRASHED])),
        "PurgeTrash(collection)": (
            "PurgeTrash",
            s.PurgeTrashRequest(collection="alpha", purge_collection=True),
        ),
        "RestoreCollection": ("RestoreCollection", s.RestoreCollectionRequest(name="alpha")),
        "GetContext": ("GetContext", s.GetContextRequest(collections=["alpha"], query="probe")),
        "GetTriggers": ("GetTriggers", s.GetTriggersRequest(collections=["alpha"], action="deploy")),
        "ListSlots": ("ListSlots", s.ListSlotsRequest(collection="alpha")),
        "UpdateSlot": (
            "UpdateSlot",
            s.UpdateSlotRequest(collection="alpha", name="guidance", content="probe"),
        ),
        "RunConsolidation": ("RunConsolidation", s.RunConsolidationRequest(collection="alpha", dry_run=True)),
        "RunConsolidation(force)": (
            "RunConsolidation",
            s.RunConsolidationRequest(collection="alpha", dry_run=True, force=True),
        ),
        "ExportMemories": ("ExportMemories", s.ExportMemoriesRequest(collections=["alpha"])),
        # An empty file: the admin cell imports nothing.
        "ImportMemories": ("ImportMemories", s.ImportMemoriesRequest(collection="alpha")),
        # No ENGRAM_BACKUP_DIR: the admin cell is refused past auth (INVALID_ARGUMENT).
        "BackupStore": ("BackupStore", s.BackupStoreRequest(directory="/nowhere")),
        "ListTopics": ("ListTopics", s.ListTopicsRequest(collection="alpha")),
        # An id no topic has: NOT_FOUND once authorized (the check runs before the lookup).
        "GetTopic": ("GetTopic", s.GetTopicRequest(collection="alpha", id="t0000000000")),
    }


def test_the_matrix_covers_every_rpc() -> None:
    """A new RPC gets its row here, so its role is tested, not assumed."""
    methods = {m.name for m in s.DESCRIPTOR.services_by_name["MemoryService"].methods}
    assert {call.split("(")[0] for call in NEEDS} == methods
    assert {rpc for rpc, _ in requests("x").values()} == methods


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EngramServer, str]]:
    root = tmp_path_factory.mktemp("matrix")
    auth_file = write_auth_file(root / "auth.json", PRINCIPALS)
    # The matrix fails authentication on purpose many times from one address: no failure limit
    # here (tests/chaos/test_auth_cost.py covers it).
    with threaded_server(root / "data", auth_file=auth_file, auth_failure_rps=0.0) as server:
        with grpc.insecure_channel(server.address) as channel:
            stub = MemoryServiceStub(channel)
            added = stub.AddMemory(
                s.AddMemoryRequest(content="Alpha's secret: the launch code is 1234.", collection="alpha"),
                metadata=bearer(KEYS["admin"]),
            )
            stub.AddMemory(
                s.AddMemoryRequest(content="Beta's own note about gardening.", collection="beta"),
                metadata=bearer(KEYS["other"]),
            )
        yield server, added.memory.id


@pytest.fixture(scope="module")
def stub(live: tuple[EngramServer, str]) -> Iterator[MemoryServiceStub]:
    with grpc.insecure_channel(live[0].address) as channel:
        yield MemoryServiceStub(channel)


@pytest.mark.parametrize("call", list(NEEDS))
@pytest.mark.parametrize("caller", list(CALLERS))
def test_auth_matrix(caller: str, call: str, live: tuple[EngramServer, str], stub: MemoryServiceStub) -> None:
    method, request = requests(live[1])[call]
    if call == "DeleteCollection" and caller == "admin":
        request = s.DeleteCollectionRequest(name="alpha-gone")
    want = expected(caller, call)
    rpc: Callable[..., Any] = getattr(stub, method)
    add_figure("auth matrix cells", 1)
    try:
        if method == "ExportMemories":  # server streaming: the answers, read to the end
            response = list(rpc(request, metadata=bearer(CALLERS[caller]), timeout=30))
        elif method == "ImportMemories":  # client streaming
            response = rpc(iter([request]), metadata=bearer(CALLERS[caller]), timeout=30)
        else:
            response = rpc(request, metadata=bearer(CALLERS[caller]), timeout=30)
        got, code, reason = OK, grpc.StatusCode.OK, ""
    except grpc.RpcError as exc:
        code, reason = exc.code(), details(exc)["reason"]  # type: ignore[attr-defined]
        got = {
            grpc.StatusCode.UNAUTHENTICATED: UNAUTH,
            grpc.StatusCode.PERMISSION_DENIED: DENIED,
        }.get(code, OK)  # any other answer (NOT_FOUND, LLM_NOT_CONFIGURED, …) got past auth
        response = None
    assert code not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
    assert got == want, f"{caller} × {call}: got {code} {reason}, expected {want}"
    if want == UNAUTH:
        assert reason == "ERROR_REASON_UNAUTHENTICATED"
    elif want == DENIED:
        assert reason == "ERROR_REASON_PERMISSION_DENIED"
    if call == "ListCollections" and response is not None:
        names = {c.name for c in response.collections}
        visible = {"admin": {"alpha", "beta"}, "other_tenant": {"beta"}}.get(caller, {"alpha"})
        assert names == visible


def test_header_forms(live: tuple[EngramServer, str], stub: MemoryServiceStub) -> None:
    key = KEYS["reader"]
    ok = s.ListMemoriesRequest(collection="alpha")
    for metadata in (
        (("authorization", f"Bearer {key}"),),
        (("authorization", f"bearer   {key}"),),
        (("x-api-key", key),),
        (("authorization", f"Bearer {key}"), ("x-api-key", key)),
    ):
        stub.ListMemories(ok, metadata=metadata, timeout=30)
    for metadata in (
        (("authorization", key),),  # no scheme
        (("authorization", f"Basic {key}"),),
        (("authorization", "Bearer "),),
        (("authorization", f"Bearer {key}"), ("x-api-key", KEYS["writer"])),  # two different keys
        (("authorization", f"Bearer {key}x"),),
        (("x-api-key", "k" * 5000),),
    ):
        with pytest.raises(grpc.RpcError) as err:
            stub.ListMemories(ok, metadata=metadata, timeout=30)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, metadata  # type: ignore[attr-defined]


def test_search_fan_out_needs_every_collection(stub: MemoryServiceStub) -> None:
    request = s.SearchMemoriesRequest(query="launch code", collections=["beta", "alpha"])
    with pytest.raises(grpc.RpcError) as err:
        stub.SearchMemories(request, metadata=bearer(KEYS["other"]), timeout=30)
    info = details(err.value)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED  # type: ignore[attr-defined]
    assert info["metadata"]["collection"] == "alpha"
    assert info["metadata"]["principal"] == "other"
    # Naming a collection without a grant is refused even when it does not exist.
    with pytest.raises(grpc.RpcError) as err:
        stub.SearchMemories(
            s.SearchMemoriesRequest(query="x", collections=["default"]),
            metadata=bearer(KEYS["other"]),
            timeout=30,
        )
    assert details(err.value)["metadata"]["collection"] == "default"


def test_search_naming_no_collection_sees_only_readable_collections(stub: MemoryServiceStub) -> None:
    """No collection named: every collection the caller may read, and only those."""
    request = s.SearchMemoriesRequest(query="launch code or gardening note", limit=100)
    seen = {
        caller: {
            r.memory.collection
            for r in stub.SearchMemories(request, metadata=bearer(KEYS[caller]), timeout=30).results
        }
        for caller in ("reader", "other", "admin")
    }
    assert seen == {"reader": {"alpha"}, "other": {"beta"}, "admin": {"alpha", "beta"}}


def test_grant_covers_the_reflection_collection(stub: MemoryServiceStub) -> None:
    # alpha_reflection does not exist yet: past auth, the answer is NOT_FOUND.
    with pytest.raises(grpc.RpcError) as err:
        stub.ListMemories(
            s.ListMemoriesRequest(collection="alpha_reflection"), metadata=bearer(KEYS["reader"]), timeout=30
        )
    assert details(err.value)["reason"] == "ERROR_REASON_COLLECTION_NOT_FOUND"
    with pytest.raises(grpc.RpcError) as err:
        stub.ListMemories(
            s.ListMemoriesRequest(collection="alpha_reflection"), metadata=bearer(KEYS["other"]), timeout=30
        )
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED  # type: ignore[attr-defined]


def test_other_tenant_never_sees_alpha(stub: MemoryServiceStub) -> None:
    found = stub.SearchMemories(
        s.SearchMemoriesRequest(query="launch code", collections=["beta"], limit=100),
        metadata=bearer(KEYS["other"]),
        timeout=30,
    )
    assert all("Alpha" not in r.memory.content for r in found.results)


def test_health_and_reflection_stay_open(live: tuple[EngramServer, str]) -> None:
    with grpc.insecure_channel(live[0].address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        answer = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=30)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc  # noqa: PLC0415

        reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
        replies = list(
            reflect.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        )
        names = {svc.name for svc in replies[0].list_services_response.service}
        assert "engram.v1.MemoryService" in names


def test_unknown_method_is_unimplemented_not_unscoped(live: tuple[EngramServer, str]) -> None:
    with grpc.insecure_channel(live[0].address) as channel:
        call = channel.unary_unary("/engram.v1.MemoryService/DropEverything")
        with pytest.raises(grpc.RpcError) as err:
            call(b"", metadata=bearer(KEYS["admin"]), timeout=30)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED  # type: ignore[attr-defined]


# --- single-key mode and start-up rules -------------------------------------------------------


async def test_single_api_key_mode(tmp_path: Path) -> None:
    from engram_server.testing import running_server  # noqa: PLC0415

    async with (
        running_server(tmp_path / "data", api_key="the-one-key") as server,
        grpc.aio.insecure_channel(server.address) as channel,
    ):
        stub = MemoryServiceStub(channel)
        added = await stub.AddMemory(
            s.AddMemoryRequest(content="single key mode works", collection="anything"),
            metadata=bearer("the-one-key"),
        )
        await stub.DeleteCollection(
            s.DeleteCollectionRequest(name="anything"), metadata=bearer("the-one-key")
        )
        assert added.memory.id
        for metadata in ((), bearer("wrong-key")):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.ListCollections(s.ListCollectionsRequest(), metadata=metadata)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_startup_rules(caplog: pytest.LogCaptureFixture) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("example.com")
    # Loopback, no keys, auto: off, loudly.
    with caplog.at_level(logging.WARNING):
        assert build_auth_interceptor(Settings(host="127.0.0.1")) is None
    assert "AUTH IS OFF" in caplog.text
    # Public bind, no keys: refuse to start.
    with pytest.raises(ConfigError, match="refusing"):
        build_auth_interceptor(Settings(host="0.0.0.0"))
    with pytest.raises(ConfigError):
        build_auth_interceptor(Settings(host="127.0.0.1", auth="on"))
    # ... unless explicitly off, which warns.
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert build_auth_interceptor(Settings(host="0.0.0.0", auth="off")) is None
    assert "NOT LOOPBACK" in caplog.text
    # Keys configured: on, whatever the address.
    assert build_auth_interceptor(Settings(host="127.0.0.1", api_key="k")) is not None


async def test_server_refuses_public_bind_without_keys(tmp_path: Path) -> None:
    server = EngramServer.create(Settings(host="0.0.0.0", port=0, data_dir=tmp_path / "d"))
    with pytest.raises(ConfigError):
        await server.start()


def test_context_pack_naming_no_collection_draws_only_on_readable_collections(
    stub: MemoryServiceStub,
) -> None:
    """GetContext without collections: the pack is built from the caller's readable collections."""
    seen = {
        caller: {
            i.memory.collection
            for x in stub.GetContext(
                s.GetContextRequest(), metadata=bearer(KEYS[caller]), timeout=30
            ).sections
            for i in x.items
            if i.memory.id
        }
        for caller in ("reader", "other", "admin")
    }
    assert seen == {"reader": {"alpha"}, "other": {"beta"}, "admin": {"alpha", "beta"}}
