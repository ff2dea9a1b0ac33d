"""engram-hooks against a live server (embedded Qdrant, the real local model, real gRPC), fed the
recorded payloads of tests/hooks/payloads/ (one per Claude Code hook event, in Claude Code's hook
input format) and their transcript: a session wired with the hooks builds a useful memory without
the agent calling a tool; and the hook never breaks the agent (server down, bad input, no answer)."""

from __future__ import annotations

import asyncio
import io
import json
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from engram_hooks import main
from engram_hooks.core import read_transcript, session_summary

from engram_client import AsyncEngramClient, MemoryFilter

REPO = Path(__file__).resolve().parents[2]
PAYLOADS = Path(__file__).parent / "payloads"
EVENTS = (
    "SessionStart",
    "UserPromptSubmit",
    "PostToolUse",
    "PostToolUseFailure",
    "Stop",
    "PreCompact",
    "SessionEnd",
)
PASSWORD = "Sh0p-st4ging!"
CHECKOUT = "/path/to/engram"


def payload(event: str, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((PAYLOADS / f"{event}.json").read_text())
    data["transcript_path"] = str(PAYLOADS / "transcript.jsonl")
    data.update(changes)
    return data


def recent_transcript(folder: Path) -> Path:
    """The recorded transcript moved in time so that its last message is a minute old: the hooks
    date each captured memory by its message, and the recorded dates would put an event's TTL
    (7 days) behind us a week after they were recorded."""
    lines = [json.loads(x) for x in (PAYLOADS / "transcript.jsonl").read_text().splitlines() if x.strip()]
    stamps = [datetime.fromisoformat(x["timestamp"]) for x in lines if "timestamp" in x]
    shift = datetime.now(UTC) - timedelta(minutes=1) - max(stamps)
    for x in lines:
        if "timestamp" in x:
            moved = datetime.fromisoformat(x["timestamp"]) + shift
            x["timestamp"] = moved.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    out = folder / "transcript.jsonl"
    out.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return out


async def hook(addr: str, data: dict[str, Any] | str, *argv: str) -> tuple[str, str]:
    """Run engram-hooks in-process (in a thread: the server runs on this event loop)."""
    out, err = io.StringIO(), io.StringIO()
    raw = data if isinstance(data, str) else json.dumps(data)

    def run() -> int:
        return main(list(argv), stdin=io.StringIO(raw), stdout=out, stderr=err, env={"ENGRAM_ADDR": addr})

    assert await asyncio.to_thread(run) == 0
    return out.getvalue(), err.getvalue()


def context(stdout: str, event: str) -> str:
    answer = json.loads(stdout)
    assert answer["hookSpecificOutput"]["hookEventName"] == event
    text: str = answer["hookSpecificOutput"]["additionalContext"]
    return text


def test_the_recorded_payloads_have_claude_codes_fields() -> None:
    common = {"session_id", "transcript_path", "cwd", "hook_event_name"}
    own = {
        "SessionStart": {"source"},
        "UserPromptSubmit": {"prompt"},
        "PostToolUse": {"tool_name", "tool_input", "tool_response", "tool_use_id"},
        "PostToolUseFailure": {"tool_name", "tool_input", "tool_use_id", "error"},
        "Stop": {"stop_hook_active"},
        "PreCompact": {"trigger", "custom_instructions"},
        "SessionEnd": {"reason"},
    }
    for event in EVENTS:
        data = json.loads((PAYLOADS / f"{event}.json").read_text())
        assert data["hook_event_name"] == event
        assert common | own[event] <= set(data), event


def test_the_transcript_reader_keeps_the_conversation_only() -> None:
    t = read_transcript(str(PAYLOADS / "transcript.jsonl"))
    assert [m.role for m in t.messages] == [
        "user",
        "assistant",
        "assistant",
        "assistant",
        "user",
        "assistant",
    ]
    assert t.messages[0].content.startswith("My name is Maya")
    assert t.messages[0].created_at is not None and t.messages[0].created_at.year == 2026
    assert all("tool_result" not in m.content and "/exit" not in m.content for m in t.messages)
    assert t.files == ["/home/dev/shop/src/checkout/payment.ts"]
    assert t.commands == ["pnpm test -- checkout", "pnpm test -- checkout"]
    summary = session_summary({"cwd": "/home/dev/shop"}, t)
    assert summary.startswith("Claude Code session on 2026-11-30 in shop. The user asked: My name is Maya")
    assert "Files changed: /home/dev/shop/src/checkout/payment.ts." in summary
    assert "Commands run: `pnpm test -- checkout`." in summary
    assert read_transcript(str(PAYLOADS / "missing.jsonl")).messages == []


async def test_a_session_wired_with_the_hooks_builds_a_useful_memory(
    engram_server: str, tmp_path: Path
) -> None:
    addr = engram_server
    transcript = str(recent_transcript(tmp_path))

    def event(name: str, **changes: Any) -> dict[str, Any]:
        return payload(name, transcript_path=transcript, **changes)

    # A first session on an empty store: nothing to start from, nothing to recall.
    assert await hook(addr, event("SessionStart")) == ("", "")
    assert await hook(addr, event("UserPromptSubmit")) == ("", "")
    # Tool calls are captured as they happen; reads are not worth a memory.
    assert await hook(addr, event("PostToolUseFailure")) == ("", "")
    assert await hook(addr, event("PostToolUse")) == ("", "")
    read = event("PostToolUse", tool_name="Read", tool_input={"file_path": "/home/dev/shop/package.json"})
    assert await hook(addr, read) == ("", "")
    # The end of the turn: the conversation's facts and the session summary.
    assert await hook(addr, event("Stop")) == ("", "")
    assert await hook(addr, event("SessionEnd")) == ("", "")  # again at the end: nothing new

    async with AsyncEngramClient(addr, timeout=60) as engram:
        page = await engram.list_memories(filter=MemoryFilter(tags_any=["source:hooks"]))
        stored = {m.content: m for m in page.memories}
        got = sorted(stored)
        assert all(PASSWORD not in c for c in got), got
        assert "User: My name is Maya and I maintain this shop" in stored
        assert stored["User: My name is Maya and I maintain this shop"].type.value == "identity"
        assert stored["User: We use pnpm, never npm, in this repo"].type.value == "directive"
        assert (
            stored["User: From now on, always run the checkout tests before you commit"].type.value
            == "directive"
        )
        assert (
            "User: The checkout tests fail since we moved the payments client from Stripe v11 to v14"
            in stored
        )
        assert (
            "Command `pnpm test -- checkout` failed: FAIL src/checkout/payment.test.ts > charges the card"
            in stored
        )
        assert "Ran `pnpm test -- checkout`: Tests 19 passed (19)" in stored
        assert not any("package.json" in c for c in got)
        [summary] = [m for m in page.memories if "session-summary" in m.tags]
        assert summary.version == 1  # SessionEnd found it unchanged
        assert "[REDACTED:assigned_secret]" in summary.content and "payment.ts" in summary.content
        for m in page.memories:
            assert {"source:hooks", "project:shop", "session:0b7c3e52-8f1d-4c1e-9a57-3f2d6c1b9e40"} <= set(
                m.tags
            )

    # The next session in the same project starts from them, and prompts recall what they need.
    out, err = await hook(addr, event("SessionStart", session_id="9f00aa11"))
    assert err == ""
    text = context(out, "SessionStart")
    assert "## Core" in text and "## Relevant to the task" in text, text
    core = text[text.index("## Core") : text.index("## Relevant to the task")]
    assert "My name is Maya" in core and "never npm" in core and "always run the checkout tests" in core
    assert "charges the card" in text[text.index("## Relevant to the task") :]
    out, _ = await hook(
        addr, event("UserPromptSubmit", prompt="Which package manager should I use to add zod?")
    )
    recalled = context(out, "UserPromptSubmit").splitlines()
    assert recalled[1] == "- (directive) User: We use pnpm, never npm, in this repo", recalled
    prompt = "Why did the payment tests fail after the Stripe upgrade?"
    out, _ = await hook(addr, event("UserPromptSubmit", prompt=prompt))
    recalled = context(out, "UserPromptSubmit").splitlines()
    assert "Stripe v11 to v14" in recalled[1], recalled


async def test_a_stop_hook_continuation_and_our_own_tools_are_not_captured(engram_server: str) -> None:
    assert await hook(engram_server, payload("Stop", stop_hook_active=True)) == ("", "")
    own = payload("PostToolUse", tool_name="mcp__engram__memory_add", tool_input={"content": "x"})
    assert await hook(engram_server, own) == ("", "")
    async with AsyncEngramClient(engram_server, timeout=60) as engram:
        assert (await engram.list_collections()) == []


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP port that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


@pytest.mark.parametrize("event", EVENTS)
def test_with_the_server_down_every_event_exits_0_with_one_warning_line(event: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = main(
        ["--timeout", "5"],
        stdin=io.StringIO(json.dumps(payload(event))),
        stdout=out,
        stderr=err,
        env={"ENGRAM_ADDR": f"127.0.0.1:{_closed_port()}"},
    )
    assert code == 0 and out.getvalue() == ""
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"engram-hooks: {event}: "), lines
    assert "skipped" in lines[0]


def test_a_server_that_never_answers_is_given_up_on(silent_server: str) -> None:
    err = io.StringIO()
    code = main(
        ["--timeout", "1"],
        stdin=io.StringIO(json.dumps(payload("UserPromptSubmit"))),
        stdout=io.StringIO(),
        stderr=err,
        env={"ENGRAM_ADDR": silent_server},
    )
    assert code == 0
    [line] = err.getvalue().splitlines()
    assert line.startswith("engram-hooks: UserPromptSubmit: ") and "skipped" in line


@pytest.mark.parametrize("raw", ["", "not json", "[1, 2]", '{"hook_event_name": "Notification"}'])
def test_bad_or_unknown_input_never_fails(raw: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = main(
        [], stdin=io.StringIO(raw), stdout=out, stderr=err, env={"ENGRAM_ADDR": f"127.0.0.1:{_closed_port()}"}
    )
    assert code == 0 and out.getvalue() == ""
    assert len(err.getvalue().splitlines()) <= 1


def docs_settings_block() -> dict[str, Any]:
    page = (REPO / "docs" / "clients" / "hooks.md").read_text()
    section = page[page.index("## Wiring it") : page.index("## A recorded session")]
    blocks = re.findall(r"```json\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, blocks
    config: dict[str, Any] = json.loads(blocks[0])
    return config


async def test_the_docs_settings_block_runs_the_hooks(engram_server: str, tmp_path: Path) -> None:
    """The settings.json block of docs/clients/hooks.md, as written: every event it wires runs its
    command (the checkout path and this test's server address filled in) through the real
    process, with the recorded payload on stdin."""
    config = docs_settings_block()
    transcript = recent_transcript(tmp_path)
    assert set(config) == {"env", "hooks"}
    assert config["env"]["ENGRAM_ADDR"] == "127.0.0.1:50051"
    assert set(config["hooks"]) == set(EVENTS)
    env = {**config["env"], "ENGRAM_ADDR": engram_server, "PATH": str(Path(sys.executable).parent)}
    collection = env["ENGRAM_HOOKS_COLLECTION"]
    for event in ("SessionStart", "PostToolUseFailure", "PostToolUse", "Stop", "SessionEnd", "SessionStart"):
        [group] = config["hooks"][event]
        assert group.get("matcher", "*") == "*" or event not in {"PostToolUse", "PostToolUseFailure"}
        [entry] = group["hooks"]
        assert entry["type"] == "command" and entry["timeout"] > 8  # above engram-hooks' own bound
        argv = shlex.split(entry["command"])
        assert argv[0] == CHECKOUT + "/.venv/bin/engram-hooks"
        argv[0] = str(REPO / argv[0].removeprefix(CHECKOUT + "/"))
        proc = await asyncio.to_thread(
            subprocess.run,
            argv,
            input=json.dumps(
                payload(event, session_id="docs-" + event.lower(), transcript_path=str(transcript))
            ),
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    async with AsyncEngramClient(engram_server, timeout=60) as engram:
        page = await engram.list_memories(collection=collection)
        assert any("failed" in m.content for m in page.memories)
        assert any("session-summary" in m.tags for m in page.memories)
    assert "My name is Maya" in context(proc.stdout, "SessionStart")
