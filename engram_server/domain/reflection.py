"""Reflection: an LLM turns a collection's unreflected memories into up to three insights.

Gates, in order: minimum interval since the last run (``force`` skips it), daily cap (runs in
any 24 h), summed importance of the unreflected memories, at least two of them. A run takes the
most important unreflected memories, makes one structured-output LLM call, validates the answer,
drops proposals that are near-copies of existing insights (calibrated document scale), stores
the rest in ``<collection>_reflection`` — confident ones as ``insight`` memories, the others as
drafts that are never searched — and only then marks the sources reflected and records the run
in the persisted throttle state. Any failure before the writes leaves everything untouched.

Every run that calls the LLM (completed, no insight, failed) is kept in a short persisted history
(:meth:`Reflector.history`, the last :data:`HISTORY` runs per collection); throttled and dry runs
are answered to their caller only.
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from engram_server import telemetry
from engram_server.domain.errors import LlmInvalidOutput, LlmNotConfigured
from engram_server.domain.model import (
    MemoryRecord,
    MemoryType,
    Source,
    SourceType,
    StoredPoint,
    StoreFilter,
)
from engram_server.domain.service import MemoryService, Similar, stored_point
from engram_server.domain.specifics import conflicts
from engram_server.domain.ttl import compute_valid_until
from engram_server.domain.validation import Violations, check_collection
from engram_server.ports import Llm

log = logging.getLogger(__name__)

DAY = 86_400.0
REFLECTION_TAG = "source:reflection"
#: Runs kept per collection in the persisted history.
HISTORY = 50


#: How many of the nearest existing insights a proposal is compared with (the nearest may differ in
#: a specific while the next one says the same).
_DEDUP_CANDIDATES = 5


@dataclass(frozen=True, slots=True)
class ReflectionPolicy:
    min_interval_seconds: float = 2 * 3600.0
    daily_cap: int = 3
    min_importance_sum: int = 40
    max_sources: int = 20
    min_sources: int = 2
    min_confidence: float = 0.6
    dedup_threshold: float = 0.78
    max_insights: int = 3
    collection_suffix: str = "_reflection"


class ReflectionOutcome(StrEnum):
    COMPLETED = "completed"
    NO_INSIGHT = "no_insight"
    THROTTLED = "throttled"
    WOULD_RUN = "would_run"
    #: Only in the history: the LLM call or the writes raised (RunReflection answers an error).
    FAILED = "failed"


class Gate(StrEnum):
    MIN_INTERVAL = "min_interval"
    DAILY_CAP = "daily_cap"
    IMPORTANCE = "importance"
    TOO_FEW_MEMORIES = "too_few_memories"
    IN_PROGRESS = "in_progress"


@dataclass(frozen=True, slots=True)
class ReflectionReport:
    outcome: ReflectionOutcome
    reflection_collection: str
    detail: str
    gate: Gate | None = None
    next_run_after: float | None = None
    unreflected_importance: int = 0
    unreflected_count: int = 0
    sources: tuple[MemoryRecord, ...] = ()
    insights: tuple[MemoryRecord, ...] = ()
    drafts: tuple[MemoryRecord, ...] = ()
    duplicates: tuple[Similar, ...] = ()
    model: str = ""


@dataclass(frozen=True, slots=True)
class ReflectionRun:
    """One run that called the LLM, as kept in the history."""

    started_at: float
    outcome: ReflectionOutcome
    detail: str
    scheduled: bool = False
    model: str = ""
    source_ids: tuple[str, ...] = ()
    insight_ids: tuple[str, ...] = ()
    draft_ids: tuple[str, ...] = ()
    duplicates: int = 0

    def to_state(self) -> dict[str, Any]:
        return {
            "started_at": self.started_at,
            "outcome": self.outcome.value,
            "detail": self.detail,
            "scheduled": self.scheduled,
            "model": self.model,
            "source_ids": list(self.source_ids),
            "insight_ids": list(self.insight_ids),
            "draft_ids": list(self.draft_ids),
            "duplicates": self.duplicates,
        }

    @classmethod
    def from_state(cls, data: dict[str, Any]) -> ReflectionRun | None:
        """None for an entry this version cannot read (the history is best effort, never fatal)."""
        try:
            return cls(
                started_at=float(data["started_at"]),
                outcome=ReflectionOutcome(data["outcome"]),
                detail=str(data.get("detail", "")),
                scheduled=bool(data.get("scheduled", False)),
                model=str(data.get("model", "")),
                source_ids=tuple(str(x) for x in data.get("source_ids", ())),
                insight_ids=tuple(str(x) for x in data.get("insight_ids", ())),
                draft_ids=tuple(str(x) for x in data.get("draft_ids", ())),
                duplicates=int(data.get("duplicates", 0)),
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True, slots=True)
class Proposal:
    content: str
    importance: int
    confidence: float
    tags: tuple[str, ...]
    source_indices: tuple[int, ...]


SYSTEM_PROMPT = """\
You are the reflection step of a long-term memory system for an AI agent. You receive numbered \
memories the agent has stored. Distil at most 3 insights from them: reusable, general conclusions \
(recurring patterns, stable preferences, lessons learned, facts that several memories support) \
that will help the agent later. Do not restate a single memory; do not invent facts the memories \
do not support.

