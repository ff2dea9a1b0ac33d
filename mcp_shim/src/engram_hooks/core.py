"""The hook handler: one Claude Code event in (JSON on stdin), at most one JSON answer out.

Payload fields read (Claude Code's hook input; unknown fields are ignored):

- every event: ``hook_event_name``, ``session_id``, ``transcript_path``, ``cwd``;
- ``SessionStart``: ``source`` (startup, resume, clear, compact);
- ``UserPromptSubmit``: ``prompt``;
- ``PostToolUse``: ``tool_name``, ``tool_input``, ``tool_response``;
- ``PostToolUseFailure``: ``tool_name``, ``tool_input``, ``error``, ``is_interrupt``;
- ``Stop``: ``stop_hook_active``; ``PreCompact``: ``trigger``; ``SessionEnd``: ``reason``.

Answers: ``SessionStart`` and ``UserPromptSubmit`` print
``{"hookSpecificOutput": {"hookEventName": ..., "additionalContext": "..."}}`` (Claude Code adds
the context to the conversation); the other events print nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from engram_client import (
    CollectionNotFoundError,
    ConversationMessage,
    EngramClient,
    EngramError,
    MemoryFilter,
    SearchResult,
    ToolObservation,
)

#: The most stdin is read (a tool response can be large; the rest is not needed).
MAX_STDIN = 4 * 1024 * 1024
#: Transcript messages given to one extraction: the most recent ones (Stop runs after every turn,
#: so earlier turns were sent before; the write gate answers repeats as duplicates).
MAX_MESSAGES = 40
MAX_MESSAGE_CHARS = 4000
SUMMARY_TAG = "session-summary"
#: The session and agent ids the server accepts (engram_server.domain.validation.SESSION_ID_RE).
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,127}")
HOOK_TAG = "source:hooks"
#: Our own MCP tools: capturing their calls would store memories about storing memories.
OWN_TOOLS = re.compile(r"^mcp__engram", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class HookSettings:
    """From the environment (``ENGRAM_HOOKS_*``) and the command line."""

    #: Where memories go and what is recalled (None: the server's default collection for writes,
    #: every readable collection for recall).
    collection: str | None = None
    #: Seconds one event may take in all; past it the hook gives up (exit 0).
    timeout: float = 8.0
    recall_limit: int = 5
    #: Recalled memories below this calibrated relevance are not shown.
    min_relevance: float = 0.5
    #: SessionStart's context pack budget, in tokens (the server's tokenizer).
    context_budget: int = 2000
    #: The agent id the hooks write under and GetContext reads "the last session" of.
    agent_id: str = "claude-code"
    env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> HookSettings:
        env = os.environ if env is None else env
        values: dict[str, Any] = {"env": dict(env)}
        if raw := env.get("ENGRAM_HOOKS_COLLECTION", "").strip():
            values["collection"] = raw
        if raw := env.get("ENGRAM_HOOKS_TIMEOUT", "").strip():
            values["timeout"] = float(raw)
        if raw := env.get("ENGRAM_HOOKS_RECALL_LIMIT", "").strip():
            values["recall_limit"] = int(raw)
        if raw := env.get("ENGRAM_HOOKS_MIN_RELEVANCE", "").strip():
            values["min_relevance"] = float(raw)
        if raw := env.get("ENGRAM_HOOKS_CONTEXT_BUDGET", "").strip():
            values["context_budget"] = int(raw)
        if raw := env.get("ENGRAM_HOOKS_AGENT_ID", "").strip():
            values["agent_id"] = raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


# ---------------------------------------------------------------- payload helpers


def _text(value: Any, limit: int = 20_000) -> str:
    """A tool input or response as text (JSON for structures)."""
    if value is None:
        return ""
    if isinstance(value, str):
        out = value
    else:
        try:
            out = json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            out = str(value)
    return out[:limit]


def _response_text(value: Any) -> str:
    """A tool response as the text it showed: Bash's ``stdout`` and ``stderr``, a ``content`` or
    ``output`` string, else the whole response as JSON."""
    if isinstance(value, dict):
        if "stdout" in value or "stderr" in value:
            return _text("\n".join(str(value.get(k) or "") for k in ("stdout", "stderr")).strip())
        for key in ("content", "output", "result"):
            if isinstance(value.get(key), str):
                return _text(value[key])
    return _text(value)


def _project(payload: Mapping[str, Any]) -> str:
    cwd = str(payload.get("cwd") or "")
    name = Path(cwd).name.lower() if cwd else ""
    return re.sub(r"[^a-z0-9_.\-]+", "-", name).strip("-")[:48]


def _session_id(payload: Mapping[str, Any]) -> str | None:
    """Claude Code's session id when it is one Engram accepts (a UUID is)."""
    sid = str(payload.get("session_id") or "")[:128]
    return sid if SESSION_ID.fullmatch(sid) else None


