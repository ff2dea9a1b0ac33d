"""One trace per call: engram-client sends the current trace context (and makes a CLIENT span) on
every attempt, and an MCP tool call runs as one trace from the MCP client through the shim and the
client into the server. Without OpenTelemetry the client still works and sends no trace context."""

from __future__ import annotations

import asyncio
import itertools
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from mcp import Client
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from engram_client import AsyncEngramClient, EngramClient, RetryPolicy, StorageUnavailableError
from engram_client import _otel as client_otel
from engram_mcp import EngramMcp, ShimSettings
from engram_server.app import EngramServer
from engram_server.testing import running_server
from tests.client.fake_engram import UNAVAILABLE, Script, fake_server
from tests.telemetry.conftest import Otel

ADD = "engram.v1.MemoryService/AddMemory"
SEARCH = "engram.v1.MemoryService/SearchMemories"
FAST = RetryPolicy(max_attempts=4, initial_backoff=0.01, max_backoff=0.05, jitter=0.0)
tracer = trace.get_tracer("tests.telemetry")


@pytest.fixture
async def srv(otel: Otel, tmp_path: Path) -> AsyncIterator[EngramServer]:
    async with running_server(tmp_path / "data") as server:
        assert server.telemetry is not None and server.telemetry.tracing
        yield server


def one(otel: Otel, name: str, kind: SpanKind) -> ReadableSpan:
    found = [s for s in otel.named(name) if s.kind is kind]
    assert len(found) == 1, [(s.name, s.kind) for s in otel.spans()]
    return found[0]


def assert_chain(*spans: ReadableSpan) -> None:
    """One trace, each span the parent of the next."""
    assert len({s.context.trace_id for s in spans if s.context is not None}) == 1, [s.name for s in spans]
    for parent, child in itertools.pairwise(spans):
        assert parent.context is not None and child.parent is not None, (parent.name, child.name)
        assert child.parent.span_id == parent.context.span_id, (parent.name, child.name)


def trace_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.trace_id)


def traceparent_ids(metadata: dict[str, str]) -> tuple[str, str]:
    """(trace id, parent span id) of a W3C traceparent header."""
    _version, trace_id, span_id, _flags = metadata["traceparent"].split("-")
    return trace_id, span_id


async def test_async_call_in_a_span_continues_its_trace(otel: Otel, srv: EngramServer) -> None:
    async with AsyncEngramClient(srv.address, timeout=60) as client:
        with tracer.start_as_current_span("caller"):
            await client.add("The user is allergic to peanuts.")
    caller = one(otel, "caller", SpanKind.INTERNAL)
    client_span = one(otel, ADD, SpanKind.CLIENT)
    server_span = one(otel, ADD, SpanKind.SERVER)
    assert_chain(caller, client_span, server_span)
    attrs = dict(client_span.attributes or {})
    assert attrs["rpc.system"] == "grpc" and attrs["rpc.service"] == "engram.v1.MemoryService"
    assert attrs["rpc.method"] == "AddMemory" and attrs["rpc.grpc.status_code"] == 0
    assert attrs["server.address"] == "127.0.0.1" and isinstance(attrs["server.port"], int)
    assert client_span.status.status_code is StatusCode.UNSET


async def test_sync_call_in_a_span_continues_its_trace(otel: Otel, srv: EngramServer) -> None:
    def call() -> None:  # in a thread: the server runs on this test's event loop
        with EngramClient(srv.address, timeout=60) as client, tracer.start_as_current_span("caller"):
            client.search("peanuts")

    await asyncio.to_thread(call)
    assert_chain(
        one(otel, "caller", SpanKind.INTERNAL),
        one(otel, SEARCH, SpanKind.CLIENT),
        one(otel, SEARCH, SpanKind.SERVER),
    )


async def test_call_without_a_span_starts_a_trace_the_server_joins(otel: Otel, srv: EngramServer) -> None:
    async with AsyncEngramClient(srv.address, timeout=60) as client:
        await client.search("peanuts")
    client_span = one(otel, SEARCH, SpanKind.CLIENT)
    assert client_span.parent is None
    assert_chain(client_span, one(otel, SEARCH, SpanKind.SERVER))