For each insight give:
- content: one or two self-contained sentences, in the language the memories are written in;
- importance: an integer from 1 (trivial) to 10 (critical) for how much it matters later;
- confidence: a number from 0 to 1 for how well the memories support it;
- tags: 1 to 4 short lowercase topic tags;
- source_indices: the [n] numbers of the memories it rests on.

If nothing worth keeping emerges, return an empty list. Answer with a JSON object only."""

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["insights"],
    "properties": {
        "insights": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["content", "importance", "confidence", "tags", "source_indices"],
                "properties": {
                    "content": {"type": "string"},
                    "importance": {"type": "integer"},
                    "confidence": {"type": "number"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "source_indices": {"type": "array", "items": {"type": "integer"}},
                },
            },
        }
    },
}


class Reflector:
    """Runs reflection for a :class:`MemoryService`'s collections."""

    def __init__(
        self, memory: MemoryService, llm: Llm | None, policy: ReflectionPolicy | None = None
    ) -> None:
        self._memory = memory
        self._llm = llm
        self.policy = policy or ReflectionPolicy()
        self._running: dict[str, asyncio.Lock] = {}

    @property
    def llm(self) -> Llm | None:
        return self._llm

    def reflection_collection(self, collection: str) -> str:
        return collection + self.policy.collection_suffix

    # ------------------------------------------------------------ the run

    async def run(
        self, collection: str = "", *, dry_run: bool = False, force: bool = False, scheduled: bool = False
    ) -> ReflectionReport:
        pol = self.policy
        v = Violations()
        name = collection or self._memory.policy.default_collection
        check_collection(v, "collection", name)
        target = self.reflection_collection(name)
        if name.endswith(pol.collection_suffix):
            v.add("collection", "reflection collections are not reflected on; name the source collection")
        elif len(target) > 64:
            v.add("collection", f"too long to have a reflection collection ({target!r} > 64 characters)")
        v.raise_if_any()
        if self._llm is None:
            raise LlmNotConfigured(
                "reflection needs an LLM: set ENGRAM_LLM_BASE_URL (any OpenAI-compatible endpoint) "
                "and/or ENGRAM_LLM_API_KEY, and ENGRAM_LLM_MODEL"
            )
        lock = self._running.setdefault(name, asyncio.Lock())
        if lock.locked():
            return ReflectionReport(
                ReflectionOutcome.THROTTLED,
                target,
                f"a reflection of {name!r} is running right now",
                gate=Gate.IN_PROGRESS,
            )
        async with lock:
            with telemetry.reflection_span(name, dry_run=dry_run) as span:
                started = self._memory.now()
                try:
                    report = await self._run_locked(name, target, self._llm, dry_run=dry_run, force=force)
                except Exception as exc:
                    telemetry.record_reflection_run("failed", collection=name, dry_run=dry_run)
                    if not dry_run:
                        failed = ReflectionRun(
                            started,
                            ReflectionOutcome.FAILED,
                            f"{type(exc).__name__}: {exc}"[:500],
                            scheduled=scheduled,
                            model=self._llm.model,
                        )
                        await self._remember(name, failed)
                    raise
                if report.outcome in (ReflectionOutcome.COMPLETED, ReflectionOutcome.NO_INSIGHT):
                    await self._remember(name, _history_entry(report, started, scheduled=scheduled))
                telemetry.record_reflection_run(report.outcome.value, collection=name, dry_run=dry_run)
                telemetry.record_reflection_insights("stored", len(report.insights))
                telemetry.record_reflection_insights("draft", len(report.drafts))
                telemetry.record_reflection_insights("duplicate", len(report.duplicates))
                span.set_attribute("engram.reflection.outcome", report.outcome.value)
                if report.gate is not None:
                    span.set_attribute("engram.reflection.gate", report.gate.value)
                return report

    async def _run_locked(
        self, name: str, target: str, llm: Llm, *, dry_run: bool, force: bool
    ) -> ReflectionReport:
        pol = self.policy
        store, now = self._memory.store, self._memory.now()
        state = await store.get_state(_state_key(name)) or {}
        last = _float_or_none(state.get("last_run_at"))
        runs = sorted(
            t for t in (_float_or_none(x) for x in state.get("runs", [])) if t is not None and t > now - DAY
        )

        def throttled(gate: Gate, detail: str, after: float | None = None, **kw: Any) -> ReflectionReport:
            return ReflectionReport(
                ReflectionOutcome.THROTTLED,
                target,
                detail,
                gate=gate,
                next_run_after=after,
                model=llm.model,
                **kw,
            )

        if not force and last is not None and now < last + pol.min_interval_seconds:
            after = last + pol.min_interval_seconds
            return throttled(
                Gate.MIN_INTERVAL,
                f"the last reflection ran at {_iso(last)}; the minimum interval is "
                f"{pol.min_interval_seconds / 3600:g} h, so the next run is allowed at {_iso(after)}",
                after,
            )
        if len(runs) >= pol.daily_cap:
            after = runs[0] + DAY
            return throttled(
                Gate.DAILY_CAP,
                f"{len(runs)} reflections ran in the last 24 h (cap {pol.daily_cap}); "
                f"the next run is allowed at {_iso(after)}",
                after,
            )
        unreflected = await self._unreflected(name, now)
        total = sum(r.importance for r in unreflected)
        counts = {"unreflected_importance": total, "unreflected_count": len(unreflected)}
        if total < pol.min_importance_sum:
            return throttled(
                Gate.IMPORTANCE,
                f"the unreflected memories' importance sums to {total}; a run needs at least "
                f"{pol.min_importance_sum}",
                **counts,
            )
        if len(unreflected) < pol.min_sources:
            return throttled(
                Gate.TOO_FEW_MEMORIES,
                f"{len(unreflected)} unreflected memories; a run needs at least {pol.min_sources}",
                **counts,
            )
        sources = tuple(
            sorted(unreflected, key=lambda r: (-r.importance, -r.created_at, r.id))[: pol.max_sources]
        )
        base = {"sources": sources, "model": llm.model, **counts}
        if dry_run:
            return ReflectionReport(
                ReflectionOutcome.WOULD_RUN,
                target,
                f"every gate passes; a run would reflect on {len(sources)} memories",
                **base,  # type: ignore[arg-type]
            )

        result = await llm.complete_json(
            system=SYSTEM_PROMPT, user=_user_prompt(sources), schema=SCHEMA, schema_name="reflection_insights"
        )
        proposals = self._validate(result.data, len(sources))
        if not proposals:
            await self._record_run(name, state, runs, now)
            return ReflectionReport(
                ReflectionOutcome.NO_INSIGHT,
                target,
                "the model found no insight worth keeping",
                **base,  # type: ignore[arg-type]
            )
        kept, duplicates = await self._dedup(target, proposals)
        if not kept:
            await self._record_run(name, state, runs, now)
            return ReflectionReport(
                ReflectionOutcome.NO_INSIGHT,
                target,
                f"all {len(proposals)} proposed insights duplicate existing insights",
                duplicates=tuple(duplicates),
                **base,  # type: ignore[arg-type]
            )
        insights, drafts = await self._write(
            name, target=target, sources=sources, kept=kept, model=result.model, now=now
        )
        await self._record_run(name, state, runs, now)
        return ReflectionReport(
            ReflectionOutcome.COMPLETED,
            target,
            f"{len(insights)} insights stored, {len(drafts)} drafts kept, "
            f"{len(duplicates)} duplicates dropped; {len(sources)} sources marked reflected",
            insights=tuple(insights),
            drafts=tuple(drafts),
            duplicates=tuple(duplicates),
            **base,  # type: ignore[arg-type]
        )

    async def _unreflected(self, name: str, now: float) -> list[MemoryRecord]:
        if await self._memory.existing_spec(name) is None:
            return []
        out: list[MemoryRecord] = []
        offset: str | None = None
        while True:
            page, offset = await self._memory.store.scroll(
                name, StoreFilter(live_at=now, unreflected=True), 512, offset
            )
            out.extend(page)
            if offset is None:
                return out

    def _validate(self, data: dict[str, Any], n_sources: int) -> list[Proposal]:
        """Strict on what matters (content, importance, confidence), lenient on tags and indices."""
        items = data.get("insights")
        if not isinstance(items, list):
            raise LlmInvalidOutput("LLM answer has no 'insights' list")
        if len(items) > self.policy.max_insights:
            raise LlmInvalidOutput(
                f"LLM proposed {len(items)} insights; at most {self.policy.max_insights} allowed"
            )
        limits = self._memory.policy.limits
        out: list[Proposal] = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise LlmInvalidOutput(f"insight {i} is not an object")
            content = item.get("content")
            if not isinstance(content, str) or not content.strip():
                raise LlmInvalidOutput(f"insight {i} has no content")
            if len(content) > limits.max_content_chars:
                raise LlmInvalidOutput(f"insight {i} is longer than {limits.max_content_chars} characters")
            importance = item.get("importance")
            if (
                isinstance(importance, bool)
                or not isinstance(importance, int | float)
                or not math.isfinite(importance)
                or importance != int(importance)
                or not 1 <= importance <= 10
            ):
                raise LlmInvalidOutput(f"insight {i} has an invalid importance {importance!r} (integer 1–10)")
            confidence = item.get("confidence")
            if (
                isinstance(confidence, bool)
                or not isinstance(confidence, int | float)
                or not 0.0 <= float(confidence) <= 1.0
            ):
                raise LlmInvalidOutput(f"insight {i} has an invalid confidence {confidence!r} (0–1)")
            raw_tags = item.get("tags")
            raw_tags = raw_tags if isinstance(raw_tags, list) else []
            tags = tuple(
                dict.fromkeys(
                    t.strip().lower()
                    for t in raw_tags
                    if isinstance(t, str) and t.strip() and len(t.strip()) <= limits.max_tag_chars
                )
            )[:8]
            raw_idx = item.get("source_indices")
            raw_idx = raw_idx if isinstance(raw_idx, list) else []
            indices = tuple(
                dict.fromkeys(
                    x
                    for x in raw_idx
                    if isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= n_sources
                )
            )
            out.append(Proposal(content.strip(), int(importance), float(confidence), tags, indices))
        return out

    async def _dedup(
        self, target: str, proposals: list[Proposal]
    ) -> tuple[list[tuple[Proposal, Any]], list[Similar]]:
        """Drop proposals at or above the dedup threshold against existing insights (drafts
        included) and against each other — unless their specifics conflict (numbers, dates, ids,
        names, their order, negation: :func:`engram_server.domain.specifics.conflicts`), as the
        write gate does: "Restores take 2 hours." and "Restores take 6 hours." are two insights."""
        mem = self._memory
        vectors = await mem.embedder.embed_documents([p.content for p in proposals])
        exists = await mem.existing_spec(target) is not None
        kept: list[tuple[Proposal, Any]] = []
        duplicates: list[Similar] = []
        now = mem.now()
        threshold = self.policy.dedup_threshold
        for p, vec in zip(proposals, vectors, strict=True):
            if exists:
                hits = await mem.store.search(
                    target, vec, _DEDUP_CANDIDATES, StoreFilter(live_at=now, include_drafts=True)
                )
                same = next(
                    (
                        Similar(h.record, sim)
                        for h in hits
                        if (sim := mem.calibration.similarity(h.score)) >= threshold
                        and not conflicts(h.record.content, p.content)
                    ),
                    None,
                )
                if same is not None:
                    duplicates.append(same)
                    continue
            if any(
                mem.calibration.similarity(float(vec @ other)) >= threshold
                and not conflicts(q.content, p.content)
                for q, other in kept
            ):
                continue
            kept.append((p, vec))
        return kept, duplicates

    async def _write(
        self,
        name: str,
        *,
        target: str,
        sources: tuple[MemoryRecord, ...],
        kept: list[tuple[Proposal, Any]],
        model: str,
        now: float,
    ) -> tuple[list[MemoryRecord], list[MemoryRecord]]:
        mem = self._memory
        await mem.ensure_collection(target)
        insights: list[MemoryRecord] = []
        drafts: list[MemoryRecord] = []
        points: list[StoredPoint] = []
        for p, vec in kept:
            derived = tuple(sources[i - 1].id for i in p.source_indices) or tuple(s.id for s in sources)
            draft = p.confidence < self.policy.min_confidence
            tags = (REFLECTION_TAG, *(t for t in p.tags if t != REFLECTION_TAG))
            record = MemoryRecord(
                id=str(uuid.uuid4()),
                collection=target,
                content=p.content,
                type=MemoryType.INSIGHT,
                importance=p.importance,
                tags=tags,
                source=Source.SYSTEM,
                source_type=SourceType.REFLECTION,
                source_type_history=(SourceType.REFLECTION,),
                metadata={"confidence": f"{p.confidence:.2f}", "model": model, "source_collection": name},
                created_at=now,
                updated_at=now,
                valid_until=compute_valid_until(MemoryType.INSIGHT, p.importance, tags, now),
                derived_from=derived,
                draft=draft,
            )
            (drafts if draft else insights).append(record)
            points.append(stored_point(record, vec))
        async with mem.lock(target):
            await mem.write_points(target, points)
        async with mem.lock(name):
            await mem.store.set_fields(name, {s.id: {"reflected_at": now} for s in sources})
        return insights, drafts

    async def _record_run(self, name: str, state: dict[str, Any], runs: list[float], now: float) -> None:
        await self._memory.store.put_state(
            _state_key(name), {**state, "last_run_at": now, "runs": [*runs, now]}
        )

    # ------------------------------------------------------------ history

    async def history(self, collection: str = "", limit: int = 0) -> list[ReflectionRun]:
        """The collection's recent runs that called the LLM, newest first: at most ``limit``
        (1 to :data:`HISTORY`; 0 means 20)."""
        name = collection or self._memory.policy.default_collection
        v = Violations()
        check_collection(v, "collection", name)
        if not 0 <= limit <= HISTORY:
            v.add("limit", f"must be between 1 and {HISTORY} (0 means 20), got {limit}")
        v.raise_if_any()
        limit = limit or 20
        state = await self._memory.store.get_state(_history_key(name)) or {}
        entries = state.get("runs", [])
        runs = [r for r in (ReflectionRun.from_state(e) for e in entries if isinstance(e, dict)) if r]
        return sorted(runs, key=lambda r: -r.started_at)[:limit]

    async def _remember(self, name: str, run: ReflectionRun) -> None:
        """Append to the persisted history. Best effort: a failure to record never fails the run
        (the run's own writes and throttle state are already stored)."""
        try:
            # its own key: the throttle state stays exactly what the gates read
            state = await self._memory.store.get_state(_history_key(name)) or {}
            history = [e for e in state.get("runs", []) if isinstance(e, dict)]
            history = [*history, run.to_state()][-HISTORY:]
            await self._memory.store.put_state(_history_key(name), {"runs": history})
        except Exception:  # the history must never turn a run into an error
            log.warning("reflection history of %r not recorded", name, exc_info=True)

    # ------------------------------------------------------------ periodic

    async def run_due(self) -> dict[str, ReflectionReport]:
        """For periodic reflection: run every collection written to since its last run."""
        out: dict[str, ReflectionReport] = {}
        for name, written in sorted(self._memory.last_write_at.items()):
            if name.endswith(self.policy.collection_suffix):
                continue
            state = await self._memory.store.get_state(_state_key(name)) or {}
            last = _float_or_none(state.get("last_run_at"))
            if last is not None and written <= last:
                continue  # nothing new since the last run
            out[name] = await self.run(name, scheduled=True)
        return out


def _history_entry(report: ReflectionReport, started: float, *, scheduled: bool) -> ReflectionRun:
    return ReflectionRun(
        started,
        report.outcome,
        report.detail,
        scheduled=scheduled,
        model=report.model,
        source_ids=tuple(r.id for r in report.sources),
        insight_ids=tuple(r.id for r in report.insights),
        draft_ids=tuple(r.id for r in report.drafts),
        duplicates=len(report.duplicates),
    )


def _state_key(collection: str) -> str:
    return f"reflection.{collection}"


def _history_key(collection: str) -> str:
    return f"reflection_runs.{collection}"


def _float_or_none(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _user_prompt(sources: tuple[MemoryRecord, ...]) -> str:
    lines = [
        f"[{i}] ({r.type.value}, importance {r.importance}, {_iso(r.created_at)[:10]}) {r.content}"
        for i, r in enumerate(sources, start=1)
    ]
    return "Memories:\n" + "\n".join(lines)


__all__ = [
    "SCHEMA",
    "SYSTEM_PROMPT",
    "Gate",
    "ReflectionOutcome",
    "ReflectionPolicy",
    "ReflectionReport",
    "Reflector",
]