def _tags(payload: Mapping[str, Any]) -> list[str]:
    tags = [HOOK_TAG]
    if project := _project(payload):
        tags.append(f"project:{project}")
    sid = str(payload.get("session_id") or "")
    if sid:
        tags.append(f"session:{sid[:56]}")
    return tags


def _content_text(content: Any) -> str:
    """A transcript message's text: a string, or the ``text`` blocks of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type") == "text" and b.get("text")
        )
    return ""


@dataclass
class Transcript:
    messages: list[ConversationMessage] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)


def read_transcript(path: str) -> Transcript:
    """The conversation of a Claude Code transcript (JSON lines): the user's prompts and the
    assistant's text, oldest first, plus the files it edited and the commands it ran. Tool results
    (user lines whose content is a list of ``tool_result`` blocks), thinking and meta lines are
    skipped; unreadable lines too."""
    out = Transcript()
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict) or entry.get("isMeta") or entry.get("isSidechain"):
            continue
        kind = entry.get("type")
        message = entry.get("message")
        if kind not in {"user", "assistant"} or not isinstance(message, dict):
            continue
        content = message.get("content")
        when = _when(entry.get("timestamp"))
        if kind == "assistant" and isinstance(content, list):
            for block in content:
                if not isinstance(block, dict) or block.get("type") != "tool_use":
                    continue
                raw_input = block.get("input")
                tool_input: dict[str, Any] = raw_input if isinstance(raw_input, dict) else {}
                name = str(block.get("name", ""))
                if name in {"Edit", "MultiEdit", "Write", "NotebookEdit"} and tool_input.get("file_path"):
                    out.files.append(str(tool_input["file_path"]))
                elif name == "Bash" and tool_input.get("command"):
                    out.commands.append(str(tool_input["command"]))
        text = _content_text(content).strip()
        if not text or text.startswith("<command-") or text.startswith("<local-command"):
            continue
        role = "user" if kind == "user" else "assistant"
        if role == "user":
            out.prompts.append(text)
        out.messages.append(ConversationMessage(role, text[:MAX_MESSAGE_CHARS], when))
    return out


def _when(raw: Any) -> datetime | None:
    if not isinstance(raw, str):
        return None
    try:
        when = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def session_summary(payload: Mapping[str, Any], transcript: Transcript) -> str:
    """One paragraph: what the user asked for, the files changed, the commands run."""
    project = _project(payload) or "an unnamed project"
    day = (transcript.messages[0].created_at if transcript.messages else None) or datetime.now(UTC)
    parts = [f"Claude Code session on {day:%Y-%m-%d} in {project}."]
    if transcript.prompts:
        asks = "; ".join(_short(p, 160).rstrip(" .;") for p in transcript.prompts[:6])
        more = f" (+{len(transcript.prompts) - 6} more)" if len(transcript.prompts) > 6 else ""
        parts.append(f"The user asked: {asks}{more}.")
    files = list(dict.fromkeys(transcript.files))
    if files:
        parts.append("Files changed: " + ", ".join(files[:12]) + ("…" if len(files) > 12 else "") + ".")
    commands = list(dict.fromkeys(transcript.commands))
    if commands:
        parts.append("Commands run: " + "; ".join(f"`{_short(c, 80)}`" for c in commands[:8]) + ".")
    return _short(" ".join(parts), 2000)


# ---------------------------------------------------------------- events


def _context(event: str, text: str) -> str:
    return json.dumps({"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}})


def _bullets(results: Sequence[SearchResult]) -> list[str]:
    return [f"- ({r.memory.type.value}) {r.memory.content}" for r in results]


def _search(client: EngramClient, settings: HookSettings, query: str, **kw: Any) -> list[SearchResult]:
    try:
        return list(client.search(query, collections=settings.collection, **kw))
    except CollectionNotFoundError:
        return []  # nothing stored yet


def session_start(client: EngramClient, settings: HookSettings, payload: Mapping[str, Any]) -> str | None:
    """The context pack (GetContext) within ``settings.context_budget`` tokens: slots, identity and
    directive memories, trigger names, open items, what changed since this agent's last session,
    and what is relevant to this project's recent work."""
    project = _project(payload)
    try:
        pack = client.get_context(
            f"recent work, decisions and problems in the {project} project" if project else None,
            collections=settings.collection,
            token_budget=settings.context_budget,
            session_id=_session_id(payload),
            agent_id=settings.agent_id,
        )
    except CollectionNotFoundError:  # nothing written there yet
        return None
    if not any(section.items for section in pack.sections):
        return None
    return _context("SessionStart", "# From Engram (long-term memory)\n\n" + pack.markdown.strip())


