"""The MCP tools: each one is a single call through engram-client's AsyncEngramClient.

The tool descriptions carry the write discipline of the original Go Engram: search before writing;
a best relevance above 0.82 means update instead of add; type and importance are chosen with care
because they decide how a memory decays and when it expires.

Tracing: the mcp SDK wraps every tool call in a SERVER span ``tools/call <tool>`` (attribute
``gen_ai.tool.name``) parented on the request's ``_meta.traceparent``, or a new trace without one.
The tool's engram-client call runs inside that span and sends its context on to the Engram server,
so one tool call is one trace. Nothing here needs to add spans of its own.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from engram_client import (
    AddResult,
    AsyncEngramClient,
    CollectionNotFoundError,
    ContextPack,
    ConversationMessage,
    DeadlineExceededError,
    DeleteResult,
    EngramError,
    ExtractionResult,
    InvalidArgumentError,
    LlmInvalidOutputError,
    LlmNotConfiguredError,
    LlmUnavailableError,
    Memory,
    MemoryFilter,
    MemoryNotFoundError,
    NoMatchError,
    PermissionDeniedError,
    ProtectedMemoryError,
    ReflectionResult,
    SearchResult,
    SearchResults,
    SimilarMemory,
    SlotUpdate,
    ThresholdTooLowError,
    Topic,
    TopicNotFoundError,
    Triggers,
    UnauthenticatedError,
    UnavailableError,
    UnimplementedError,
    UpdateResult,
)
from engram_mcp.settings import ShimSettings

__all__ = ["INSTRUCTIONS", "READ_TOOLS", "WRITE_TOOLS", "EngramMcp"]

READ_TOOLS = ("memory_context", "memory_search", "memory_topic", "memory_triggers", "memory_trash")
WRITE_TOOLS = (
    "memory_add",
    "memory_update",
    "memory_delete",
    "memory_restore",
    "reflection_run",
    "memory_extract",
    "memory_slot_update",
    "memory_consolidate",
)
REFLECTION_UNAVAILABLE = "reflection is not available on this server"

INSTRUCTIONS = """\
Engram is your long-term memory.
0. Call memory_context FIRST, at the start of every session and again whenever your context was
   compacted or summarised: it returns your core identity and rules, slots, open items, trigger
   names, what changed since your last session and (with `task`) the memories relevant to it, as
   Markdown within a token budget. Before a risky or irreversible action (deploy, git push, a
   migration, deleting data), call memory_triggers with the action's name and follow the lessons
   it returns. Keep every memory you add clean: it competes with the others.
1. Before memory_add, call memory_search with the text you intend to store, written as the full
   sentence you will store (limit 3), and look at the best result's `relevance` (calibrated
   similarity, 0-1; for a sentence it is the write gate's own similarity):
   > 0.82 -> memory_update that memory instead of adding;
   0.70-0.82 -> add only if it says something genuinely different, otherwise update;
   < 0.70 -> memory_add.
2. Choose `type` by how long it should live: identity (who the user/agent is; permanent),
   directive (standing instruction or preference; permanent), insight (distilled, reusable
   conclusion; fades over months), event (something that happened; fades over days).
3. Set `importance` accurately, not high: 1-3 trivia, 4-6 normal, 7-8 important, 9-10 critical
   constraints. Importance also decides when a memory expires.
4. Tag a lesson to recall before an action with `trigger:<action>` (e.g. trigger:deploy,
   trigger:git-push) and an unfinished task with `pending`.
