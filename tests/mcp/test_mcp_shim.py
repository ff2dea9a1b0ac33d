"""The MCP shim against a live Engram server: every tool through the mcp package's in-process
client, read-only mode, the pinned collection, and the stdio and streamable HTTP transports."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult

from engram_client import AsyncEngramClient, MemoryNotFoundError, NewMemory
from engram_client.proto.engram.v1 import memory_service_pb2, memory_service_pb2_grpc
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
        assert "cross-encoder" in tools["memory_search"].input_schema["properties"]["rerank"]["description"]
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
        assert [m["id"] for m in deleted["deleted"]] == [memory_id] and deleted["restorable_until"]
        with pytest.raises(MemoryNotFoundError):
            await engram.get(memory_id)
        # the trash: listed, a clear hint on the deleted id, and undone
        trash = payload(await mcp.call_tool("memory_trash", {}))
        assert [m["id"] for m in trash["memories"]] == [memory_id] and trash["memories"][0]["purge_at"]
        hint = error_text(await mcp.call_tool("memory_update", {"id": memory_id, "new_content": "x"}))
        assert "memory_restore" in hint
        restored = payload(await mcp.call_tool("memory_restore", {"id": memory_id}))
        assert restored["memory"]["id"] == memory_id and "trashed_at" not in restored["memory"]
        assert (await engram.get(memory_id)).memory.version == 2
        again = error_text(await mcp.call_tool("memory_restore", {"id": memory_id}))
        assert "MEMORY_NOT_FOUND" in again


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
        empty = error_text(await mcp.call_tool("memory_add", {"content": ""}))
        assert empty.count("content: must not be empty") == 1, empty  # said once
        reflection = error_text(await mcp.call_tool("reflection_run", {}))  # this server has no LLM
        assert "LLM_NOT_CONFIGURED" in reflection and "LLM endpoint" in reflection


async def test_reflection_on_a_server_without_the_rpc() -> None:
    """An older Engram server (here: a gRPC server without the service) answers UNIMPLEMENTED."""
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with (
            AsyncEngramClient(f"127.0.0.1:{port}", timeout=60) as client,
            Client(EngramMcp(ShimSettings(), client=client).server) as mcp,
        ):
            text = error_text(await mcp.call_tool("reflection_run", {"dry_run": True}))
        assert text.endswith(": reflection is not available on this server")
    finally:
        await server.stop(None)


async def test_read_only_mode_registers_no_write_tool(engram: AsyncEngramClient) -> None:
    await engram.add("The deploy freeze starts on Friday.", importance=6)
    async with Client(EngramMcp(ShimSettings(read_only=True), client=engram).server) as mcp:
        names = {t.name for t in (await mcp.list_tools()).tools}
        assert (
            names
            == set(READ_TOOLS)
            == {
                "memory_context",
                "memory_search",
                "memory_topic",
                "memory_triggers",
                "memory_trash",
            }
        )
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


async def test_session_tools_context_triggers_and_slots(engram: AsyncEngramClient) -> None:
    await engram.add("I am Ada, the Orbit project's coding agent", type="identity", importance=9)
    await engram.add("Never deploy on Fridays", type="directive", importance=9, tags=["trigger:deploy"])
    settings = ShimSettings(agent_id="ada", session_id="first")
    async with Client(EngramMcp(settings, client=engram).server) as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        assert "FIRST" in (tools["memory_context"].description or "")
        assert "compacted" in (tools["memory_context"].description or "")
        assert "BEFORE" in (tools["memory_triggers"].description or "")
        assert "memory_context FIRST" in (mcp.instructions or "")
        slot = payload(await mcp.call_tool("memory_slot_update", {"slot": "persona", "content": "Terse."}))
        assert slot["content"] == "Terse." and slot["capacity_tokens"] == 200
        added = payload(
            await mcp.call_tool("memory_add", {"content": "The release branch is cut on Tuesdays"})
        )
        assert added["outcome"] == "created"
        pack = payload(await mcp.call_tool("memory_context", {"task": "deploy the release"}))
        assert pack["markdown"].startswith("## Core\n- **persona**: Terse.")
        assert "`deploy`" in pack["markdown"] and pack["tokens_used"] <= 2000
        lessons = payload(await mcp.call_tool("memory_triggers", {"action": "Deploy"}))
        assert [m["content"] for m in lessons["memories"]] == ["Never deploy on Fridays"]
        bad = error_text(await mcp.call_tool("memory_triggers", {"action": "deploy!!"}))
        assert "INVALID_ARGUMENT" in bad and "trigger names" in bad
    memory = (await engram.search("release branch", limit=1))[0].memory
    assert (memory.session_id, memory.agent_id) == ("first", "ada")  # the shim's session and agent
    async with Client(EngramMcp(ShimSettings(agent_id="ada"), client=engram).server) as mcp:
        pack = payload(await mcp.call_tool("memory_context", {}))
        assert pack["since_source"] == "last_session"


async def test_pinned_collection_before_its_first_write(engram: AsyncEngramClient) -> None:
    """The pinned collection is created by its first write: the pre-write search before it finds
    nothing (not an error); an unpinned search of a missing collection is an error the agent sees."""
    async with Client(EngramMcp(ShimSettings(collection="fresh-pin"), client=engram).server) as mcp:
        found = payload(await mcp.call_tool("memory_search", {"query": "anything at all", "limit": 3}))
        assert found["results"] == []
    async with Client(EngramMcp(ShimSettings(), client=engram).server) as mcp:
        missing = error_text(
            await mcp.call_tool("memory_search", {"query": "anything", "collections": ["no-such-collection"]})
        )
        assert "COLLECTION_NOT_FOUND" in missing


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
        assert {t.name for t in (await mcp.list_tools()).tools} == set(READ_TOOLS)
        found = payload(await mcp.call_tool("memory_search", {"query": "when are plants watered"}))
        assert found["results"][0]["content"] == "The office plants are watered on Mondays."


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


#: How long the shim may take to start listening: generous, for a loaded machine (the shim
#: imports its SDK and connects first); a shim that exits fails at once, with its log.
READY_BOUND_S = 180.0


def _text(log: Path) -> str:
    return log.read_text(errors="replace")


async def _wait_listening(process: asyncio.subprocess.Process, port: int, log: Path) -> None:
    loop = asyncio.get_running_loop()
    until = loop.time() + READY_BOUND_S
    while True:
        if process.returncode is not None:
            pytest.fail(f"the shim exited ({process.returncode}) before listening: {_text(log)}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if loop.time() > until:
                pytest.fail(f"the shim did not listen on {port} within {READY_BOUND_S} s: {_text(log)}")
            await asyncio.sleep(0.1)
        else:
            writer.close()
            await writer.wait_closed()
            return


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
        await _wait_listening(process, port, tmp_path / "shim.log")
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


REPO = Path(__file__).resolve().parents[2]
README_CHECKOUT = "/path/to/engram"


def readme_mcp_servers() -> dict[str, Any]:
    """The JSON block of the README's MCP section, parsed."""
    readme = (REPO / "README.md").read_text()
    section = readme[
        readme.index("## MCP server (`engram-mcp`)") : readme.index("## Go, TypeScript and grpcurl")
    ]
    blocks = re.findall(r"```json\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, blocks
    config: dict[str, Any] = json.loads(blocks[0])
    return config


async def test_readme_config_block_runs_the_shim(engram: AsyncEngramClient, engram_server: str) -> None:
    """The README's mcpServers block, as written: only the checkout path and the address of this
    test's server are filled in. A real MCP stdio session then lists the tools and runs
    add -> search -> update -> delete."""
    config = readme_mcp_servers()
    assert list(config) == ["mcpServers"] and list(config["mcpServers"]) == ["engram"]
    entry = config["mcpServers"]["engram"]
    assert set(entry) == {"command", "args", "env"}
    assert entry["command"].startswith(README_CHECKOUT + "/")
    command = REPO / entry["command"].removeprefix(README_CHECKOUT + "/")
    assert command.is_file(), f"{command} missing: `make install` puts engram-mcp into .venv"
    env = dict(entry["env"])
    assert env["ENGRAM_ADDR"] == "127.0.0.1:50051"  # where `make run` listens
    env["ENGRAM_ADDR"] = engram_server
    collection = env["ENGRAM_MCP_COLLECTION"]
    await engram.add("Warm-up, so the first tool call does not wait for the model.", collection="warm")

    params = StdioServerParameters(command=str(command), args=list(entry["args"]), env=env)
    async with Client(params) as mcp:
        tools = {t.name for t in (await mcp.list_tools()).tools}
        assert tools == set(READ_TOOLS) | set(WRITE_TOOLS)

        added = payload(
            await mcp.call_tool(
                "memory_add", {"content": FACT, "type": "directive", "importance": 8, "tags": ["frank"]}
            )
        )
        assert added["outcome"] == "created" and added["memory"]["collection"] == collection
        memory_id = added["memory"]["id"]

        found = payload(
            await mcp.call_tool("memory_search", {"query": "how does Frank like commit messages", "limit": 3})
        )
        assert found["results"][0]["id"] == memory_id and found["results"][0]["relevance"] > 0.7

        updated = payload(
            await mcp.call_tool(
                "memory_update", {"id": memory_id, "new_content": "Frank wants one-line commit messages."}
            )
        )
        assert updated["changed"] and updated["memory"]["version"] == 2
        assert updated["memory"]["content"] == "Frank wants one-line commit messages."
        assert updated["previous"]["content"] == FACT

        refused = error_text(await mcp.call_tool("memory_delete", {"id": memory_id}))
        assert "PROTECTED_MEMORY" in refused
        deleted = payload(await mcp.call_tool("memory_delete", {"id": memory_id, "force": True}))
        assert [m["id"] for m in deleted["deleted"]] == [memory_id]

        after = payload(await mcp.call_tool("memory_search", {"query": "Frank commit messages"}))
        assert memory_id not in {r["id"] for r in after["results"]}
    with pytest.raises(MemoryNotFoundError):
        await engram.get(memory_id, collection=collection)


@contextlib.contextmanager
def _silent_peer() -> Iterator[str]:
    """Accepts TCP connections (the kernel does, from the backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


async def test_unreachable_server_is_a_quick_clear_tool_error() -> None:
    dead = f"127.0.0.1:{_free_port()}"  # nothing listens there
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "engram_mcp"], env=_shim_env(dead, ENGRAM_TIMEOUT="120")
    )
    async with Client(params) as mcp:
        assert {t.name for t in (await mcp.list_tools()).tools} == set(READ_TOOLS) | set(WRITE_TOOLS)
        start = time.monotonic()
        text = error_text(await mcp.call_tool("memory_search", {"query": "anything"}))
        assert time.monotonic() - start < 60  # retries included; far below ENGRAM_TIMEOUT
        assert "UNAVAILABLE: failed to connect" in text
        assert f"Cannot reach the Engram server at {dead} (ENGRAM_ADDR)" in text
        text = error_text(await mcp.call_tool("memory_add", {"content": "Nobody will store this."}))
        assert f"Cannot reach the Engram server at {dead}" in text

    with _silent_peer() as silent:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "engram_mcp"], env=_shim_env(silent, ENGRAM_TIMEOUT="1")
        )
        async with Client(params) as mcp:
            start = time.monotonic()
            text = error_text(await mcp.call_tool("memory_search", {"query": "anything"}))
            assert time.monotonic() - start < 60  # (the peer never answers: the deadline ended the call)
            assert "DEADLINE_EXCEEDED: " in text
            assert f"The Engram server at {silent} did not answer in time (ENGRAM_TIMEOUT)" in text


def test_bad_connection_settings_stop_the_shim_at_startup() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "engram_mcp"],
        env=_shim_env("127.0.0.1:50051", ENGRAM_TLS="maybe"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0 and "engram-mcp: " in done.stderr and "ENGRAM_TLS" in done.stderr


class _ReflectingServer(memory_service_pb2_grpc.MemoryServiceServicer):
    """Only RunReflection, answering a throttled run (the real one needs an LLM endpoint)."""

    def __init__(self) -> None:
        self.requests: list[memory_service_pb2.RunReflectionRequest] = []

    async def RunReflection(self, request: Any, context: Any) -> memory_service_pb2.RunReflectionResponse:
        self.requests.append(request)
        resp = memory_service_pb2.RunReflectionResponse(
            outcome=memory_service_pb2.REFLECTION_OUTCOME_THROTTLED,
            throttled_by=memory_service_pb2.REFLECTION_GATE_MIN_INTERVAL,
            detail="the last run was 10 minutes ago",
            unreflected_importance=12,
            unreflected_count=3,
        )
        resp.next_run_after.FromSeconds(1_900_000_000)
        return resp


async def test_reflection_run_reports_the_outcome() -> None:
    servicer = _ReflectingServer()
    server = grpc.aio.server()
    memory_service_pb2_grpc.add_MemoryServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with (
            AsyncEngramClient(f"127.0.0.1:{port}", timeout=60) as client,
            Client(EngramMcp(ShimSettings(collection="team"), client=client).server) as mcp,
        ):
            report = payload(await mcp.call_tool("reflection_run", {"dry_run": True}))
    finally:
        await server.stop(None)
    assert report["outcome"] == "throttled" and report["throttled_by"] == "min_interval"
    assert report["detail"] == "the last run was 10 minutes ago" and report["unreflected_count"] == 3
    assert report["next_run_after"].startswith("2030-03-17T")
    assert report["insights"] == [] and report["sources"] == []
    (request,) = servicer.requests
    assert request.collection == "team" and request.dry_run and not request.force


def test_help_is_plain_text() -> None:
    """`engram-mcp --help` as a user runs it: no reStructuredText markup, and the connection settings."""
    done = subprocess.run(
        [sys.executable, "-m", "engram_mcp", "--help"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "``" not in done.stdout and ":mod:" not in done.stdout, done.stdout
    assert "ENGRAM_ADDR" in done.stdout and "--collection" in done.stdout


async def test_memory_extract_stores_the_facts_of_a_conversation(engram: AsyncEngramClient) -> None:
    async with Client(EngramMcp(ShimSettings(), client=engram).server) as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        assert "memory_add" in (tools["memory_extract"].description or "")
        messages = [
            {"role": "user", "content": "I'm Dana, I work as a data engineer at Zalando."},
            {"role": "assistant", "content": "Nice to meet you, Dana."},
            {
                "role": "user",
                "content": "Never run migrations on Fridays. My token is "
                "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
            },
        ]
        preview = payload(await mcp.call_tool("memory_extract", {"messages": messages, "dry_run": True}))
        assert preview["dry_run"] and preview["extractor"] == "rules"
        assert all("outcome" not in x for x in preview["memories"])
        done = payload(await mcp.call_tool("memory_extract", {"messages": messages}))
        assert [(x["type"], x["outcome"]) for x in done["memories"]] == [
            ("identity", "created"),
            ("directive", "created"),
        ]
        assert done["redactions"] == ["github_token"]
        assert all("ghp_" not in x["content"] for x in done["memories"])
        stored = await engram.get(done["memories"][1]["id"])
        assert stored.memory.content == "User: Never run migrations on Fridays"
        both = error_text(await mcp.call_tool("memory_extract", {"text": "x", "messages": messages}))
        assert "exactly one of text or messages" in both


async def test_memory_topic_lists_the_index_and_drills_into_a_topic(engram: AsyncEngramClient) -> None:
    await engram.add_many(
        [
            NewMemory(content=text)
            for text in (
                "Production runs on a Kubernetes cluster with three node pools.",
                "Deployments go through Argo CD; never kubectl apply to the prod namespace.",
                "部署失败时先看 kubectl describe pod 的事件。",
                "The user bakes sourdough every Sunday.",
                "Favourite dinner is a Thai green curry with extra basil.",
                "用户周末喜欢做红烧肉。",
            )
        ]
    )
    async with Client(EngramMcp(ShimSettings(), client=engram).server) as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        description = tools["memory_topic"].description or ""
        assert "context pack" in description and "topic_id" in description
        assert (
            tools["memory_topic"].annotations is not None and tools["memory_topic"].annotations.read_only_hint
        )
        index = payload(await mcp.call_tool("memory_topic", {}))
        assert index["memory_count"] == 6
        assert sum(t["size"] for t in index["topics"]) == 6
        first = index["topics"][0]
        topic = payload(await mcp.call_tool("memory_topic", {"topic_id": first["id"], "limit": 50}))
        assert topic["topic"]["id"] == first["id"]
        assert len(topic["memories"]) == first["size"]
        assert all(m["content"] for m in topic["memories"])
        missing = error_text(await mcp.call_tool("memory_topic", {"topic_id": "t0000000000"}))
        assert "TOPIC_NOT_FOUND: " in missing and "without topic_id" in missing


class _SearchSpy(AsyncEngramClient):
    """The real client, recording the ``rerank`` each search sends."""

    sent: list[bool | None]

    async def search(self, *args: Any, **kw: Any) -> Any:  # type: ignore[override]
        self.sent.append(kw.get("rerank"))
        return await super().search(*args, **kw)


async def test_search_passes_the_rerank_switch(engram_server: str) -> None:
    async with _SearchSpy(engram_server, timeout=60) as client:
        client.sent = []
        await client.add(FACT, type="directive")
        async with Client(EngramMcp(ShimSettings(), client=client).server) as mcp:
            fast = payload(
                await mcp.call_tool("memory_search", {"query": "commit messages", "rerank": False})
            )
            default = payload(await mcp.call_tool("memory_search", {"query": "commit messages"}))
    assert client.sent == [False, None]
    assert fast["results"][0]["content"] == default["results"][0]["content"] == FACT