def user_prompt(client: EngramClient, settings: HookSettings, payload: Mapping[str, Any]) -> str | None:
    prompt = str(payload.get("prompt") or "").strip()
    if len(prompt.split()) < 3 and len(prompt) < 6:
        return None
    hits = _search(
        client,
        settings,
        prompt[:2000],
        limit=settings.recall_limit,
        min_relevance=settings.min_relevance,
        reading="query",  # a prompt asks for something; it is no memory to store
    )
    if not hits:
        return None
    return _context("UserPromptSubmit", "\n".join(["Relevant memories (Engram):", *_bullets(hits)]))


def tool_use(client: EngramClient, settings: HookSettings, payload: Mapping[str, Any]) -> None:
    name = str(payload.get("tool_name") or "")
    if not name or OWN_TOOLS.match(name) or payload.get("is_interrupt"):
        return
    failed = payload.get("hook_event_name") == "PostToolUseFailure"
    observation = ToolObservation(
        tool_name=name,
        input=_text(payload.get("tool_input")),
        output="" if failed else _response_text(payload.get("tool_response")),
        error=_text(payload.get("error")) or ("failed" if failed else ""),
    )
    client.extract(observation=observation, collection=settings.collection, tags=_tags(payload))


def conversation(client: EngramClient, settings: HookSettings, payload: Mapping[str, Any]) -> None:
    """Stop, PreCompact, SessionEnd: the facts of the conversation, and the session summary
    (one memory per session, updated as the session goes on)."""
    path = str(payload.get("transcript_path") or "")
    transcript = read_transcript(path) if path else Transcript()
    tags = _tags(payload)
    if transcript.messages:
        client.extract(
            messages=transcript.messages[-MAX_MESSAGES:], collection=settings.collection, tags=tags
        )
    if not transcript.prompts:
        return
    summary = session_summary(payload, transcript)
    sid = str(payload.get("session_id") or "")
    existing = None
    if sid:
        try:
            page = client.list_memories(
                collection=settings.collection,
                filter=MemoryFilter(tags_any=[f"session:{sid[:56]}"], types=["event"]),
                page_size=100,
            )
            existing = next((m for m in page.memories if SUMMARY_TAG in m.tags), None)
        except CollectionNotFoundError:
            existing = None
    if existing is not None:
        if existing.content != summary:
            client.update(existing.id, content=summary, collection=settings.collection)
        return
    client.add(
        summary,
        type="event",
        importance=4,
        tags=[*tags, SUMMARY_TAG],
        source="system",
        source_type="tool_output",
        collection=settings.collection,
        allow_duplicate=True,
        session_id=_session_id(payload),
        agent_id=settings.agent_id,
    )