async def test_every_attempt_of_a_retried_call_carries_the_trace(otel: Otel) -> None:
    script = Script()
    script.fail("AddMemory", UNAVAILABLE, UNAVAILABLE)
    async with fake_server(script) as address, AsyncEngramClient(address, retry=FAST) as client:
        with tracer.start_as_current_span("caller") as caller:
            await client.add("hello")
    client_span = one(otel, ADD, SpanKind.CLIENT)
    assert_chain(one(otel, "caller", SpanKind.INTERNAL), client_span)
    attempts = script.attempts("AddMemory")
    assert len(attempts) == 3
    assert client_span.context is not None
    expected = (f"{caller.get_span_context().trace_id:032x}", f"{client_span.context.span_id:016x}")
    assert [traceparent_ids(a.metadata) for a in attempts] == [expected] * 3
    retries = [e for e in client_span.events if e.name == "engram.retry"]
    assert [dict(e.attributes or {})["engram.attempt"] for e in retries] == [1, 2]
    assert dict(retries[0].attributes or {})["engram.error.reason"] == "ERROR_REASON_STORAGE_UNAVAILABLE"
    attrs = dict(client_span.attributes or {})
    assert attrs["engram.attempts"] == 3 and attrs["rpc.grpc.status_code"] == 0


async def test_sync_retries_carry_the_trace_and_a_final_failure_marks_the_span(otel: Otel) -> None:
    script = Script()
    script.fail("AddMemory", *[UNAVAILABLE] * 4)  # FAST allows 4 attempts: all fail

    async with fake_server(script) as address:

        def call() -> None:
            with (
                EngramClient(address, retry=FAST) as client,
                tracer.start_as_current_span("caller"),
                pytest.raises(StorageUnavailableError),
            ):
                client.add("hello")

        await asyncio.to_thread(call)
    client_span = one(otel, ADD, SpanKind.CLIENT)
    assert client_span.context is not None
    ids = {traceparent_ids(a.metadata) for a in script.attempts("AddMemory")}
    assert ids == {(f"{client_span.context.trace_id:032x}", f"{client_span.context.span_id:016x}")}
    assert client_span.status.status_code is StatusCode.ERROR
    attrs = dict(client_span.attributes or {})
    assert (
        attrs["error.type"] == "UNAVAILABLE"
        and attrs["rpc.grpc.status_code"] == grpc.StatusCode.UNAVAILABLE.value[0]
    )
    assert (
        attrs["engram.error.reason"] == "ERROR_REASON_STORAGE_UNAVAILABLE" and attrs["engram.attempts"] == 4
    )


async def test_without_opentelemetry_the_client_sends_no_trace_context(
    otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_otel, "propagate", None)
    monkeypatch.setattr(client_otel, "trace", None)
    script = Script()
    script.fail("AddMemory", UNAVAILABLE)
    async with fake_server(script) as address, AsyncEngramClient(address, retry=FAST) as client:
        with tracer.start_as_current_span("caller"):
            assert (await client.add("hello")).created
    attempts = script.attempts("AddMemory")
    assert len(attempts) == 2 and not any("traceparent" in a.metadata for a in attempts)
    assert [s.name for s in otel.spans()] == ["caller"]


async def test_the_client_works_where_opentelemetry_cannot_be_imported() -> None:
    """A real ImportError, in a fresh interpreter (``sys.modules`` entry None blocks the import)."""
    program = textwrap.dedent(
        """
        import sys
        sys.modules["opentelemetry"] = None
        import engram_client._otel as otel
        from engram_client import EngramClient
        assert otel.propagate is None and otel.trace is None
        with EngramClient(sys.argv[1], timeout=30) as client:
            assert client.add("hello").created
        print("ok")
        """
    )
    script = Script()
    async with fake_server(script) as address:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            program,
            address,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0 and out.decode().strip() == "ok", err.decode()
    (attempt,) = script.attempts("AddMemory")
    assert "traceparent" not in attempt.metadata


