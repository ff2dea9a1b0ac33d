"""Extraction: text, a conversation or a tool observation in; typed memories out, through the gate.

The path of one call: validate → privacy filter on every input text → dedup window (an input seen
in the same collection within the window is dropped) → extract → privacy filter on the proposals →
unless ``dry_run``, :meth:`MemoryService.add_many` (the write gate, item by item).

Two extractors:

- the LLM (any OpenAI-compatible endpoint, structured output with a JSON schema), used when one
  is configured and the call does not ask for rules;
- rules (:mod:`engram_server.domain.extraction_rules`): sentence patterns in English and Chinese
  for identity, preferences and standing instructions, decisions and changes, project facts, and
  a one-line summary of a tool observation. Free and instant, but lower quality: it keeps the
  speaker's sentence as said instead of rewriting it, and misses facts phrased unusually.

When the LLM is unavailable (transport error, timeout, rate limit after the client's retries) or
answers unusably, the rules take over for that call and the result says why: nothing is dropped.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from engram_server.domain.errors import LlmInvalidOutput, LlmUnavailable
from engram_server.domain.extraction_rules import (
    EXTRACTED_TAG,
    Message,
    Observation,
    Proposal,
    observation_text,
    rule_extract_messages,
    rule_extract_observation,
)
from engram_server.domain.model import MemoryType, Source, SourceType
from engram_server.domain.service import AddCommand, AddResult, MemoryService
from engram_server.domain.validation import Violations, check_collection, normalise_tags
from engram_server.ports import Llm

#: Longest input one call takes, in characters over all its texts.
MAX_INPUT_CHARS = 100_000
MAX_MESSAGES = 500


class ExtractMode(StrEnum):
    #: The LLM when one is configured, else the rules.
    AUTO = "auto"
    #: The rules, even with an LLM configured.
    RULES = "rules"


class Extractor(StrEnum):
    LLM = "llm"
    RULES = "rules"
    #: Nothing was extracted because the input repeats one inside the dedup window.
    NONE = "none"


@dataclass(frozen=True, slots=True)
class ExtractionPolicy:
    use_llm: bool = True
    dedup_window_seconds: float = 600.0
    max_memories: int = 20
    #: Inputs remembered per collection for the dedup window.
    window_entries: int = 4096


@dataclass(frozen=True, slots=True)
class ExtractCommand:
    collection: str = ""
    text: str = ""
    messages: tuple[Message, ...] = ()
    observation: Observation | None = None
    mode: ExtractMode = ExtractMode.AUTO
    dry_run: bool = False
    #: Added to every extracted memory's tags.
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ExtractReport:
    proposals: tuple[Proposal, ...]
    #: One per proposal, in order; empty for a dry run or a deduplicated input.
    results: tuple[AddResult, ...] = ()
    extractor: Extractor = Extractor.RULES
    #: Why the rules ran although an LLM is configured (its error), else empty.
    fallback_reason: str = ""
    deduplicated: bool = False
    #: What the privacy filter removed from the input (kinds, one per finding).
    redactions: tuple[str, ...] = ()
    model: str = ""
    dry_run: bool = False


@dataclass
class _Window:
    seen: OrderedDict[str, float] = field(default_factory=OrderedDict)


SYSTEM_PROMPT = """\
You are the extraction step of a long-term memory system for an AI agent. You receive a \
conversation, a text or a tool observation. Extract the facts a careful person would keep for \
later: who the user is (name, job, home, family, pets), stable preferences and standing \
instructions, decisions and changes (what moved from what to what, with dates), plans and \
deadlines, and durable facts about the user's projects (stack, versions, ports, hosts, commands \
that fail or work). Skip greetings, small talk, questions, the assistant's own suggestions that \
were not accepted, and anything that will not matter tomorrow.

For each memory give:
- content: one self-contained sentence in the language of the input, naming the subject ("The \
user …", "用户…", "The project …") and keeping every specific (names, numbers, dates, versions);
- type: "identity" (who the user is), "directive" (preferences and standing instructions), \
"event" (something that happened or is planned, with its date) or "insight" (a durable fact or \
lesson about a project);
- importance: an integer from 1 (trivial) to 10 (critical);
- tags: 1 to 3 short lowercase topic tags;
- message_index: the [n] number of the message it comes from (0 for a text or an observation).

