"""The MCP shim against a live Engram server: every tool through the mcp package's in-process
client, read-only mode, the pinned collection, and the stdio and streamable HTTP transports."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult

from engram_client import AsyncEngramClient, MemoryNotFoundError
from engram_mcp import READ_TOOLS, WRITE_TOOLS, EngramMcp, ShimSettings

FACT = "Frank prefers concise commit messages, imperative mood, no emoji."


def payload(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        return dict(result.structured_content)
    text = result.content[0]
    assert text.type == "text"
    return dict(json.loads(text.text))


def error_text(result: CallToolResult) -> str:
    assert result.is_error
    text = result.content[0]
    assert text.type == "text"
    return text.text


@pytest.fixture
async def engram(engram_server: str) -> AsyncIterator[AsyncEngramClient]:
    async with AsyncEngramClient(engram_server, timeout=60) as client:
        yield client


async def test_tools_are_described_for_a_model(engram: AsyncEngramClient) -> None:
    async with Client(EngramMcp(ShimSettings(), client=engram).server) as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        assert set(tools) == set(READ_TOOLS) | set(WRITE_TOOLS)
        assert "0.82" in (tools["memory_search"].description or "")
        assert "memory_update" in (tools["memory_add"].description or "")
        add_props = tools["memory_add"].input_schema["properties"]
        assert add_props["type"]["enum"] == ["identity", "directive", "insight", "event"]
        assert "accurate" in add_props["importance"]["description"]
        assert add_props["importance"]["minimum"] == 1 and add_props["importance"]["maximum"] == 10
        assert "collection" in add_props
        assert "collections" in tools["memory_search"].input_schema["properties"]
        assert (
            tools["memory_search"].annotations is not None
            and tools["memory_search"].annotations.read_only_hint
        )
        assert "0.82" in (mcp.instructions or "")


async def test_add_search_update_delete_through_the_tools(engram: AsyncEngramClient) -> None:
    async with Client(EngramMcp(ShimSettings(), client=engram).server) as mcp:
        added = payload(
            await mcp.call_tool(
                "memory_add", {"content": FACT, "type": "directive", "importance": 8, "tags": ["frank"]}
            )
        )
        assert added["outcome"] == "created"
        memory_id = added["memory"]["id"]
        assert added["memory"]["type"] == "directive" and added["memory"]["importance"] == 8

        duplicate = payload(await mcp.call_tool("memory_add", {"content": FACT, "type": "directive"}))
        assert duplicate["outcome"] == "duplicate" and duplicate["memory"]["id"] == memory_id

        found = payload(
            await mcp.call_tool("memory_search", {"query": "how does Frank like commit messages"})
        )
        best = found["results"][0]
        assert best["id"] == memory_id and 0 < best["relevance"] <= 1 and best["score"] > 0

        updated = payload(
            await mcp.call_tool(
                "memory_update", {"id": memory_id, "new_content": "Frank wants one-line commits."}
            )
        )
        assert updated["changed"] and updated["memory"]["version"] == 2
        assert updated["previous"]["content"] == FACT

        located = payload(
            await mcp.call_tool(
                "memory_update",
                {"old_content": "Frank wants one-line commits.", "importance": 9, "dry_run": True},
            )
        )
        assert located["dry_run"] and located["memory"]["id"] == memory_id and located["similarity"] >= 0.85

        refused = error_text(await mcp.call_tool("memory_delete", {"id": memory_id}))
        assert "PROTECTED_MEMORY" in refused and "force=true" in refused
        deleted = payload(await mcp.call_tool("memory_delete", {"id": memory_id, "force": True}))
        assert [m["id"] for m in deleted["deleted"]] == [memory_id]
        with pytest.raises(MemoryNotFoundError):
            await engram.get(memory_id)


async def test_errors_tell_the_model_what_to_do(engram: AsyncEngramClient) -> None:
    async with Client(EngramMcp(ShimSettings(), client=engram).server) as mcp:
        low = error_text(
            await mcp.call_tool(
                "memory_update", {"old_content": "anything", "new_content": "x", "threshold": 0.5}
            )
        )
        assert "THRESHOLD_TOO_LOW" in low and "0.85" in low
        both = error_text(await mcp.call_tool("memory_delete", {}))
        assert "exactly one of id or query" in both
        bad = error_text(await mcp.call_tool("memory_add", {"content": "x", "importance": 11}))
        assert "importance" in bad  # refused by the tool's schema before any call
        reflection = error_text(await mcp.call_tool("reflection_run", {}))
        assert "reflection is not available on this server" in reflection


async def test_read_only_mode_registers_no_write_tool(engram: AsyncEngramClient) -> None:
    await engram.add("The deploy freeze starts on Friday.", importance=6)
    async with Client(EngramMcp(ShimSettings(read_only=True), client=engram).server) as mcp:
        names = {t.name for t in (await mcp.list_tools()).tools}
        assert names == {"memory_search"}
        assert error_text(await mcp.call_tool("memory_add", {"content": "sneaky write"}))
        found = payload(await mcp.call_tool("memory_search", {"query": "when does the deploy freeze start"}))
        assert found["results"][0]["content"] == "The deploy freeze starts on Friday."
    assert [r.memory.content for r in await engram.search("sneaky write")] == [
        "The deploy freeze starts on Friday."
    ]


async def test_pinned_collection_cannot_be_escaped(engram: AsyncEngramClient) -> None:
    secret = await engram.add("Tenant B's launch date is March 3.", collection="tenant-b", importance=7)
    async with Client(EngramMcp(ShimSettings(collection="tenant-a"), client=engram).server) as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        for tool in tools.values():
            assert "collection" not in tool.input_schema.get("properties", {})
            assert "collections" not in tool.input_schema.get("properties", {})

        # An argument the schema does not offer is not honoured.
        added = payload(
            await mcp.call_tool(
                "memory_add", {"content": "Tenant A ships on May 9.", "collection": "tenant-b"}
            )
        )
        assert added["memory"]["collection"] == "tenant-a"
        found = payload(
            await mcp.call_tool(
                "memory_search", {"query": "launch date", "collections": ["tenant-b"], "limit": 10}
            )
        )
        assert {r["collection"] for r in found["results"]} == {"tenant-a"}
        assert secret.memory.id not in {r["id"] for r in found["results"]}

        gone = error_text(await mcp.call_tool("memory_delete", {"id": secret.memory.id, "force": True}))
        assert "MEMORY_NOT_FOUND" in gone
        stolen = error_text(
            await mcp.call_tool("memory_update", {"id": secret.memory.id, "new_content": "x"})
        )
        assert "MEMORY_NOT_FOUND" in stolen
    assert (await engram.get(secret.memory.id, collection="tenant-b")).memory.content == secret.memory.content


def _shim_env(address: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env.update({"ENGRAM_ADDR": address, "ENGRAM_TIMEOUT": "60", **extra})
    return env


async def test_stdio_transport(engram: AsyncEngramClient, engram_server: str) -> None:
    await engram.add("The office plants are watered on Mondays.", importance=3, collection="plants")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "engram_mcp"],
        env=_shim_env(engram_server, ENGRAM_MCP_COLLECTION="plants", ENGRAM_MCP_READ_ONLY="1"),
    )
    async with Client(params) as mcp:
        assert {t.name for t in (await mcp.list_tools()).tools} == {"memory_search"}
        found = payload(await mcp.call_tool("memory_search", {"query": "when are plants watered"}))
        assert found["results"][0]["content"] == "The office plants are watered on Mondays."


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_streamable_http_transport(engram_server: str, tmp_path: Path) -> None:
    port = _free_port()
    script = Path(sys.executable).with_name("engram-mcp")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "engram_mcp"]
    log = (tmp_path / "shim.log").open("wb")
    process = await asyncio.create_subprocess_exec(
        *command,
        "--transport",
        "streamable-http",
        "--port",
        str(port),
        env=_shim_env(engram_server),
        stdout=log,
        stderr=log,
    )
    try:
        for _ in range(200):
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05)
            else:
                writer.close()
                await writer.wait_closed()
                break
        async with Client(f"http://127.0.0.1:{port}/mcp") as mcp:
            assert {t.name for t in (await mcp.list_tools()).tools} == set(READ_TOOLS) | set(WRITE_TOOLS)
            added = payload(
                await mcp.call_tool("memory_add", {"content": "HTTP transport works.", "type": "event"})
            )
            assert added["outcome"] == "created"
            found = payload(await mcp.call_tool("memory_search", {"query": "does the HTTP transport work"}))
            assert found["results"][0]["id"] == added["memory"]["id"]
    finally:
        process.terminate()
        await process.wait()
        log.close()