def handle(payload: Mapping[str, Any], client: EngramClient, settings: HookSettings) -> str | None:
    """Run one event; returns what to print on stdout (None: nothing)."""
    event = str(payload.get("hook_event_name") or "")
    if event == "SessionStart":
        return session_start(client, settings, payload)
    if event == "UserPromptSubmit":
        return user_prompt(client, settings, payload)
    if event in {"PostToolUse", "PostToolUseFailure"}:
        tool_use(client, settings, payload)
    elif event in {"Stop", "SubagentStop", "PreCompact", "SessionEnd"}:
        if event in {"Stop", "SubagentStop"} and payload.get("stop_hook_active"):
            return None  # Claude Code is continuing because of a stop hook: the turn is not over
        conversation(client, settings, payload)
    return None


# ---------------------------------------------------------------- the command


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="engram-hooks",
        description="Claude Code hook: reads the event's JSON on stdin and recalls or captures "
        "memories in Engram. Never blocks the agent: on any failure it warns on stderr and exits 0.",
        epilog="environment: ENGRAM_ADDR, ENGRAM_API_KEY, ENGRAM_TLS* (the connection, as for "
        "engram-client); ENGRAM_HOOKS_COLLECTION, ENGRAM_HOOKS_TIMEOUT (default 8 s), "
        "ENGRAM_HOOKS_RECALL_LIMIT (5), ENGRAM_HOOKS_MIN_RELEVANCE (0.5).",
    )
    parser.add_argument("--collection", help="collection to write to and recall from")
    parser.add_argument("--timeout", type=float, help="seconds one event may take in all")
    return parser.parse_args(argv)


def main(
    argv: Sequence[str] | None = None,
    *,
    stdin: IO[str] | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Always 0: a hook must never break the agent. Problems are one line on stderr."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    try:
        args = _parse(argv)
        settings = HookSettings.from_env(env, collection=args.collection, timeout=args.timeout)
        raw = stdin.read(MAX_STDIN)
        payload = json.loads(raw) if raw.strip() else {}
        if not isinstance(payload, dict):
            raise ValueError("the hook input is not a JSON object")
    except (ValueError, OSError) as exc:
        print(f"engram-hooks: ignored: {exc}", file=stderr)
        return 0
    except SystemExit:  # --help, or bad options
        return 0
    answer: list[str | None] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            with EngramClient(timeout=settings.timeout, env=settings.env) as client:
                answer.append(handle(payload, client, settings))
        except BaseException as exc:
            failure.append(exc)

    worker = threading.Thread(target=run, name="engram-hooks", daemon=True)
    worker.start()
    worker.join(settings.timeout)
    event = payload.get("hook_event_name") or "event"
    if worker.is_alive():
        print(
            f"engram-hooks: {event}: no answer from Engram within {settings.timeout:g} s; skipped",
            file=stderr,
        )
        return 0
    if failure:
        error = failure[0]
        what = str(error) if isinstance(error, EngramError) else f"{type(error).__name__}: {error}"
        print(
            f"engram-hooks: {event}: Engram unavailable or refused ({_short(what, 200)}); skipped",
            file=stderr,
        )
        return 0
    if answer and answer[0]:
        print(answer[0], file=stdout)
    return 0


def cli() -> None:
    """The ``engram-hooks`` console script: :func:`main`, then exit at once (a hung call in the
    abandoned worker thread must not hold the process)."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