Return at most {max_memories} memories; an empty list when nothing is worth keeping. Answer with a \
JSON object only."""

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["memories"],
    "properties": {
        "memories": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["content", "type", "importance", "tags", "message_index"],
                "properties": {
                    "content": {"type": "string"},
                    "type": {"type": "string", "enum": ["identity", "directive", "event", "insight"]},
                    "importance": {"type": "integer"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "message_index": {"type": "integer"},
                },
            },
        }
    },
}


class MemoryExtractor:
    """Runs extraction for a :class:`MemoryService`."""

    def __init__(
        self, memory: MemoryService, llm: Llm | None, policy: ExtractionPolicy | None = None
    ) -> None:
        self._memory = memory
        self._llm = llm
        self.policy = policy or ExtractionPolicy()
        self._windows: dict[str, _Window] = {}

    @property
    def llm(self) -> Llm | None:
        return self._llm if self.policy.use_llm else None

    async def extract(self, cmd: ExtractCommand) -> ExtractReport:
        mem = self._memory
        v = Violations()
        collection = cmd.collection or mem.policy.default_collection
        check_collection(v, "collection", collection)
        given = [
            n
            for n, ok in (
                ("text", bool(cmd.text.strip())),
                ("conversation", bool(cmd.messages)),
                ("observation", cmd.observation is not None),
            )
            if ok
        ]
        if not given:
            v.add("input", "give one of text, conversation or observation")
        elif len(given) > 1:
            v.add("input", f"give only one of text, conversation or observation (got {', '.join(given)})")
        if len(cmd.messages) > MAX_MESSAGES:
            v.add("conversation.messages", f"at most {MAX_MESSAGES} messages (got {len(cmd.messages)})")
        for i, m in enumerate(cmd.messages):
            if not m.content.strip():
                v.add(f"conversation.messages[{i}].content", "must not be empty")
            if m.created_at is not None and m.created_at > mem.now() + mem.policy.limits.future_skew_seconds:
                v.add(f"conversation.messages[{i}].created_at", "must not be in the future")
        if cmd.observation is not None and not cmd.observation.tool_name.strip():
            v.add("observation.tool_name", "must not be empty")
        total = len(cmd.text) + sum(len(m.content) for m in cmd.messages)
        if cmd.observation is not None:
            o = cmd.observation
            total += len(o.input) + len(o.output) + len(o.error)
        if total > MAX_INPUT_CHARS:
            v.add("input", f"at most {MAX_INPUT_CHARS} characters in all (got {total})")
        extra_tags = normalise_tags(v, "tags", cmd.tags, mem.policy.limits)
        v.raise_if_any()

        text, messages, observation, redactions = self._filtered(cmd)
        key = _input_key(collection, text, messages, observation)
        now = mem.now()
        if not cmd.dry_run and self._recent(collection, key, now):
            return ExtractReport((), extractor=Extractor.NONE, deduplicated=True, redactions=redactions)

        proposals, extractor, reason, model = await self._propose(cmd.mode, text, messages, observation)
        # What the extractor wrote is filtered again (an LLM may rephrase a secret it was never shown).
        proposals = [p.with_content(mem.policy.privacy.redact(p.content).text, extra_tags) for p in proposals]
        proposals = [p for p in proposals if p.content.strip()][: self._max_memories()]
        if cmd.dry_run or not proposals:
            if not cmd.dry_run:
                self._remember(collection, key, now)
            return ExtractReport(
                tuple(proposals), (), extractor, reason, False, redactions, model, cmd.dry_run
            )
        source, source_type, origin = _provenance(text, messages, observation)
        adds = [
            AddCommand(
                content=p.content,
                type=p.type,
                importance=p.importance,
                tags=p.tags,
                source=source,
                source_type=source_type,
                metadata={"extractor": extractor.value, "extracted_from": origin}
                | ({"tool": observation.tool_name[:128]} if observation is not None else {}),
                created_at=p.created_at if p.created_at is not None and p.created_at <= now else None,
            )
            for p in proposals
        ]
        results = await mem.add_many(collection, adds)
        self._remember(collection, key, now)
        return ExtractReport(tuple(proposals), tuple(results), extractor, reason, False, redactions, model)

    # ------------------------------------------------------------ steps

    def _filtered(
        self, cmd: ExtractCommand
    ) -> tuple[str, tuple[Message, ...], Observation | None, tuple[str, ...]]:
        privacy = self._memory.policy.privacy
        kinds: list[str] = []
        text = privacy.redact(cmd.text)
        kinds.extend(text.kinds)
        messages: list[Message] = []
        for m in cmd.messages:
            r = privacy.redact(m.content)
            kinds.extend(r.kinds)
            if r.text.strip():
                messages.append(Message(m.role, r.text, m.created_at))
        observation = None
        if cmd.observation is not None:
            o = cmd.observation
            parts, found = privacy.redact_all([o.input, o.output, o.error])
            kinds.extend(found)
            observation = Observation(o.tool_name, parts[0], parts[1], parts[2])
        return text.text, tuple(messages), observation, tuple(kinds)

    def _max_memories(self) -> int:
        return max(1, min(self.policy.max_memories, self._memory.policy.limits.max_batch_items))

    async def _propose(
        self,
        mode: ExtractMode,
        text: str,
        messages: tuple[Message, ...],
        observation: Observation | None,
    ) -> tuple[list[Proposal], Extractor, str, str]:
        llm = self.llm
        reason = ""
        if llm is not None and mode is ExtractMode.AUTO:
            try:
                return await self._llm_propose(llm, text, messages, observation), Extractor.LLM, "", llm.model
            except (LlmUnavailable, LlmInvalidOutput) as exc:
                reason = f"{type(exc).__name__}: {exc}"
        if observation is not None:
            return rule_extract_observation(observation), Extractor.RULES, reason, ""
        if messages:
            return rule_extract_messages(messages), Extractor.RULES, reason, ""
        return rule_extract_messages((Message("user", text, None),)), Extractor.RULES, reason, ""

    async def _llm_propose(
        self, llm: Llm, text: str, messages: tuple[Message, ...], observation: Observation | None
    ) -> list[Proposal]:
        if observation is not None:
            user = "Tool observation:\n" + observation_text(observation)
        elif messages:
            lines = []
            for i, m in enumerate(messages, start=1):
                when = f" ({_iso(m.created_at)})" if m.created_at is not None else ""
                lines.append(f"[{i}] {m.role}{when}: {m.content}")
            user = "Conversation:\n" + "\n".join(lines)
        else:
            user = "Text:\n" + text
        result = await llm.complete_json(
            system=SYSTEM_PROMPT.format(max_memories=self._max_memories()),
            user=user,
            schema=SCHEMA,
            schema_name="extracted_memories",
        )
        return self._validate(result.data, messages)

    def _validate(self, data: dict[str, Any], messages: tuple[Message, ...]) -> list[Proposal]:
        """The answer must hold a ``memories`` list; items that are unusable are skipped one by one
        (a bad type or importance falls back to event / 5), never the whole answer."""
        items = data.get("memories")
        if not isinstance(items, list):
            raise LlmInvalidOutput("LLM answer has no 'memories' list")
        limits = self._memory.policy.limits
        out: list[Proposal] = []
        for item in items:
            if not isinstance(item, dict):
                continue
            content = item.get("content")
            if not isinstance(content, str) or not content.strip() or len(content) > limits.max_content_chars:
                continue
            try:
                mtype = MemoryType(str(item.get("type", "event")).lower())
            except ValueError:
                mtype = MemoryType.EVENT
            importance = item.get("importance")
            if (
                isinstance(importance, bool)
                or not isinstance(importance, int | float)
                or not math.isfinite(importance)
            ):
                importance = 5
            raw_tags = item.get("tags") if isinstance(item.get("tags"), list) else []
            tags = tuple(
                dict.fromkeys(
                    t.strip().lower()
                    for t in raw_tags or []
                    if isinstance(t, str) and t.strip() and len(t.strip()) <= limits.max_tag_chars
                )
            )[:4]
            idx = item.get("message_index")
            created = None
            if isinstance(idx, int) and not isinstance(idx, bool) and 1 <= idx <= len(messages):
                created = messages[idx - 1].created_at
            out.append(
                Proposal(content.strip(), mtype, int(min(10, max(1, round(importance)))), tags, created)
            )
        return out

    # ------------------------------------------------------------ dedup window

    def _recent(self, collection: str, key: str, now: float) -> bool:
        window = self.policy.dedup_window_seconds
        if window <= 0:
            return False
        seen = self._windows.setdefault(collection, _Window()).seen
        at = seen.get(key)
        return at is not None and now - at < window

    def _remember(self, collection: str, key: str, now: float) -> None:
        if self.policy.dedup_window_seconds <= 0:
            return
        seen = self._windows.setdefault(collection, _Window()).seen
        seen[key] = now
        seen.move_to_end(key)
        while len(seen) > self.policy.window_entries:
            seen.popitem(last=False)

    def forget_collection(self, collection: str) -> None:
        self._windows.pop(collection, None)


def _input_key(
    collection: str, text: str, messages: Sequence[Message], observation: Observation | None
) -> str:
    def norm(s: str) -> str:
        return " ".join(s.casefold().split())

    body = json.dumps(
        [
            collection,
            norm(text),
            [[m.role, norm(m.content)] for m in messages],
            None
            if observation is None
            else [
                observation.tool_name,
                norm(observation.input),
                norm(observation.output),
                norm(observation.error),
            ],
        ],
        ensure_ascii=False,
    )
    return hashlib.sha256(body.encode()).hexdigest()


def _provenance(
    text: str, messages: Sequence[Message], observation: Observation | None
) -> tuple[Source, SourceType, str]:
    if observation is not None:
        return Source.AGENT, SourceType.TOOL_OUTPUT, "observation"
    if messages:
        return Source.USER, SourceType.USER_INPUT, "conversation"
    return Source.AGENT, SourceType.UNKNOWN, "text"


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


__all__ = [
    "EXTRACTED_TAG",
    "SCHEMA",
    "SYSTEM_PROMPT",
    "ExtractCommand",
    "ExtractMode",
    "ExtractReport",
    "ExtractionPolicy",
    "Extractor",
    "MemoryExtractor",
    "Message",
    "Observation",
    "Proposal",
]