Memories are stored in English for the most reliable retrieval."""

MemoryTypeName = Literal["identity", "directive", "insight", "event"]

_TYPE_HELP = (
    "How long the memory should live. identity: who the user or agent is (never decays or expires; "
    "protected from deletion). directive: a standing instruction or preference (never decays; "
    "protected). insight: a distilled, reusable conclusion (half-life ~144 days). event: something "
    "that happened (half-life ~3 days; expires in 3-30 days by importance)."
)
_IMPORTANCE_HELP = (
    "1-10; be accurate, not generous: 1-3 trivia, 4-6 normal facts, 7-8 important, 9-10 critical "
    "hard constraints. Ranking and expiry depend on it; marking everything 9 makes it meaningless."
)


def _memory(m: Memory) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": m.id,
        "collection": m.collection,
        "type": m.type.value,
        "content": m.content,
        "importance": m.importance,
        "tags": list(m.tags),
        "created_at": m.created_at.isoformat(),
        "version": m.version,
    }
    if m.valid_until is not None:
        out["valid_until"] = m.valid_until.isoformat()
    if m.metadata:
        out["metadata"] = dict(m.metadata)
    if m.derived_from:
        out["derived_from"] = list(m.derived_from)
    if m.draft:
        out["draft"] = True
    if m.trashed_at is not None:
        out["trashed_at"] = m.trashed_at.isoformat()
    if m.purge_at is not None:
        out["purge_at"] = m.purge_at.isoformat()
    return out


def _search_hit(r: SearchResult) -> dict[str, Any]:
    return {
        **_memory(r.memory),
        "score": round(r.score.final, 4),
        "relevance": round(r.score.relevance, 4),
        "recency": round(r.score.recency, 4),
    }


def _add(r: AddResult) -> dict[str, Any]:
    out: dict[str, Any] = {"outcome": r.outcome.value, "memory": _memory(r.memory)}
    if r.duplicate_similarity is not None:
        out["duplicate_similarity"] = round(r.duplicate_similarity, 4)
        out["note"] = "A near-copy already exists; nothing was written. Update it if something changed."
    if r.near_duplicates:
        out["near_duplicates"] = [_similar(s) for s in r.near_duplicates]
        if r.created:
            out["note"] = (
                "Similar memories exist. If the new one restates one of them, memory_delete the new one "
                "and memory_update the old one instead."
            )
    if r.gate_reason:
        out["gate_reason"] = r.gate_reason
        if r.gate_reason == "conflicting_specifics":
            out["note"] = (
                "Written: it differs from a very similar memory in a specific (number, date, id, name, "
                "negation, an opposite word or swapped roles; see near_duplicates[].conflicts). If the "
                "new fact replaces the old one, "
                "memory_delete the new one and memory_update the old one instead."
            )
    if r.conflicts:
        out["conflicts"] = [
            {
                "id": c.memory_id,
                "content": c.content,
                "basis": c.basis,
                "superseded": c.superseded,
                "explanation": c.explanation,
            }
            for c in r.conflicts
        ]
        if any(c.superseded for c in r.conflicts):
            out["note"] = (
                "Written, and it replaces the memories in 'conflicts' with superseded=true (same subject, "
                "new value): they are kept in history and no longer searched. Nothing else to do."
            )
    return out


def _similar(s: SimilarMemory) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": s.id,
        "similarity": round(s.similarity, 4),
        "content": s.content,
        "type": s.type.value,
    }
    if s.reason:
        out["reason"] = s.reason
    if s.conflicts:
        out["conflicts"] = [
            {"kind": c.kind, "existing": list(c.existing_values), "new": list(c.new_values)}
            for c in s.conflicts
        ]
    return out


def _update(r: UpdateResult) -> dict[str, Any]:
    out: dict[str, Any] = {"changed": r.changed, "dry_run": r.dry_run, "memory": _memory(r.memory)}
    if r.previous is not None:
        out["previous"] = _memory(r.previous)
    if r.similarity is not None:
        out["similarity"] = round(r.similarity, 4)
    return out


def _delete(r: DeleteResult) -> dict[str, Any]:
    out = {"dry_run": r.dry_run, "deleted": [_memory(m) for m in r.deleted], "count": len(r.deleted)}
    if r.purge_at is not None:
        out["restorable_until"] = r.purge_at.isoformat()
    return out


def _reflection(r: ReflectionResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "outcome": r.outcome.value,
        "detail": r.detail,
        "unreflected_count": r.unreflected_count,
        "unreflected_importance": r.unreflected_importance,
        "sources": [{"id": m.id, "content": m.content} for m in r.sources],
        "insights": [_memory(m) for m in r.insights],
    }
    if r.throttled_by is not None:
        out["throttled_by"] = r.throttled_by.value
    if r.next_run_after is not None:
        out["next_run_after"] = r.next_run_after.isoformat()
    if r.drafts:
        out["drafts"] = [_memory(m) for m in r.drafts]
    if r.duplicates:
        out["duplicates"] = [{"id": d.id, "similarity": round(d.similarity, 4)} for d in r.duplicates]
    if r.reflection_collection:
        out["reflection_collection"] = r.reflection_collection
    return out


def _extraction(r: ExtractionResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "extractor": r.extractor,
        "dry_run": r.dry_run,
        "memories": [
            {
                "content": x.content,
                "type": x.type.value,
                "importance": x.importance,
                "tags": list(x.tags),
                **({"outcome": x.result.outcome.value, "id": x.result.memory.id} if x.result else {}),
            }
            for x in r.memories
        ],
    }
    if r.fallback_reason:
        out["fallback_reason"] = r.fallback_reason
    if r.deduplicated:
        out["note"] = "The same input was extracted moments ago; nothing was done."
    if r.redactions:
        out["redactions"] = list(r.redactions)
    return out


def _context(p: ContextPack) -> dict[str, Any]:
    out: dict[str, Any] = {
        "markdown": p.markdown,
        "tokens_used": p.tokens_used,
        "token_budget": p.token_budget,
        "tokenizer": p.tokenizer,
        "since_source": p.since_source,
        "memory_ids": {
            s.kind: [i.memory.id for i in s.items if i.memory is not None] for s in p.sections if s.items
        },
    }
    if p.since is not None:
        out["since"] = p.since.isoformat()
    if p.truncated:
        out["omitted"] = {s.kind: s.omitted for s in p.sections if s.omitted}
        out["note"] = (
            "Some memories did not fit in the budget: raise token_budget, or use memory_search / "
            "memory_triggers for specifics."
        )
    return out


def _triggers(t: Triggers) -> dict[str, Any]:
    out: dict[str, Any] = {
        "action": t.action,
        "matched": list(t.matched),
        "memories": [_memory(m) for m in t.memories],
    }
    if not t.memories:
        out["note"] = "No lessons are recorded for this action."
    return out


def _slot_update(u: SlotUpdate) -> dict[str, Any]:
    out: dict[str, Any] = {
        "slot": u.slot.name,
        "content": u.slot.content,
        "tokens": u.slot.tokens,
        "capacity_tokens": u.slot.capacity_tokens,
    }
    if u.compaction:
        out["compaction"] = u.compaction
    return out


def _topic(t: Topic) -> dict[str, Any]:
    out: dict[str, Any] = {"id": t.id, "name": t.name, "size": t.size, "collection": t.collection}
    if t.children:
        out["subtopics"] = [_topic(c) for c in t.children]
    return out


def _tool_error(error: EngramError, target: str | None = None) -> ToolError:
    """The message a model reads when a call fails: what happened and what to do next.

    ``target`` is the Engram address, named when the server itself cannot be reached."""
    server = f"Engram server at {target}" if target else "Engram server"
    hint = ""
    if isinstance(error, ProtectedMemoryError):
        hint = (
            "Identity and directive memories are protected. Delete one with force=true only when the "
            "user explicitly asked to forget it; otherwise use memory_update."
        )
    elif isinstance(error, ThresholdTooLowError):
        hint = f"Use a threshold of at least {error.min_threshold or 0.85}."
    elif isinstance(error, NoMatchError):
        hint = "Nothing matched closely enough. Use memory_search to find the memory and pass its id."
    elif isinstance(error, MemoryNotFoundError) and error.metadata.get("trashed") == "true":
        hint = "That memory was deleted and is in the trash; memory_restore brings it back."
    elif isinstance(error, TopicNotFoundError):
        hint = (
            "That topic no longer exists (its memories moved, were deleted or expired). Call "
            "memory_topic without topic_id to list the current topics."
        )
    elif isinstance(error, MemoryNotFoundError):
        hint = "No memory with that id exists here. Use memory_search to find current ids."
    elif isinstance(error, LlmNotConfiguredError):
        hint = "Reflection needs an LLM endpoint configured on the Engram server; it cannot run here."
    elif isinstance(error, LlmUnavailableError | LlmInvalidOutputError):
        hint = "The server's LLM failed and nothing was written; try reflection_run again later."
    elif isinstance(error, UnavailableError) and error.reason is None:
        # No ErrorInfo: gRPC itself failed (nothing listening, DNS, TLS), not Engram.
        hint = (
            f"Cannot reach the {server} (ENGRAM_ADDR). Long-term memory is unavailable until it is "
            "running; continue without it and tell the user if it matters."
        )
    elif isinstance(error, UnavailableError):
        hint = "The memory service is unavailable right now; try again later."
    elif isinstance(error, DeadlineExceededError):
        hint = f"The {server} did not answer in time (ENGRAM_TIMEOUT); try again later."
    elif isinstance(error, UnauthenticatedError | PermissionDeniedError):
        hint = f"The {server} refused the credentials; check ENGRAM_API_KEY."
    label = (error.reason or error.code.name).removeprefix("ERROR_REASON_")
    text = f"{label}: {error.message}"
    if not hint and isinstance(error, InvalidArgumentError) and error.field_violations:
        # Each thing once: the server's message usually names the violations already.
        said = (f"{v.field}: {v.description}" for v in error.field_violations)
        unsaid = [s for s in said if s not in text]
        hint = "Fix: " + "; ".join(unsaid) if unsaid else "Fix the argument named above and call again."
    return ToolError(f"{text}. {hint}" if hint else text)


def _pin(fn: Callable[..., Awaitable[Any]], **fixed: Any) -> Callable[..., Awaitable[Any]]:
    """``fn`` with the ``fixed`` keyword arguments bound and removed from its visible signature, so
    the tool schema does not offer them (the pinned collection)."""
    signature = inspect.signature(fn, eval_str=True)

    async def pinned(**kwargs: Any) -> Any:
        return await fn(**kwargs, **fixed)

    pinned.__name__ = fn.__name__
    pinned.__doc__ = fn.__doc__
    pinned.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[p for name, p in signature.parameters.items() if name not in fixed]
    )
    return pinned


class EngramMcp:
    """The MCP server (``.server``) and the gRPC client it forwards to.

    Without ``client``, an AsyncEngramClient is created from the environment on first use (inside
    the server's event loop) and closed by :meth:`aclose`.
    """

    def __init__(self, settings: ShimSettings, *, client: AsyncEngramClient | None = None) -> None:
        self.settings = settings
        self._client = client
        self._owns_client = client is None
        #: This shim's session: every memory it adds carries it, and memory_context tells the server
        #: that a new session started (so the next one finds this one as its last).
        self.session_id = settings.session_id or f"mcp-{uuid.uuid4()}"
        self.server: MCPServer[Any] = MCPServer(name="engram", instructions=INSTRUCTIONS, version="0.1.0a1")
        self._register()

    async def client(self) -> AsyncEngramClient:
        if self._client is None:
            self._client = AsyncEngramClient()
        return self._client

    def _tool_error(self, error: EngramError) -> ToolError:
        return _tool_error(error, self._client.target if self._client is not None else None)

    async def aclose(self) -> None:
        if self._client is not None and self._owns_client:
            await self._client.close()
            self._client = None

    def _register(self) -> None:
        pinned = self.settings.collection
        read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
        self._add_tool(self.memory_context, read_only, collections=[pinned] if pinned else None)
        self._add_tool(self.memory_search, read_only, collections=[pinned] if pinned else None)
        self._add_tool(self.memory_trash, read_only)
        self._add_tool(self.memory_triggers, read_only, collections=[pinned] if pinned else None)
        self._add_tool(self.memory_topic, read_only)
        if self.settings.read_only:
            return
        self._add_tool(self.memory_add, ToolAnnotations(read_only_hint=False, destructive_hint=False))
        self._add_tool(
            self.memory_update,
            ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True),
        )
        self._add_tool(self.memory_delete, ToolAnnotations(read_only_hint=False, destructive_hint=True))
        self._add_tool(
            self.memory_restore,
            ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False),
        )
        self._add_tool(self.reflection_run, ToolAnnotations(read_only_hint=False, destructive_hint=False))
        self._add_tool(self.memory_extract, ToolAnnotations(read_only_hint=False, destructive_hint=False))
        self._add_tool(self.memory_slot_update, ToolAnnotations(read_only_hint=False, destructive_hint=True))
        self._add_tool(self.memory_consolidate, ToolAnnotations(read_only_hint=False, destructive_hint=False))

    def _add_tool(
        self, fn: Callable[..., Awaitable[Any]], annotations: ToolAnnotations, **pinned_override: Any
    ) -> None:
        pinned: dict[str, Any] = {}
        if self.settings.collection is not None:
            if "collection" in inspect.signature(fn).parameters:
                pinned["collection"] = self.settings.collection
            pinned.update(pinned_override)
        tool = _pin(fn, **pinned) if pinned else fn
        self.server.add_tool(tool, name=fn.__name__, annotations=annotations)

    async def memory_search(
        self,
        *,
        query: Annotated[str, Field(description="What to recall, in natural language (English works best).")],
        limit: Annotated[
            int, Field(ge=1, le=50, description="Maximum results; use 3 for a pre-write check.")
        ] = 5,
        types: Annotated[
            list[MemoryTypeName] | None, Field(description="Only memories of these types.")
        ] = None,
        tags_any: Annotated[
            list[str] | None, Field(description="Only memories with at least one of these tags.")
        ] = None,
        min_importance: Annotated[
            int | None, Field(ge=1, le=10, description="Only importance >= this.")
        ] = None,
        collections: Annotated[
            list[str] | None,
            Field(
                description="Collections to search (default: every collection you may read; "
                "each result names its collection). A name that does not exist is an error."
            ),
        ] = None,
        rerank: Annotated[
            bool | None,
            Field(
                description="false: skip the server's cross-encoder reranking of an English query "
                "(faster, a little less accurate); default: the server's setting."
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Search long-term memory; relevance leads the ranking, recency and importance order near-ties.

        Each result has `relevance` (0-1, the write gate's scale: > 0.92 a near copy, 0.82-0.92 a
        restatement, 0.70-0.82 the same topic) and `score` (the fused rank). Always search before
        memory_add, using the text you intend to store with limit 3:
        best relevance > 0.82 -> memory_update that memory instead of adding; 0.70-0.82 -> add only
        if it is genuinely different, else update; < 0.70 -> add.
        """
        memory_filter = None
        if types or tags_any or min_importance:
            memory_filter = MemoryFilter(
                types=types or (), tags_any=tags_any or (), min_importance=min_importance
            )
        try:
            client = await self.client()
            results = await client.search(
                query, collections=collections, limit=limit, filter=memory_filter, rerank=rerank
            )
        except CollectionNotFoundError as exc:
            # The pinned collection is created by its first write: until then it holds nothing.
            if collections is None or list(collections) != [self.settings.collection]:
                raise self._tool_error(exc) from exc
            results = SearchResults()
        except EngramError as exc:
            raise self._tool_error(exc) from exc
        return {"results": [_search_hit(r) for r in results]}

    async def memory_topic(
        self,
        *,
        topic_id: Annotated[
            str | None,
            Field(
                description="The id of a topic from the context pack's topic index or an earlier "
                "memory_topic answer (e.g. t3f9a0c12de). Omit it to list the top-level topics."
            ),
        ] = None,
        limit: Annotated[int, Field(ge=1, le=100, description="Most memories (or topics) to return.")] = 20,
        page_token: Annotated[
            str | None, Field(description="next_page_token of the previous answer, for the next page.")
        ] = None,
        collection: Annotated[
            str | None, Field(description="The collection (default: the default one).")
        ] = None,
    ) -> dict[str, Any]:
        """Drill into one topic of your memory: its name, sub-topics and memories, most central first.

        Memories are grouped by subject into a topic index (a tree of named topics). The context pack
        (memory_context, at session start or after compaction) shows only the top-level topics with
        their ids and sizes; call this with a topic_id when the task touches one of them and you need
        what you know about it, instead of guessing search queries. Without topic_id it lists the
        top-level topics (largest first) with their sub-topics. Use memory_search for a precise
        question; use this to browse a whole subject.
        """
        try:
            client = await self.client()
            if topic_id is None:
                page = await client.list_topics(collection=collection, page_size=limit, page_token=page_token)
                return {
                    "topics": [_topic(t) for t in page.topics],
                    "topic_count": page.topic_count,
                    "memory_count": page.memory_count,
                    "next_page_token": page.next_page_token,
                }
            got = await client.get_topic(
                topic_id, collection=collection, page_size=limit, page_token=page_token
            )
        except CollectionNotFoundError as exc:
            if collection is None or collection != self.settings.collection:
                raise self._tool_error(exc) from exc
            return {"topics": [], "topic_count": 0, "memory_count": 0, "next_page_token": None}
        except EngramError as exc:
            raise self._tool_error(exc) from exc
        return {
            "topic": _topic(got.topic),
            "memories": [_memory(m) for m in got.memories],
            "next_page_token": got.next_page_token,
        }

    async def memory_add(
        self,
        *,
        content: Annotated[
            str,
            Field(
                description="One self-contained fact, preference, instruction or event, written so it "
                "makes sense on its own later (English works best)."
            ),
        ],
        type: Annotated[MemoryTypeName, Field(description=_TYPE_HELP)] = "event",
        importance: Annotated[int, Field(ge=1, le=10, description=_IMPORTANCE_HELP)] = 5,
        tags: Annotated[
            list[str] | None,
            Field(
                description="Short topic tags, e.g. ['frank', 'git']. "
                "'permanent' never expires; 'time-sensitive' and 'location' expire within 7 days."
            ),
        ] = None,
        source: Annotated[
            Literal["user", "agent"], Field(description="'user' if the user stated it, else 'agent'.")
        ] = "agent",
        collection: Annotated[
            str | None, Field(description="Target collection (default: the server's default collection).")
        ] = None,
        allow_duplicate: Annotated[
            bool,
            Field(
                description="Write even if the server finds a near-copy. Only when the user wants the "
                "same fact stored twice (e.g. it happened again)."
            ),
        ] = False,
    ) -> dict[str, Any]:
        """Store a new long-term memory. Search first (memory_search, limit 3): if the best relevance
        is above 0.82, use memory_update instead. The server refuses near-copies (outcome
        'duplicate', nothing written) and reports similar memories in 'near_duplicates'. A text that
        differs from a stored one only in a number, date, id, name or negation is a different fact:
        it is written, with gate_reason 'conflicting_specifics'."""
        try:
            client = await self.client()
            result = await client.add(
                content,
                type=type,
                importance=importance,
                tags=tags or (),
                source=source,
                source_type="user_input" if source == "user" else None,
                collection=collection,
                allow_duplicate=allow_duplicate,
                session_id=self.session_id,
                agent_id=self.settings.agent_id,
            )
        except EngramError as exc:
            raise self._tool_error(exc) from exc
        return _add(result)

    async def memory_update(
        self,
        *,
        id: Annotated[
            str | None, Field(description="The memory's id, from memory_search (preferred).")
        ] = None,
        old_content: Annotated[
            str | None,
            Field(
                description="Instead of id: text close to the memory's current content, "
                "or a question it answers ('Where does Ana live now?'), to locate it by meaning. "
                "A question is refused unless one memory clearly answers it and new_content "
                "is about that memory."
            ),
        ] = None,
        new_content: Annotated[
            str | None, Field(description="The full replacement text. Omit to keep the content.")
        ] = None,
        type: Annotated[
            MemoryTypeName | None, Field(description="New type. Omit to keep. " + _TYPE_HELP)
        ] = None,
        importance: Annotated[
            int | None, Field(ge=1, le=10, description="New importance. Omit to keep.")
        ] = None,
        tags: Annotated[list[str] | None, Field(description="New tags (replace all). Omit to keep.")] = None,
        threshold: Annotated[
            float | None,
            Field(
                ge=0, le=1, description="For old_content: minimum similarity to accept the match (>= 0.85)."
            ),
        ] = None,
        dry_run: Annotated[bool, Field(description="Show what would change without writing.")] = False,
        collection: Annotated[
            str | None, Field(description="The collection (default: the server's default).")
        ] = None,
    ) -> dict[str, Any]:
        """Replace an existing memory's content or attributes when a fact changed or was restated.
        Give `id` (from memory_search) or `old_content`. The id stays the same and the previous
        version is kept as history. Prefer this over memory_add when memory_search found a match
        with relevance above 0.82."""
        try:
            client = await self.client()
            result = await client.update(
                id,
                locate=old_content if id is None else None,
                threshold=threshold if id is None else None,
                content=new_content,
                type=type,
                importance=importance,
                tags=tags,
                dry_run=dry_run,
                collection=collection,
            )
        except ValueError as exc:
            raise ToolError("Give exactly one of id or old_content.") from exc
        except EngramError as exc:
            raise self._tool_error(exc) from exc
        return _update(result)

    async def memory_delete(
        self,
        *,
        id: Annotated[
            str | None, Field(description="The memory's id, from memory_search (preferred).")
        ] = None,
        query: Annotated[
            str | None, Field(description="Instead of id: delete the memories closest to this text.")
        ] = None,
        threshold: Annotated[
            float | None,
            Field(
                ge=0,
                le=1,
                description="For query: minimum similarity (default 0.85; >= 0.85 when limit > 1).",
            ),
        ] = None,
        limit: Annotated[
            int | None, Field(ge=1, le=100, description="For query: at most this many (default 1).")
        ] = None,
        force: Annotated[
            bool,
            Field(
                description="Required for identity and directive memories. Only when the user explicitly "
                "asked to forget them."
            ),
        ] = False,
        dry_run: Annotated[bool, Field(description="List what would be deleted without deleting.")] = False,
        collection: Annotated[
            str | None, Field(description="The collection (default: the server's default).")
        ] = None,
    ) -> dict[str, Any]:
        """Delete a memory that is wrong or that the user asked to forget (with its history). It goes
        to the trash: memory_restore brings it back until `restorable_until`, then it is gone for
        good. Give `id` (from memory_search) or `query`. When in doubt, use dry_run first.
        Outdated facts are better corrected with memory_update."""
        try:
            client = await self.client()
            result = await client.delete(
                id,
                query=query if id is None else None,
                threshold=threshold if id is None else None,
                limit=limit if id is None else None,
                force=force,
                dry_run=dry_run,
                collection=collection,
            )
        except ValueError as exc:
            raise ToolError("Give exactly one of id or query.") from exc
        except EngramError as exc:
            raise self._tool_error(exc) from exc
        return _delete(result)

    async def memory_trash(
        self,
        *,
        limit: Annotated[int, Field(ge=1, le=100, description="At most this many (default 20).")] = 20,
        collection: Annotated[
            str | None, Field(description="The collection (default: the server's default).")
        ] = None,
    ) -> dict[str, Any]:
        """List recently deleted memories still in the trash (each with `purge_at`, when it is gone
        for good), e.g. to undo a deletion with memory_restore."""
        try:
            client = await self.client()
            page = await client.list_trash(collection=collection, page_size=limit)
        except EngramError as exc:
            raise self._tool_error(exc) from exc
        return {"memories": [_memory(m) for m in page.memories], "more": page.next_page_token is not None}

    async def memory_restore(
        self,
        *,
        id: Annotated[str, Field(description="The deleted memory's id, from memory_delete or memory_trash.")],
        collection: Annotated[
            str | None, Field(description="The collection (default: the server's default).")
        ] = None,
    ) -> dict[str, Any]:
        """Undo a deletion: bring a memory back from the trash as it was. If a similar memory was
        added since, it is listed in `near_duplicates`: then keep one (memory_delete the other)."""
        try:
            client = await self.client()
            result = await client.restore(id, collection=collection)
        except EngramError as exc:
            raise self._tool_error(exc) from exc
        out: dict[str, Any] = {"memory": _memory(result.memory)}
        if result.near_duplicates:
            out["near_duplicates"] = [_similar(s) for s in result.near_duplicates]
        return out

    async def memory_consolidate(
        self,
        *,
        dry_run: Annotated[bool, Field(description="Report the clusters without merging anything.")] = False,
        collection: Annotated[str | None, Field(description="The collection to consolidate.")] = None,
    ) -> dict[str, Any]:
        """Merge clusters of related event memories into one insight each, keeping every number, date
        and name; the merged memories stay in the insight's history. The server throttles it (minimum
        interval, daily cap, skipped when nothing new was written), so it may do nothing."""
        try:
            client = await self.client()
            result = await client.run_consolidation(collection=collection, dry_run=dry_run)
        except EngramError as exc:
            raise self._tool_error(exc) from exc
        return {
            "outcome": result.outcome,
            "detail": result.detail,
            "memories_before": result.memories_before,
            "memories_after": result.memories_after,
            "clusters": [
                {"insight": _memory(c.insight), "source_ids": list(c.source_ids), "merged_by": c.merged_by}
                for c in result.clusters
            ],
        }

    async def reflection_run(
        self,
        *,
        dry_run: Annotated[
            bool, Field(description="Report what reflection would produce without storing it.")
        ] = False,
        collection: Annotated[str | None, Field(description="The collection to reflect on.")] = None,
    ) -> dict[str, Any]:
        """Run one reflection pass: distil recent unreflected memories into reusable insights. The
        server throttles it (minimum interval, daily cap, enough new material), so it may do nothing."""
        try:
            client = await self.client()
            result = await client.run_reflection(collection=collection, dry_run=dry_run)
        except UnimplementedError as exc:  # an Engram server without RunReflection
            raise ToolError(REFLECTION_UNAVAILABLE) from exc
        except EngramError as exc:
            raise self._tool_error(exc) from exc
        return _reflection(result)

    async def memory_context(
        self,
        *,
        task: Annotated[
            str | None,
            Field(
                description="What you are about to work on, if you know: adds the memories most relevant "
                "to it. Omit at a plain session start."
            ),
        ] = None,
        token_budget: Annotated[
            int, Field(ge=100, le=32000, description="Most tokens the Markdown may take (default 2000).")
        ] = 2000,
        collections: Annotated[
            list[str] | None,
            Field(description="Collections to draw on (default: every collection you may read)."),
        ] = None,
    ) -> dict[str, Any]:
        """Load your memory into context. Call this FIRST at the start of every session, and again
        right after your context was compacted or summarised: one call returns, as ready-to-read
        Markdown within the token budget, your core identity and standing rules (with the persona,
        user_preferences, project_context, pending_items and guidance slots), the trigger names to
        check before actions, open items, what changed since your last session and, given `task`,
        the memories most relevant to it. Read it before answering; do not guess what you knew."""
        try:
            client = await self.client()
            pack = await client.get_context(
                task,
                collections=collections,
                token_budget=token_budget,
                session_id=self.session_id,
                agent_id=self.settings.agent_id,
            )
        except CollectionNotFoundError as exc:
            if collections is None or list(collections) != [self.settings.collection]:
                raise self._tool_error(exc) from exc
            return {"markdown": "", "tokens_used": 0, "note": "No memories yet."}
        except EngramError as exc:
            raise self._tool_error(exc) from exc
        return _context(pack)

    async def memory_triggers(
        self,
        *,
        action: Annotated[
            str,
            Field(
                description="The action you are about to take, as a short name: 'deploy', 'git push', "
                "'deploy/prod', 'db-migration'. Lessons tagged trigger:<action> or a parent "
                "('deploy' for 'deploy/prod') are returned."
            ),
        ],
        limit: Annotated[int, Field(ge=1, le=100, description="Most memories to return.")] = 20,
        collections: Annotated[
            list[str] | None,
            Field(description="Collections to look in (default: every collection you may read)."),
        ] = None,
    ) -> dict[str, Any]:
        """Recall the lessons and rules to follow BEFORE a risky or irreversible action (deploying,
        pushing, migrating, deleting, sending): the memories tagged trigger:<action>, most important
        first. Call it whenever memory_context listed a trigger matching what you are about to do,
        and before any deploy or push anyway. Follow what it returns before acting."""
        try:
            client = await self.client()
            found = await client.get_triggers(action, collections=collections, limit=limit)
        except CollectionNotFoundError as exc:
            if collections is None or list(collections) != [self.settings.collection]:
                raise self._tool_error(exc) from exc
            return {"action": action, "matched": [], "memories": [], "note": "No memories yet."}
        except EngramError as exc:
            raise self._tool_error(exc) from exc
        return _triggers(found)

    async def memory_slot_update(
        self,
        *,
        slot: Annotated[
            Literal["persona", "user_preferences", "project_context", "pending_items", "guidance"],
            Field(description="The slot to change."),
        ],
        content: Annotated[str, Field(description="The text to append (or the new content, with replace).")],
        replace: Annotated[
            bool, Field(description="Replace the slot's content instead of appending a line.")
        ] = False,
        collection: Annotated[
            str | None, Field(description="The collection (default: the server's default).")
        ] = None,
    ) -> dict[str, Any]:
        """Keep a compact, always-loaded note up to date: persona (who you are and how you work),
        user_preferences, project_context, pending_items (open tasks; remove them with replace when
        done) or guidance. Slots have a fixed capacity: when full, the oldest content is compacted.
        Use memory_add for individual facts; slots are for the summary you want at every start."""
        try:
            client = await self.client()
            result = await client.update_slot(slot, content, collection=collection, replace=replace)
        except EngramError as exc:
            raise self._tool_error(exc) from exc
        return _slot_update(result)

    async def memory_extract(
        self,
        *,
        text: Annotated[
            str | None,
            Field(description="Free text to extract from (notes, a pasted document). Give this or messages."),
        ] = None,
        messages: Annotated[
            list[dict[str, str]] | None,
            Field(
                description='A conversation: [{"role": "user"|"assistant", "content": "..."}], oldest first.'
            ),
        ] = None,
        dry_run: Annotated[bool, Field(description="Only show what would be stored; write nothing.")] = False,
        collection: Annotated[
            str | None, Field(description="The collection (default: the server's default).")
        ] = None,
    ) -> dict[str, Any]:
        """Store the facts worth keeping from a stretch of conversation or a text in one call,
        instead of many memory_add calls: the server picks them (who the user is, preferences and
        standing instructions, decisions and changes, project facts), types them, removes secrets
        and <private>...</private> parts, and writes each through the duplicate check. Use it at the
        end of a task or when the user shared several facts at once; use memory_add for a single
        fact you have already phrased."""
        try:
            client = await self.client()
            convo = None
            if messages is not None:
                convo = [
                    ConversationMessage(str(m.get("role", "user")), str(m.get("content", "")))
                    for m in messages
                ]
            result = await client.extract(text=text, messages=convo, dry_run=dry_run, collection=collection)
        except ValueError as exc:
            raise ToolError("Give exactly one of text or messages.") from exc
        except UnimplementedError as exc:
            raise ToolError("extraction is not available on this Engram server") from exc
        except EngramError as exc:
            raise self._tool_error(exc) from exc
        return _extraction(result)