async def test_one_trace_across_mcp_shim_client_and_server(otel: Otel, srv: EngramServer) -> None:
    """MCP client span -> the shim's tool span (the mcp SDK's, parented on the request's
    ``_meta.traceparent``) -> engram-client's CLIENT span -> the server's SERVER span -> its work.

    ``mode="legacy"`` runs the session over JSON-RPC messages, as stdio and streamable HTTP do (the
    default in-process mode calls the server directly and sends no trace context by itself)."""
    async with (
        AsyncEngramClient(srv.address, timeout=60) as engram,
        Client(EngramMcp(ShimSettings(), client=engram).server, mode="legacy") as mcp,
    ):
        otel.exporter.clear()  # the session's handshake is its own trace
        result = await mcp.call_tool("memory_add", {"content": "Frank drinks tea.", "importance": 4})
        assert not result.is_error, result.content
    mcp_client = one(otel, "MCP send tools/call memory_add", SpanKind.CLIENT)
    tool = one(otel, "tools/call memory_add", SpanKind.SERVER)
    assert dict(tool.attributes or {})["gen_ai.tool.name"] == "memory_add"
    client_span = one(otel, ADD, SpanKind.CLIENT)
    server_span = one(otel, ADD, SpanKind.SERVER)
    assert_chain(mcp_client, tool, client_span, server_span)
    assert mcp_client.parent is None
    gate = one(otel, "engram.gate", SpanKind.INTERNAL)
    assert_chain(server_span, gate)
    assert server_span.context is not None
    # Everything the call did is in its trace; only the session's housekeeping (the initialized
    # notification, the tool listing the client fetches) is in others.
    elsewhere = [s.name for s in otel.spans() if s.context is None or s.context.trace_id != trace_id(tool)]
    assert not [n for n in elsewhere if n.startswith(("engram", "tools/call", "MCP send tools/call"))], (
        elsewhere
    )


async def test_a_traceparent_in_the_tool_calls_meta_is_continued(otel: Otel, srv: EngramServer) -> None:
    """An MCP host that traces its agent sends ``_meta.traceparent``; without one a tool call is a
    trace of its own."""
    async with (
        AsyncEngramClient(srv.address, timeout=60) as engram,
        Client(EngramMcp(ShimSettings(), client=engram).server) as mcp,
    ):
        with tracer.start_as_current_span("agent step") as step:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
        otel.exporter.clear()
        result = await mcp.call_tool(
            "memory_search", {"query": "tea"}, meta={"traceparent": carrier["traceparent"]}
        )
        assert not result.is_error, result.content
        tool = one(otel, "tools/call memory_search", SpanKind.SERVER)
        assert tool.parent is not None and tool.parent.span_id == step.get_span_context().span_id
        assert tool.context is not None and tool.context.trace_id == step.get_span_context().trace_id
        assert_chain(tool, one(otel, SEARCH, SpanKind.CLIENT), one(otel, SEARCH, SpanKind.SERVER))

        otel.exporter.clear()
        result = await mcp.call_tool("memory_search", {"query": "coffee"})
        assert not result.is_error, result.content
        tool = one(otel, "tools/call memory_search", SpanKind.SERVER)
        assert tool.parent is None and tool.context is not None
        assert tool.context.trace_id != step.get_span_context().trace_id
        assert_chain(tool, one(otel, SEARCH, SpanKind.CLIENT), one(otel, SEARCH, SpanKind.SERVER))


async def test_mcp_tool_error_stays_in_the_trace(otel: Otel, srv: EngramServer) -> None:
    async with (
        AsyncEngramClient(srv.address, timeout=60) as engram,
        Client(EngramMcp(ShimSettings(), client=engram).server, mode="legacy") as mcp,
    ):
        otel.exporter.clear()
        result = await mcp.call_tool("memory_delete", {"id": "00000000-0000-0000-0000-000000000000"})
        assert result.is_error
    tool = one(otel, "tools/call memory_delete", SpanKind.SERVER)
    assert tool.status.status_code is StatusCode.ERROR
    client_span = one(otel, "engram.v1.MemoryService/DeleteMemory", SpanKind.CLIENT)
    assert client_span.status.status_code is StatusCode.ERROR
    assert dict(client_span.attributes or {})["error.type"] == "NOT_FOUND"
    assert_chain(
        one(otel, "MCP send tools/call memory_delete", SpanKind.CLIENT),
        tool,
        client_span,
        one(otel, "engram.v1.MemoryService/DeleteMemory", SpanKind.SERVER),
    )
