"""Consolidation: clusters of related event memories become one insight each, keeping every detail.

A run (on demand, or periodically for collections written to since their last run) takes a
collection's live ``event`` memories, groups the ones about the same thing (calibrated similarity
≥ ``cluster_threshold`` to the cluster's first memory and ≥ ``cluster_threshold − link_slack`` to
every other member, at least ``min_cluster`` of them, at most ``max_cluster``), and writes one
``insight`` per cluster in the same collection:

* with an LLM configured, the LLM merges the cluster into one text; the answer is kept only if it
  carries every specific of the sources (numbers, dates, identifiers, names:
  :func:`engram_server.domain.specifics.extract`), else the rule-based merge is used;
* without one, the rules merge it: the sources' sentences in time order, repeats dropped, each
  prefixed with its date when the cluster spans more than one day.

The insight names its sources in ``derived_from``; the sources get ``superseded_by`` = the insight:
they are its history (``GetMemory`` with ``include_history``), never searched again, so search does
not count one fact twice. The insight inherits the highest importance, every tag (plus
``source:consolidation``), the newest ``created_at`` and the summed access count of its sources.

Throttled like reflection: one run at a time per collection, a minimum interval and a daily cap
(state persisted in the store), and skipped when nothing was written since the last run.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import numpy as np

from engram_server.domain.errors import LlmInvalidOutput, LlmUnavailable
from engram_server.domain.model import (
    MemoryRecord,
    MemoryType,
    Source,
    SourceType,
    StoredPoint,
    StoreFilter,
    Vector,
)
from engram_server.domain.service import MemoryService, normalise_text, stored_point
from engram_server.domain.specifics import extract
from engram_server.domain.ttl import compute_valid_until
from engram_server.domain.validation import Violations, check_collection
from engram_server.ports import Llm

log = logging.getLogger(__name__)

DAY = 86_400.0
CONSOLIDATION_TAG = "source:consolidation"


@dataclass(frozen=True, slots=True)
class ConsolidationPolicy:
    min_interval_seconds: float = 6 * 3600.0
    daily_cap: int = 4
    #: Calibrated similarity to the cluster's first memory (the scale's "same topic" is 0.70–0.82).
    cluster_threshold: float = 0.75
    #: Every member is at least ``cluster_threshold - link_slack`` from every other one.
    link_slack: float = 0.15
    min_cluster: int = 3
    max_cluster: int = 8
    #: Most event memories one run looks at (the newest).
    max_candidates: int = 5000


class ConsolidationOutcome(StrEnum):
    COMPLETED = "completed"
    NOTHING_TO_MERGE = "nothing_to_merge"
    THROTTLED = "throttled"
    WOULD_RUN = "would_run"


@dataclass(frozen=True, slots=True)
class Merge:
    insight: MemoryRecord
    sources: tuple[MemoryRecord, ...]
    merged_by: str  # "llm" | "rules"


@dataclass(frozen=True, slots=True)
class ConsolidationReport:
    outcome: ConsolidationOutcome
    detail: str
    next_run_after: float | None = None
    merges: tuple[Merge, ...] = ()
    candidates: int = 0
    memories_before: int = 0
    memories_after: int = 0


MERGE_SYSTEM_PROMPT = """\
You are the consolidation step of a long-term memory system for an AI agent. You receive numbered \
related memories, oldest first, with their dates. Merge them into ONE self-contained memory of a \
few sentences, in the language they are written in. Keep EVERY specific detail: every number, \
amount, date, time, name, place and identifier must appear in your text exactly as written. Do not \
add anything the memories do not say. Answer with a JSON object only."""

MERGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["content"],
    "properties": {"content": {"type": "string"}},
}


def _day(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")


def rule_merge(sources: list[MemoryRecord]) -> str:
    """The sources' texts in time order, repeats dropped, each prefixed with its day when the
    sources span more than one day."""
    ordered = sorted(sources, key=lambda r: (r.created_at, r.id))
    dated = len({_day(r.created_at) for r in ordered}) > 1
    seen: set[str] = set()
    parts: list[str] = []
    for r in ordered:
        key = normalise_text(r.content)
        if key in seen:
            continue
        seen.add(key)
        text = r.content.strip()
        if text and text[-1] not in ".!?。！？":
            text += "."
        parts.append(f"({_day(r.created_at)}) {text}" if dated else text)
    return " ".join(parts)


def missing_specifics(sources: list[MemoryRecord], merged: str) -> list[str]:
    """The specifics of the sources (numbers, dates, identifiers, names) ``merged`` lacks."""
    have = extract(merged)
    missing: list[str] = []
    for r in sources:
        s = extract(r.content)
        missing += [v for v in s.numbers if v not in have.numbers]
        missing += [v for v in s.dates if v not in have.dates]
        missing += [v for v in s.identifiers if v not in have.identifiers]
        missing += [n for n in s.latin_names if n not in have.latin_words]
        missing += [n for n in s.cjk_names if n not in merged]
    return sorted(set(missing))


def clusters(
    similarity: np.ndarray[Any, Any], created: list[float], pol: ConsolidationPolicy
) -> list[list[int]]:
    """Greedy clusters over a calibrated similarity matrix: each unassigned memory, oldest first,
    seeds a cluster of its most similar unassigned neighbours (see the module doc)."""
    n = len(created)
    taken = np.zeros(n, dtype=bool)
    out: list[list[int]] = []
    low = pol.cluster_threshold - pol.link_slack
    for seed in sorted(range(n), key=lambda i: created[i]):
        if taken[seed]:
            continue
        row = similarity[seed]
        order = [
            int(j) for j in np.argsort(-row) if j != seed and not taken[j] and row[j] >= pol.cluster_threshold
        ]
        members = [seed]
        for j in order:
            if len(members) >= pol.max_cluster:
                break
            if all(similarity[j, m] >= low for m in members):
                members.append(j)
        if len(members) >= pol.min_cluster:
            taken[members] = True
            out.append(members)
    return out


class Consolidator:
    """Runs consolidation for a :class:`MemoryService`'s collections."""

    def __init__(
        self, memory: MemoryService, llm: Llm | None, policy: ConsolidationPolicy | None = None
    ) -> None:
        self._memory = memory
        self._llm = llm
        self.policy = policy or ConsolidationPolicy()
        self._running: dict[str, asyncio.Lock] = {}

    async def run(
        self, collection: str = "", *, dry_run: bool = False, force: bool = False
    ) -> ConsolidationReport:
        v = Violations()
        name = collection or self._memory.policy.default_collection
        check_collection(v, "collection", name)
        v.raise_if_any()
        lock = self._running.setdefault(name, asyncio.Lock())
        if lock.locked():
            return ConsolidationReport(
                ConsolidationOutcome.THROTTLED, f"a consolidation of {name!r} is running right now"
            )
        async with lock:
            return await self._run_locked(name, dry_run=dry_run, force=force)

    async def _run_locked(self, name: str, *, dry_run: bool, force: bool) -> ConsolidationReport:
        pol, mem = self.policy, self._memory
        store, now = mem.store, mem.now()
        state = await store.get_state(_state_key(name)) or {}
        last = _float_or_none(state.get("last_run_at"))
        runs = sorted(
            t for t in (_float_or_none(x) for x in state.get("runs", [])) if t is not None and t > now - DAY
        )
        if not force and last is not None:
            if now < last + pol.min_interval_seconds:
                after = last + pol.min_interval_seconds
                return ConsolidationReport(
                    ConsolidationOutcome.THROTTLED,
                    f"the last consolidation ran at {_iso(last)}; the minimum interval is "
                    f"{pol.min_interval_seconds / 3600:g} h, so the next run is allowed at {_iso(after)}",
                    after,
                )
            written = mem.last_write_at.get(name)
            if written is not None and written <= last:
                return ConsolidationReport(
                    ConsolidationOutcome.THROTTLED,
                    f"nothing was written to {name!r} since the last consolidation at {_iso(last)}",
                )
        if len(runs) >= pol.daily_cap:
            after = runs[0] + DAY
            return ConsolidationReport(
                ConsolidationOutcome.THROTTLED,
                f"{len(runs)} consolidations ran in the last 24 h (cap {pol.daily_cap}); "
                f"the next run is allowed at {_iso(after)}",
                after,
            )
        if await mem.existing_spec(name) is None:
            return ConsolidationReport(ConsolidationOutcome.NOTHING_TO_MERGE, f"collection {name!r} is empty")
        before = await store.count(name, StoreFilter(live_at=now))
        events = await self._events(name, now)
        points = await self._vectors(name, events)
        records = [p[0] for p in points]
        groups: list[list[int]] = []
        if len(points) >= pol.min_cluster:
            matrix = np.stack([p[1] for p in points])
            sim = mem.calibration.similarity_array(matrix @ matrix.T)
            groups = clusters(sim, [r.created_at for r in records], pol)
        base = {"candidates": len(records), "memories_before": before}
        if not groups:
            if not dry_run:
                await self._record_run(name, state, runs, now)
            return ConsolidationReport(
                ConsolidationOutcome.NOTHING_TO_MERGE,
                f"no cluster of {pol.min_cluster} or more related event memories among {len(records)}",
                memories_after=before,
                **base,  # type: ignore[arg-type]
            )
        merges: list[tuple[Merge, Vector | None]] = []
        limit = mem.policy.limits.max_content_chars
        for group in groups:
            sources = sorted((records[i] for i in group), key=lambda r: (r.created_at, r.id))
            while len(sources) >= pol.min_cluster and len(rule_merge(sources)) > limit:
                sources = sources[:-1]
            if len(sources) < pol.min_cluster:
                continue
            content, merged_by = rule_merge(sources), "rules"
            if not dry_run and self._llm is not None:
                written_by_llm = await self._llm_merge(sources, limit)
                if written_by_llm is not None:
                    content, merged_by = written_by_llm, "llm"
            merges.append(
                (
                    Merge(self._insight(name, sources, content, merged_by, now), tuple(sources), merged_by),
                    None,
                )
            )
        if dry_run:
            return ConsolidationReport(
                ConsolidationOutcome.WOULD_RUN,
                f"{len(merges)} clusters would be merged ({sum(len(m.sources) for m, _ in merges)} memories)",
                merges=tuple(m for m, _ in merges),
                memories_after=before,
                **base,
            )
        done = await self._write(name, [m for m, _ in merges])
        await self._record_run(name, state, runs, now)
        after = await store.count(name, StoreFilter(live_at=mem.now()))
        merged = sum(len(m.sources) for m in done)
        return ConsolidationReport(
            ConsolidationOutcome.COMPLETED if done else ConsolidationOutcome.NOTHING_TO_MERGE,
            f"{len(done)} insights written from {merged} event memories, now their history",
            merges=tuple(done),
            memories_after=after,
            **base,
        )

    async def _events(self, name: str, now: float) -> list[MemoryRecord]:
        out: list[MemoryRecord] = []
        offset: str | None = None
        while True:
            page, offset = await self._memory.store.scroll(
                name, StoreFilter(types=(MemoryType.EVENT,), live_at=now), 512, offset
            )
            out.extend(page)
            if offset is None:
                break
        out.sort(key=lambda r: -r.created_at)
        return out[: self.policy.max_candidates]

    async def _vectors(self, name: str, records: list[MemoryRecord]) -> list[tuple[MemoryRecord, Vector]]:
        out: list[tuple[MemoryRecord, Vector]] = []
        for start in range(0, len(records), 256):
            ids = [r.id for r in records[start : start + 256]]
            for p in await self._memory.store.retrieve(name, ids, with_vectors=True):
                if p.vector is not None:
                    out.append((p.record, np.asarray(p.vector, dtype=np.float32)))
        out.sort(key=lambda x: (x[0].created_at, x[0].id))
        return out

    async def _llm_merge(self, sources: list[MemoryRecord], limit: int) -> str | None:
        llm = self._llm
        assert llm is not None
        prompt = "Memories:\n" + "\n".join(
            f"[{i}] ({_day(r.created_at)}) {r.content}" for i, r in enumerate(sources, start=1)
        )
        try:
            result = await llm.complete_json(
                system=MERGE_SYSTEM_PROMPT,
                user=prompt,
                schema=MERGE_SCHEMA,
                schema_name="consolidated_memory",
            )
        except (LlmUnavailable, LlmInvalidOutput) as exc:
            log.warning("consolidation LLM unavailable, rule-based merge: %s", exc)
            return None
        content = result.data.get("content")
        if not isinstance(content, str) or not content.strip() or len(content) > limit:
            return None
        missing = missing_specifics(sources, content)
        if missing:
            log.info("consolidation LLM dropped specifics %s; rule-based merge used", missing[:5])
            return None
        return content.strip()

    def _insight(
        self, name: str, sources: list[MemoryRecord], content: str, merged_by: str, now: float
    ) -> MemoryRecord:
        tags = tuple(dict.fromkeys((CONSOLIDATION_TAG, *(t for r in sources for t in r.tags))))[
            : self._memory.policy.limits.max_tags
        ]
        importance = max(r.importance for r in sources)
        created = max(r.created_at for r in sources)
        return MemoryRecord(
            id=str(uuid.uuid4()),
            collection=name,
            content=content,
            type=MemoryType.INSIGHT,
            importance=importance,
            tags=tags,
            source=Source.SYSTEM,
            source_type=SourceType.REFLECTION,
            source_type_history=(SourceType.REFLECTION,),
            metadata={"consolidated_from": str(len(sources)), "merged_by": merged_by},
            created_at=created,
            updated_at=now,
            valid_until=compute_valid_until(MemoryType.INSIGHT, importance, tags, created),
            access_count=sum(r.access_count for r in sources),
            derived_from=tuple(r.id for r in sources),
        )

    async def _write(self, name: str, merges: list[Merge]) -> list[Merge]:
        mem = self._memory
        vectors = await mem.embedder.embed_documents([m.insight.content for m in merges])
        async with mem.lock(name):
            # Only clusters whose sources are all still current (an update or delete meanwhile
            # leaves that cluster alone).
            ids = [r.id for m in merges for r in m.sources]
            current = {
                p.record.id: p.record
                for p in await mem.store.retrieve(name, ids)
                if p.record.superseded_by is None and not p.record.expired(mem.now())
            }
            kept = [
                (m, vec)
                for m, vec in zip(merges, vectors, strict=True)
                if all(r.id in current and current[r.id].version == r.version for r in m.sources)
            ]
            if not kept:
                return []
            points: list[StoredPoint] = [stored_point(m.insight, vec) for m, vec in kept]
            await mem.write_points(name, points)
            await mem.store.set_fields(
                name, {r.id: {"superseded_by": m.insight.id} for m, _ in kept for r in m.sources}
            )
        return [
            replace(m, sources=tuple(replace(r, superseded_by=m.insight.id) for r in m.sources))
            for m, _ in kept
        ]

    async def _record_run(self, name: str, state: dict[str, Any], runs: list[float], now: float) -> None:
        await self._memory.store.put_state(
            _state_key(name), {**state, "last_run_at": now, "runs": [*runs, now]}
        )

    async def run_due(self) -> dict[str, ConsolidationReport]:
        """For periodic consolidation: every collection written to since its last run."""
        out: dict[str, ConsolidationReport] = {}
        for name, written in sorted(self._memory.last_write_at.items()):
            state = await self._memory.store.get_state(_state_key(name)) or {}
            last = _float_or_none(state.get("last_run_at"))
            if last is not None and written <= last:
                continue
            out[name] = await self.run(name)
        return out


def _state_key(collection: str) -> str:
    return f"consolidation.{collection}"


def _float_or_none(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


__all__ = [
    "CONSOLIDATION_TAG",
    "ConsolidationOutcome",
    "ConsolidationPolicy",
    "ConsolidationReport",
    "Consolidator",
    "Merge",
    "clusters",
    "missing_specifics",
    "rule_merge",
]
