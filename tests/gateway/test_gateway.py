"""The HTTP/JSON gateway through real HTTP requests against a real server (embedded Qdrant, the real
local model): every annotated route, the error mapping (google.rpc.Status JSON with the HTTP code
of its gRPC code, identical to what gRPC answers), auth, rate limits, and the hostile cases
(oversized and malformed bodies, slow clients, cross-origin requests, DNS rebinding)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import jsonschema
import pytest
from google.protobuf import json_format

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1 import memory_service_pb2_grpc
from engram_server.api.http.gateway import HTTP_STATUS, SERVICE
from engram_server.api.http.routes import bindings_of
from engram_server.app import EngramServer
from engram_server.config import ConfigError, Settings, load_settings
from engram_server.testing import running_server
from tests.reflection.test_reflection import chat_reply, insights
from tests.support.wire import WireServer

#: (verb, template) of every route the tests below exercise; checked against the annotations.
EXERCISED: set[tuple[str, str]] = set()


def used(verb: str, template: str) -> str:
    EXERCISED.add((verb, template))
    return template


@pytest.fixture
async def llm_wire() -> AsyncIterator[WireServer]:
    wire = WireServer()
    wire.handler = lambda request: chat_reply(
        insights(
            {
                "content": "The user drinks tea every morning and likes it green.",
                "importance": 6,
                "confidence": 0.9,
                "tags": ["tea"],
                "source_indices": [0, 1],
            }
        )
    )
    await wire.start()
    try:
        yield wire
    finally:
        await wire.stop()


@pytest.fixture
async def srv(tmp_path: Path, llm_wire: WireServer) -> AsyncIterator[EngramServer]:
    async with running_server(
        tmp_path / "data",
        http_port=0,
        llm_base_url=llm_wire.base_url,
        llm_api_key="sk-local-test",
        llm_model="test-llm",
        reflection_min_importance=1,
        reflection_min_interval_seconds=0.0,
        reflection_daily_cap=100,
    ) as server:
        yield server


@pytest.fixture
async def http(srv: EngramServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{srv.http_port}", timeout=60) as client:
        yield client


def status_of(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) <= {"code", "message", "details"}, body
    return body


def reason_of(response: httpx.Response) -> str:
    for detail in status_of(response).get("details", []):
        if detail["@type"].endswith("google.rpc.ErrorInfo"):
            return str(detail["reason"])
    return ""


def violations_of(response: httpx.Response) -> dict[str, str]:
    for detail in status_of(response).get("details", []):
        if detail["@type"].endswith("google.rpc.BadRequest"):
            return {v["field"]: v["description"] for v in detail["fieldViolations"]}
    return {}


async def test_every_rpc_over_http(http: httpx.AsyncClient) -> None:
    """Each annotated route once, with the answer read back through other routes."""
    r = await http.post(
        used("POST", "/v1/memories"),
        json={"content": "The user drinks green tea every morning", "importance": 8, "tags": ["tea"]},
    )
    assert r.status_code == 200, r.text
    first = r.json()
    assert first["outcome"] == "ADD_OUTCOME_CREATED"
    tea = first["memory"]["id"]
    assert first["memory"]["importance"] == 8 and first["memory"]["tags"] == ["tea"]

    r = await http.post(
        used("POST", "/v1/memories:batchAdd"),
        json={
            "collection": "work",
            "memories": [
                {"content": "The deploy runs every Friday at noon", "type": "MEMORY_TYPE_EVENT"},
                {"content": "Always answer in British English", "type": "MEMORY_TYPE_DIRECTIVE"},
            ],
        },
    )
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["outcome"] for x in results] == ["ADD_OUTCOME_CREATED"] * 2
    directive = results[1]["memory"]["id"]

    r = await http.get(
        used("GET", "/v1/collections/{collection}/gateDecisions").format(collection="work"),
        params={"limit": "5"},
    )
    assert r.status_code == 200, r.text
    decisions = r.json()["decisions"]
    assert [d["memoryId"] for d in decisions] == [results[1]["memory"]["id"], results[0]["memory"]["id"]]
    assert decisions[0]["content"] == "Always answer in British English"
    assert {d["outcome"] for d in decisions} == {"ADD_OUTCOME_CREATED"}

    r = await http.get(
        used("GET", "/v1/collections/{collection}/reflectionRuns").format(collection="work"),
        params={"limit": "5"},
    )
    assert r.status_code == 200 and r.json() == {}, r.text  # no LLM here, so no run was ever kept

    r = await http.post(
        used("POST", "/v1/collections/{collection}:consolidate").format(collection="work"),
        json={"dry_run": True},
    )
    assert r.status_code == 200, r.text
    assert r.json()["outcome"] in (
        "CONSOLIDATION_OUTCOME_NOTHING_TO_MERGE",
        "CONSOLIDATION_OUTCOME_WOULD_RUN",
    )

    r = await http.post(
        used("POST", "/v1/slots:update"),
        json={"collection": "work", "name": "guidance", "content": "Prefer short answers."},
    )
    assert r.status_code == 200, r.text
    assert r.json()["slot"]["content"] == "Prefer short answers."
    r = await http.post(used("POST", "/v1/slots:list"), json={"collection": "work"})
    assert r.status_code == 200, r.text
    slots = {x["name"]: x.get("content", "") for x in r.json()["slots"]}
    assert slots["guidance"] == "Prefer short answers." and slots["persona"] == ""

    r = await http.post(
        used("POST", "/v1/memories"),
        json={
            "collection": "ops",
            "content": "Run the smoke tests before any deploy",
            "tags": ["trigger:deploy"],
        },
    )
    assert r.status_code == 200, r.text
    lesson = r.json()["memory"]["id"]
    r = await http.post(
        used("POST", "/v1/triggers:get"), json={"action": "deploy/prod", "collections": ["ops"]}
    )
    assert r.status_code == 200, r.text
    assert r.json()["matched"] == ["deploy/prod", "deploy"]  # the action, then its parents
    assert [m["id"] for m in r.json()["memories"]] == [lesson]

    r = await http.post(
        used("POST", "/v1/context"), json={"collections": ["work", "ops"], "tokenBudget": 500}
    )
    assert r.status_code == 200, r.text
    pack = r.json()
    assert 0 < pack["tokensUsed"] <= 500 and "British English" in pack["markdown"], pack
    assert "Prefer short answers." in pack["markdown"] and "deploy" in pack["markdown"]

    r = await http.get(used("GET", "/v1/collections/{collection}/topics").format(collection="work"))
    assert r.status_code == 200, r.text
    index = r.json()
    assert index["memoryCount"] == 2 and index["topics"], index
    first = index["topics"][0]  # largest first
    r = await http.get(
        used("GET", "/v1/collections/{collection}/topics/{id}").format(collection="work", id=first["id"])
    )
    assert r.status_code == 200, r.text
    assert r.json()["topic"]["id"] == first["id"] and len(r.json()["memories"]) == first["size"]

    r = await http.post(used("POST", "/v1/memories:search"), json={"query": "what does the user drink?"})
    assert r.status_code == 200, r.text
    hits = r.json()["results"]
    assert hits[0]["memory"]["id"] == tea
    assert {"final", "relevance"} <= set(hits[0]["score"])

    r = await http.post(
        used("POST", "/v1/memories:update"), json={"id": tea, "content": "The user drinks jasmine tea"}
    )
    assert r.status_code == 200, r.text
    assert r.json()["memory"]["version"] == 2 and r.json()["changed"] is True

    r = await http.get(
        used("GET", "/v1/collections/{collection}/memories/{id}").format(collection="default", id=tea),
        params={"includeHistory": "true"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["memory"]["content"] == "The user drinks jasmine tea"
    assert [h["content"] for h in r.json()["history"]] == ["The user drinks green tea every morning"]

    r = await http.get(used("GET", "/v1/memories/{id}").format(id=tea))
    assert r.status_code == 200 and r.json()["memory"]["id"] == tea

    r = await http.get(
        used("GET", "/v1/collections/{collection}/memories").format(collection="work"),
        params=[("pageSize", "1"), ("filter.types", "MEMORY_TYPE_DIRECTIVE")],
    )
    assert r.status_code == 200, r.text
    assert [m["id"] for m in r.json()["memories"]] == [directive]

    r = await http.post(
        used("POST", "/v1/memories:list"),
        json={"collection": "work", "filter": {"types": ["MEMORY_TYPE_EVENT"]}, "pageSize": 10},
    )
    assert r.status_code == 200, r.text
    assert [m["content"] for m in r.json()["memories"]] == ["The deploy runs every Friday at noon"]

    r = await http.get(used("GET", "/v1/collections"))
    assert r.status_code == 200
    counts = {c["name"]: c["memoryCount"] for c in r.json()["collections"]}
    assert counts == {"default": "1", "work": "2", "ops": "1"}  # int64 is a string in proto3 JSON

    await http.post("/v1/memories", json={"content": "The user has a cat named Miso", "importance": 9})
    r = await http.post(
        used("POST", "/v1/collections/{collection}:reflect").format(collection="default"), json={}
    )
    assert r.status_code == 200, r.text
    assert r.json()["outcome"] == "REFLECTION_OUTCOME_COMPLETED", r.text
    assert r.json()["reflectionCollection"] == "default_reflection"

    r = await http.post(used("POST", "/v1/memories:delete"), json={"collection": "default", "id": tea})
    assert r.status_code == 200, r.text
    assert [m["id"] for m in r.json()["deleted"]] == [tea]

    path = used("DELETE", "/v1/collections/{collection}/memories/{id}").format(
        collection="work", id=directive
    )
    r = await http.delete(path)
    assert r.status_code == 400 and reason_of(r) == "ERROR_REASON_PROTECTED_MEMORY"  # FAILED_PRECONDITION
    r = await http.delete(path, params={"force": "true"})
    assert r.status_code == 200 and r.json()["deleted"][0]["id"] == directive

    r = await http.post(
        used("POST", "/v1/memories:extract"),
        json={
            "collection": "work",
            "conversation": {
                "messages": [{"role": "user", "content": "My name is Ines and I live in Porto."}]
            },
            "mode": "EXTRACTION_MODE_RULES",
            "dryRun": True,
        },
    )
    assert r.status_code == 200, r.text
    assert r.json()["extractor"] == "EXTRACTOR_RULES" and r.json()["dryRun"] is True
    assert [m["content"] for m in r.json()["memories"]] == ["User: My name is Ines and I live in Porto"]

    r = await http.delete(used("DELETE", "/v1/collections/{name}").format(name="work"))
    assert r.status_code == 200 and r.json()["deletedCount"] == "1"
    r = await http.get("/v1/collections")
    assert "work" not in {c["name"] for c in r.json()["collections"]}

    # the trash: what was deleted above, restored and purged
    r = await http.get(used("GET", "/v1/collections/{collection}/trash").format(collection="default"))
    assert r.status_code == 200, r.text
    assert [m["id"] for m in r.json()["memories"]] == [tea] and r.json()["memories"][0]["purgeAt"]
    r = await http.post(
        used("POST", "/v1/collections/{collection}/memories/{id}:restore").format(
            collection="default", id=tea
        ),
        json={},
    )
    assert r.status_code == 200, r.text
    assert (
        r.json()["memory"]["content"] == "The user drinks jasmine tea"
        and "trashedAt" not in r.json()["memory"]
    )
    r = await http.get("/v1/collections/work/memories")
    assert r.status_code == 400 and reason_of(r) == "ERROR_REASON_COLLECTION_IN_TRASH"
    r = await http.get("/v1/collections", params={"includeTrashed": "true"})
    assert [c["name"] for c in r.json()["trashed"]] == ["work"]
    r = await http.post(used("POST", "/v1/collections/{name}:restore").format(name="work"), json={})
    assert r.status_code == 200 and r.json()["collection"]["memoryCount"] == "1", r.text
    r = await http.post(
        used("POST", "/v1/collections/{collection}/trash:purge").format(collection="work"),
        json={"ids": [directive]},
    )
    assert r.status_code == 200 and r.json()["purgedCount"] == "1", r.text
    r = await http.get("/v1/collections/work/trash")
    assert r.status_code == 200 and r.json() == {}

    # this server has no ENGRAM_BACKUP_DIR: the call is transcoded and refused by the service
    r = await http.post(used("POST", "/v1/admin:backup"), json={"directory": "/tmp/engram-backup"})
    assert r.status_code == 400 and reason_of(r) == "ERROR_REASON_INVALID_ARGUMENT"
    assert "ENGRAM_BACKUP_DIR" in r.json()["message"]


def test_every_annotated_route_is_exercised() -> None:
    """A new annotation without a test here fails (runs after the test above in file order)."""
    routes = {(b.verb, b.template) for b in bindings_of(SERVICE)}
    assert len(routes) >= len(SERVICE.methods)
    # every unary method; the streaming ones (export, import) are gRPC only
    unary = {m.name for m in SERVICE.methods if not (m.client_streaming or m.server_streaming)}
    assert unary == {b.method.name for b in bindings_of(SERVICE)}
    assert {m.name for m in SERVICE.methods} - unary == {"ExportMemories", "ImportMemories"}
    assert routes == EXERCISED, routes ^ EXERCISED


async def test_errors_are_the_grpc_status_as_json(srv: EngramServer, http: httpx.AsyncClient) -> None:
    """The same bad call over gRPC and over HTTP: the same google.rpc.Status, with the HTTP code of
    its gRPC code."""
    from google.rpc import status_pb2  # noqa: PLC0415

    cases: list[tuple[str, Any, str, dict[str, Any]]] = [
        ("AddMemory", s.AddMemoryRequest(content=""), "/v1/memories", {"content": ""}),
        (
            "AddMemory",
            s.AddMemoryRequest(content="x", importance=11),
            "/v1/memories",
            {"content": "x", "importance": 11},
        ),
        ("GetMemory", s.GetMemoryRequest(id="00000000-0000-0000-0000-000000000000"), "", {}),
        (
            "SearchMemories",
            s.SearchMemoriesRequest(query="q", limit=-1),
            "/v1/memories:search",
            {"query": "q", "limit": -1},
        ),
        ("DeleteMemory", s.DeleteMemoryRequest(), "/v1/memories:delete", {}),
        (
            "UpdateMemory",
            s.UpdateMemoryRequest(id="not-a-uuid", content="x"),
            "/v1/memories:update",
            {"id": "not-a-uuid", "content": "x"},
        ),
    ]
    async with grpc.aio.insecure_channel(srv.address) as channel:
        stub = memory_service_pb2_grpc.MemoryServiceStub(channel)
        for method, request, path, body in cases:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await getattr(stub, method)(request)
            grpc_status = None
            for key, value in caught.value.trailing_metadata() or ():
                if key == "grpc-status-details-bin":
                    grpc_status = status_pb2.Status.FromString(value)
            assert grpc_status is not None
            if method == "GetMemory":
                r = await http.get("/v1/memories/00000000-0000-0000-0000-000000000000")
            else:
                r = await http.post(path, json=body)
            assert r.status_code == HTTP_STATUS[grpc_status.code], (method, r.text)
            assert r.json() == json_format.MessageToDict(grpc_status), method
    # spot checks of the mapping itself
    r = await http.get("/v1/memories/00000000-0000-0000-0000-000000000000")
    assert r.status_code == 404 and reason_of(r) == "ERROR_REASON_MEMORY_NOT_FOUND"
    r = await http.post("/v1/memories", json={"content": "x", "importance": 11})
    assert r.status_code == 400 and "importance" in violations_of(r)
    await http.post("/v1/memories", json={"content": "first", "requestId": "k1"})
    r = await http.post("/v1/memories", json={"content": "second", "requestId": "k1"})
    assert r.status_code == 409 and reason_of(r) == "ERROR_REASON_IDEMPOTENCY_CONFLICT"


async def test_transcoding_refusals_are_invalid_argument(http: httpx.AsyncClient) -> None:
    """Bad HTTP input never reaches the service and never becomes a 500."""
    cases: list[tuple[httpx.Response, int, str]] = [
        (
            await http.post(
                "/v1/memories", content=b"{not json", headers={"content-type": "application/json"}
            ),
            400,
            "body",
        ),
        (
            await http.post("/v1/memories", content=b"[1, 2]", headers={"content-type": "application/json"}),
            400,
            "body",
        ),
        (await http.post("/v1/memories", json={"content": "x", "nosuchfield": 1}), 400, "body"),
        (await http.post("/v1/memories", json={"content": "x", "importance": "high"}), 400, "body"),
        (await http.post("/v1/memories", json={"content": "x", "type": "MEMORY_TYPE_NOPE"}), 400, "body"),
        (
            await http.post(
                "/v1/memories", content=b"\xff\xfe", headers={"content-type": "application/json"}
            ),
            400,
            "body",
        ),
        (
            await http.post(
                "/v1/memories", content=b"[" * 100_000, headers={"content-type": "application/json"}
            ),
            400,
            "body",
        ),
        (await http.get("/v1/collections/default/memories", params={"pageSize": "ten"}), 400, "pageSize"),
        (await http.get("/v1/collections/default/memories", params={"bogus": "1"}), 400, "bogus"),
        (await http.get("/v1/collections/default/memories", params={"filter": "x"}), 400, "filter"),
        (await http.post("/v1/memories:search", params={"limit": "3"}, json={"query": "x"}), 400, "limit"),
        (
            await http.post(
                "/v1/memories", content=b'{"content": "x"}', headers={"content-type": "text/plain"}
            ),
            415,
            "content-type",
        ),
        (await http.post("/v1/memories", content=b'{"content": "x"}'), 415, "content-type"),
    ]
    for response, code, field in cases:
        assert response.status_code == code, (field, response.text)
        assert status_of(response)["code"] == 3, response.text  # INVALID_ARGUMENT
        assert reason_of(response) == "ERROR_REASON_INVALID_ARGUMENT", response.text
        assert field in violations_of(response), (field, response.text)
    # a path that names a different collection than the body is refused, not silently overridden
    r = await http.post("/v1/collections/a:reflect", json={"collection": "b"})
    assert r.status_code == 400 and "collection" in violations_of(r)


async def test_headers_grpc_cannot_carry_are_refused(http: httpx.AsyncClient) -> None:
    r = await http.get("/v1/collections", headers=[(b"authorization", b"Bearer k\xe9y")])
    assert r.status_code == 400 and "authorization" in violations_of(r)
    r = await http.get("/v1/collections", headers=[(b"x-api-key", b"\x01")])
    assert r.status_code == 400 and "x-api-key" in violations_of(r)


async def test_routing_answers(http: httpx.AsyncClient) -> None:
    r = await http.get("/v1/nothing-here")
    assert r.status_code == 404 and status_of(r)["code"] == 5
    r = await http.put("/v1/memories", json={})
    assert r.status_code == 405 and status_of(r)["code"] == 12 and r.headers["allow"] == "POST"
    r = await http.get("/console/")
    assert r.status_code == 404  # the console is off unless ENGRAM_CONSOLE
    r = await http.get("/v1/collections")
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "set-cookie" not in r.headers


async def test_oversized_bodies_are_refused_before_reading(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path / "data", http_port=0, max_message_bytes=4096) as srv,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{srv.http_port}") as http,
    ):
        r = await http.post("/v1/memories", json={"content": "x" * 5000})
        assert r.status_code == 413 and reason_of(r) == "ERROR_REASON_INVALID_ARGUMENT"
        assert "body" in violations_of(r)

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted while read
            for _ in range(10):
                yield b" " * 1000

        r = await http.post("/v1/memories", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413, r.text
        r = await http.post("/v1/memories", json={"content": "still serving"})
        assert r.status_code == 200


async def _read_all(reader: asyncio.StreamReader) -> bytes:
    return await reader.read(-1)


async def test_slow_clients_are_cut_off(tmp_path: Path) -> None:
    """A client that never finishes its headers is disconnected; one that never finishes its body
    gets 408. (The guard below is a hang guard, not a speed assertion.)"""
    async with running_server(tmp_path / "data", http_port=0, http_timeout_seconds=0.5) as srv:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.http_port)
        writer.write(b"POST /v1/memories HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # headers never end
        await writer.drain()
        assert await asyncio.wait_for(_read_all(reader), 60) == b""  # closed without an answer
        writer.close()

        reader, writer = await asyncio.open_connection("127.0.0.1", srv.http_port)
        writer.write(
            b"POST /v1/memories HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"content":'
        )
        await writer.drain()
        answer = await asyncio.wait_for(_read_all(reader), 60)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["code"] == 4  # DEADLINE_EXCEEDED

        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{srv.http_port}") as http:
            assert (await http.get("/v1/collections")).status_code == 200  # still serving


async def test_cross_origin_and_rebinding_are_refused(http: httpx.AsyncClient, srv: EngramServer) -> None:
    r = await http.post("/v1/memories", json={"content": "x"}, headers={"origin": "https://evil.example"})
    assert r.status_code == 403 and reason_of(r) == "ERROR_REASON_PERMISSION_DENIED"
    r = await http.get("/v1/collections", headers={"origin": "null"})
    assert r.status_code == 403
    r = await http.get("/v1/collections", headers={"host": f"evil.example:{srv.http_port}"})
    assert r.status_code == 403 and "rebinding" in status_of(r)["message"]
    same = f"http://127.0.0.1:{srv.http_port}"
    r = await http.post("/v1/memories", json={"content": "same origin is fine"}, headers={"origin": same})
    assert r.status_code == 200, r.text
    r = await http.options("/v1/memories", headers={"origin": same, "access-control-request-method": "POST"})
    assert "access-control-allow-origin" not in r.headers  # no CORS is ever granted


async def test_auth_and_rate_limits_are_the_grpc_ones(tmp_path: Path) -> None:
    async with (
        running_server(
            tmp_path / "data", http_port=0, api_key="sekret", rate_limit_rps=0.001, rate_limit_burst=3
        ) as srv,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{srv.http_port}") as http,
    ):
        r = await http.get("/v1/collections")
        assert r.status_code == 401 and reason_of(r) == "ERROR_REASON_UNAUTHENTICATED"
        assert r.headers["www-authenticate"].startswith("Bearer")
        r = await http.get("/v1/collections", headers={"authorization": "Bearer wrong"})
        assert r.status_code == 401
        r = await http.get("/v1/collections", headers={"authorization": "Bearer sekret"})
        assert r.status_code == 200, r.text
        r = await http.get("/v1/collections", headers={"x-api-key": "sekret"})
        assert r.status_code == 200
        # a non-loopback Host is fine once auth is on (the key, not the name, is the guard)
        r = await http.get("/v1/collections", headers={"x-api-key": "sekret", "host": "engram.internal"})
        assert r.status_code == 200
        r = await http.get("/v1/collections", headers={"x-api-key": "sekret"})
        assert r.status_code == 429 and reason_of(r) == "ERROR_REASON_RATE_LIMITED"
        assert int(r.headers["retry-after"]) >= 1
        assert (await http.get("/openapi.json")).status_code == 200  # the schema is public


async def test_permission_denied_over_http(tmp_path: Path) -> None:
    from tests.security.support import write_auth_file  # noqa: PLC0415

    auth = write_auth_file(
        tmp_path / "auth.json",
        {
            "reader": {"key": "r-key", "grants": {"notes": "read"}},
            "admin": {"key": "a-key", "grants": {"*": "admin"}},
        },
    )
    async with (
        running_server(tmp_path / "data", http_port=0, auth_file=auth) as srv,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{srv.http_port}") as http,
    ):
        admin = {"authorization": "Bearer a-key"}
        reader = {"authorization": "Bearer r-key"}
        r = await http.post("/v1/memories", json={"collection": "notes", "content": "n"}, headers=admin)
        assert r.status_code == 200
        r = await http.post("/v1/memories", json={"collection": "notes", "content": "m"}, headers=reader)
        assert r.status_code == 403 and reason_of(r) == "ERROR_REASON_PERMISSION_DENIED"
        r = await http.get("/v1/collections/notes/memories", headers=reader)
        assert r.status_code == 200 and len(r.json()["memories"]) == 1
        r = await http.delete("/v1/collections/notes", headers=reader)
        assert r.status_code == 403


async def test_openapi_document_describes_the_answers(http: httpx.AsyncClient) -> None:
    """Served at /openapi.json, one operation per binding, every $ref resolves, and real answers
    validate against the schemas it declares."""
    r = await http.get("/openapi.json")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    doc = r.json()
    assert doc["openapi"].startswith("3.1")
    from openapi_spec_validator import validate as validate_spec  # noqa: PLC0415

    validate_spec(doc)  # a valid OpenAPI 3.1 document, not just JSON
    operations = {(verb.upper(), path) for path, item in doc["paths"].items() for verb in item}
    assert operations == {(b.verb, b.template) for b in bindings_of(SERVICE)}
    text = json.dumps(doc)
    for ref in {part.split('"')[0] for part in text.split('"$ref": "#/components/schemas/')[1:]}:
        assert ref in doc["components"]["schemas"], ref

    def validate(instance: Any, path: str, verb: str, code: str = "200") -> None:
        schema = doc["paths"][path][verb]["responses"][code]["content"]["application/json"]["schema"]
        wrapped = {**schema, "components": doc["components"]}
        jsonschema.Draft202012Validator(wrapped).validate(instance)

    added = await http.post("/v1/memories", json={"content": "Schemas should match answers", "tags": ["t"]})
    validate(added.json(), "/v1/memories", "post")
    found = await http.post("/v1/memories:search", json={"query": "schemas"})
    validate(found.json(), "/v1/memories:search", "post")
    validate((await http.get("/v1/collections")).json(), "/v1/collections", "get")
    bad = await http.post("/v1/memories", json={"content": ""})
    validate(bad.json(), "/v1/memories", "post", "default")
    with pytest.raises(jsonschema.ValidationError):  # the schemas can fail
        validate({"memory": {"importance": "high"}}, "/v1/memories", "post")


def test_openapi_descriptions_come_from_the_proto_comments() -> None:
    """Every operation, schema and property carries the comment written above it in the proto."""
    from engram_server.api.http.openapi import descriptions, openapi_document  # noqa: PLC0415

    doc = openapi_document(SERVICE, version="test")
    docs = descriptions()
    for binding in bindings_of(SERVICE):
        operation = doc["paths"][binding.template][binding.verb.lower()]
        written = docs[binding.method.full_name]
        assert operation["description"].startswith(written), binding.method.name
        assert written.startswith(operation["summary"].rstrip(".")), binding.method.name
    memory = doc["components"]["schemas"]["engram.v1.Memory"]
    assert memory["description"] == docs["engram.v1.Memory"]
    assert memory["properties"]["validUntil"]["description"] == docs["engram.v1.Memory.valid_until"]
    kinds = doc["components"]["schemas"]["engram.v1.MemoryType"]["description"]
    assert "`MEMORY_TYPE_EVENT`: " + docs["engram.v1.MemoryType.MEMORY_TYPE_EVENT"] in kinds
    undocumented = [
        f"{name}.{prop}"
        for name, schema in doc["components"]["schemas"].items()
        if name.startswith("engram.v1.")
        for prop, value in schema.get("properties", {}).items()
        if not value.get("description")
    ]
    assert undocumented == []  # buf lint asks for a comment on every field; the document keeps them


def test_http_settings_and_refusals(tmp_path: Path) -> None:
    assert load_settings({}).http_port is None  # off by default
    s = load_settings({"ENGRAM_HTTP_PORT": "8080", "ENGRAM_CONSOLE": "on"})
    assert (s.http_port, s.http_host, s.console) == (8080, "127.0.0.1", True)
    with pytest.raises(ConfigError, match="ENGRAM_CONSOLE"):
        load_settings({"ENGRAM_CONSOLE": "on"})
    with pytest.raises(ConfigError, match="ENGRAM_HTTP_PORT"):
        load_settings({"ENGRAM_HTTP_PORT": "70000"})


async def test_public_http_bind_needs_auth(tmp_path: Path) -> None:
    """Refused before anything is opened, even with ENGRAM_AUTH=off (which gRPC accepts)."""
    for auth in ("auto", "off"):
        settings = Settings(
            host="127.0.0.1", port=0, data_dir=tmp_path / "d", http_port=0, http_host="0.0.0.0", auth=auth
        )
        server = EngramServer.create(settings)
        with pytest.raises(ConfigError, match="not loopback"):
            await server.start()
        assert not (tmp_path / "d").exists()  # the store was never opened


async def test_a_taken_http_port_is_a_clear_error_and_nothing_stays_open(tmp_path: Path) -> None:
    import socket  # noqa: PLC0415

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    taken = holder.getsockname()[1]
    try:
        server = EngramServer.create(
            Settings(host="127.0.0.1", port=0, data_dir=tmp_path / "d", http_port=taken)
        )
        with pytest.raises(OSError, match="ENGRAM_HTTP_PORT"):
            await server.start()
        # the gRPC side was stopped too: the data directory's lock is free for a new server
        async with running_server(tmp_path / "d", http_port=0) as again:
            assert again.http_port != taken
    finally:
        holder.close()


async def test_gate_decisions_show_duplicates_and_forget_deleted_memories(http: httpx.AsyncClient) -> None:
    text = "The user keeps a sourdough starter called Clint in the fridge"
    first = (await http.post("/v1/memories", json={"collection": "kitchen", "content": text})).json()
    again = (await http.post("/v1/memories", json={"collection": "kitchen", "content": text})).json()
    assert again["outcome"] == "ADD_OUTCOME_DUPLICATE"
    r = await http.get("/v1/collections/kitchen/gateDecisions")
    decisions = r.json()["decisions"]
    assert [d["outcome"] for d in decisions] == ["ADD_OUTCOME_DUPLICATE", "ADD_OUTCOME_CREATED"]
    assert decisions[0]["memoryId"] == first["memory"]["id"] == decisions[1]["memoryId"]
    assert decisions[0]["duplicateSimilarity"] == pytest.approx(again["duplicateSimilarity"])
    assert decisions[0]["duplicateSimilarity"] > 0.9
    assert (await http.get("/v1/collections/kitchen/gateDecisions", params={"limit": "1"})).json()[
        "decisions"
    ] == decisions[:1]
    r = await http.get("/v1/collections/kitchen/gateDecisions", params={"limit": "257"})
    assert r.status_code == 400 and "limit" in violations_of(r)
    r = await http.get("/v1/collections/Bad%20Name/gateDecisions")
    assert r.status_code == 400 and "collection" in violations_of(r)
    await http.delete(f"/v1/collections/kitchen/memories/{first['memory']['id']}")
    r = await http.get("/v1/collections/kitchen/gateDecisions")
    assert r.status_code == 200 and r.json() == {}  # forgotten with the memory (empty list: omitted)
