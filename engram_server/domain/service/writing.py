"""Adding memories: validation, the write gate (exact and near duplicates, specifics),
idempotent replays and provenance."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import unicodedata
import uuid
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from opentelemetry import metrics

from engram_server.domain.deadline import ensure_time_left, time_left
from engram_server.domain.errors import (
    IdempotencyConflict,
    InvalidArgument,
    LlmInvalidOutput,
    LlmUnavailable,
)
from engram_server.domain.gate import (
    JUDGE_SCHEMA,
    JUDGE_SYSTEM_PROMPT,
    decide,
    judge_prompt,
    parse_restatement,
    replayed_gate,
    undecided,
)
from engram_server.domain.model import (
    NEVER,
    MemoryRecord,
    ScoredPoint,
    SourceType,
    StoreFilter,
    Vector,
)
from engram_server.domain.service.commands import (
    MAX_LISTED_VIOLATIONS,
    MAX_PROVENANCE_HISTORY,
    AddCommand,
    AddOutcome,
    AddResult,
    GateReason,
    Similar,
    _AddItem,
)
from engram_server.domain.service.core import _query_span, _tracer, stored_point
from engram_server.domain.service.superseding import Superseding
from engram_server.domain.text import script_of
from engram_server.domain.ttl import compute_valid_until
from engram_server.domain.validation import (
    Violations,
    check_content,
    check_importance,
    check_metadata,
    check_request_id,
    check_session_id,
    normalise_tags,
)

_meter = metrics.get_meter("engram_server.domain")
#: The script tags (payload "script") the write gate's second query asks for, by the new text's script.
_OTHER_SCRIPT: dict[str, tuple[str, ...]] = {"cjk": ("latin", "latin+cjk"), "latin": ("cjk", "cjk+latin")}
log = logging.getLogger(__name__)
#: The gate's LLM judge is not asked with less than this left before the caller's deadline, and its
#: call ends this much before it (:meth:`Writing._judged`): time for the write itself.
_JUDGE_MIN_SECONDS = 1.0
_JUDGE_MARGIN_SECONDS = 0.5
_gate_judged = _meter.create_counter(
    "engram.gate.judged",
    unit="{call}",
    description="Calls to the write gate's LLM judge (ENGRAM_GATE_LLM), by collection and verdict "
    "(same, different, failed, skipped).",
)
_gate_outcomes = _meter.create_counter(
    "engram.gate.outcomes",
    unit="{memory}",
    description="Write-gate decisions, by collection and outcome (created, duplicate, near_duplicate, "
    "allowed_duplicate).",
)


def with_provenance(existing: MemoryRecord, source_type: SourceType) -> MemoryRecord:
    """A duplicate from another provenance is remembered, and the most trusted wins.
    Returns ``existing`` itself when the provenance is already known."""
    if source_type in existing.source_type_history:
        return existing
    history = (*existing.source_type_history, source_type)[-MAX_PROVENANCE_HISTORY:]
    primary = min((existing.source_type, source_type), key=lambda s: s.trust_rank)
    return replace(existing, source_type_history=history, source_type=primary)


def _request_hash(cmd: AddCommand, collection: str, importance: int, tags: tuple[str, ...]) -> str:
    body = json.dumps(
        [
            collection,
            cmd.content,
            cmd.type.value,
            importance,
            list(tags),
            cmd.source.value,
            cmd.source_type.value,
            sorted(cmd.metadata.items()),
            cmd.created_at,
            cmd.valid_until,
            *(["allow_duplicate"] if cmd.allow_duplicate else []),  # absent when False: old hashes hold
            *([["session", cmd.session_id, cmd.agent_id]] if cmd.session_id or cmd.agent_id else []),
            *([f"contradictions:{cmd.contradictions.value}"] if cmd.contradictions else []),
        ],
        ensure_ascii=False,
    )
    return hashlib.sha256(body.encode()).hexdigest()


_EDGE_PUNCTUATION = " \t\r\n.,;:!?…。，；：！？、\"'`“”‘’()[]{}（）【】-—~*_"


def normalise_text(text: str) -> str:
    """The form two texts share when they differ only in Unicode width, case, white space or
    surrounding punctuation ("I live in Berlin." == "i live in  berlin")."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(folded.split()).strip(_EDGE_PUNCTUATION)


class Writing(Superseding):
    """Add and add-many, with the write gate."""

    # ------------------------------------------------------------ add

    async def add(self, cmd: AddCommand) -> AddResult:
        v = Violations()
        collection = self._resolve(v, "collection", cmd.collection)
        item = self._check_add(v, "", cmd, collection, self._clock.now())
        v.raise_if_any()
        return (await self._add_items(collection, [item]))[0]

    async def add_many(self, collection: str, cmds: Sequence[AddCommand]) -> list[AddResult]:
        """Add several memories to one collection: one result per command, in order.

        Every command is validated first (a violation refuses the whole call, fields named
        ``memories[i].<field>``); then the batch goes through the same path as :meth:`add`: one
        embedding call, the write gate per item against the collection and the earlier items of
        the batch, one upsert. ``cmds[i].collection`` is ignored: ``collection`` applies to all.
        """
        self.check_batch_size(len(cmds))
        v = Violations()
        name = self._resolve(v, "collection", collection)
        now = self._clock.now()
        items: list[_AddItem] = []
        first_use: dict[str, int] = {}
        for i, cmd in enumerate(cmds):
            items.append(self._check_add(v, f"memories[{i}].", cmd, name, now))
            if cmd.request_id:
                first = first_use.setdefault(cmd.request_id, i)
                if first != i:
                    v.add(f"memories[{i}].request_id", f"repeats memories[{first}].request_id")
        v.raise_if_any(max_listed=MAX_LISTED_VIOLATIONS)
        return await self._add_items(name, items)

    def check_batch_size(self, count: int) -> None:
        """Refuse a batch of ``count`` memories unless 1 ≤ count ≤ the limit (InvalidArgument on
        ``memories``): checked before anything else, so an oversized batch is not examined."""
        limit = self.policy.limits.max_batch_items
        if count < 1:
            raise InvalidArgument.of("memories", "must hold at least one memory")
        if count > limit:
            raise InvalidArgument.of("memories", f"at most {limit} memories per call (got {count})")

    def _check_add(
        self, v: Violations, prefix: str, cmd: AddCommand, collection: str, now: float
    ) -> _AddItem:
        """Validate one add (fields named ``<prefix><field>``) and apply its defaults. The privacy
        filter runs first: what is validated, hashed, embedded and stored is the filtered text."""
        pol = self.policy
        cmd, emptied = self._private(cmd)
        if emptied:
            v.add(f"{prefix}content", "nothing is left once the privacy filter removed its private parts")
        else:
            check_content(v, f"{prefix}content", cmd.content, pol.limits)
        importance = 5 if cmd.importance is None else cmd.importance
        check_importance(v, f"{prefix}importance", importance)
        tags = normalise_tags(v, f"{prefix}tags", cmd.tags, pol.limits)
        check_metadata(v, f"{prefix}metadata", cmd.metadata, pol.limits)
        check_request_id(v, f"{prefix}request_id", cmd.request_id, pol.limits)
        check_session_id(v, f"{prefix}session_id", cmd.session_id)
        check_session_id(v, f"{prefix}agent_id", cmd.agent_id)
        created_at = now if cmd.created_at is None else cmd.created_at
        if cmd.created_at is not None and cmd.created_at > now + pol.limits.future_skew_seconds:
            v.add(f"{prefix}created_at", "must not be in the future")
        elif cmd.created_at is not None and cmd.created_at < 0:
            v.add(f"{prefix}created_at", "must not be before 1970-01-01")
        if cmd.valid_until is not None:
            if cmd.valid_until > NEVER:
                v.add(f"{prefix}valid_until", "must not be after 9999-12-31")
            elif cmd.valid_until <= now:
                v.add(f"{prefix}valid_until", "must be in the future")
            elif cmd.valid_until <= created_at:
                v.add(f"{prefix}valid_until", "must be after created_at")
        request_hash = _request_hash(cmd, collection, importance, tags) if cmd.request_id else None
        return _AddItem(cmd, importance, tags, created_at, request_hash)

    def _private(self, cmd: AddCommand) -> tuple[AddCommand, bool]:
        """``cmd`` with the privacy filter applied to its content and metadata values, and whether
        that left no content at all."""
        content = self.policy.privacy.redact(cmd.content)
        metadata, kinds = self.policy.privacy.redact_mapping(cmd.metadata)
        if not content.changed and not kinds:
            return cmd, False
        emptied = content.changed and not content.text.strip()
        return replace(cmd, content=content.text, metadata=metadata), emptied

    async def _add_items(self, collection: str, items: Sequence[_AddItem]) -> list[AddResult]:
        """The write path of :meth:`add` and :meth:`add_many` (validated items, one collection).

        Embeds every content in one call (before taking the collection lock: the model is the slow
        part); then, under the lock, answers each item in order — a replay of its request_id, a
        duplicate of a live memory or of an earlier item of the batch, or a new memory — and
        writes once at the end: one upsert of the new memories, one update of the provenance of
        existing memories that duplicates promoted. Nothing is written past the caller's deadline.
        """
        pol = self.policy
        vectors = await self._embed([item.cmd.content for item in items])
        await self._ensure(collection)
        # The per-process lock first, then the store's lease (exclusive across replicas sharing a
        # Qdrant server; a no-op on the embedded store): the gate sees every earlier write.
        async with self._lock(collection), self._store.write_lease(collection):
            now = self._clock.now()
            # Two storage round trips for the whole batch (nothing is written until the end):
            # the earlier uses of its request_ids, then the gate's query for every other item.
            used = await self._used_request_ids(collection, [item.cmd.request_id for item in items])
            fresh = [i for i, item in enumerate(items) if item.cmd.request_id not in used]
            stored = await self._gate_hits(
                collection, vectors[fresh], now, [items[i].cmd.content for i in fresh]
            )
            gate_hits = dict(zip(fresh, stored, strict=True))
            results: list[AddResult] = []
            new: dict[str, tuple[int, MemoryRecord, Vector]] = {}  # id -> (item index, ...), in order
            promoted: dict[str, MemoryRecord] = {}  # existing memories whose provenance changed
            superseded: dict[str, str] = {}  # stored memory id -> id of the new memory superseding it
            for index, (item, vector) in enumerate(zip(items, vectors, strict=True)):
                cmd = item.cmd
                if cmd.request_id in used:
                    results.append(
                        await self._replay(
                            collection, used[cmd.request_id], item.request_hash, cmd.allow_duplicate
                        )
                    )
                    continue
                earlier = [(record, vec) for _, record, vec in new.values()]
                allow = cmd.allow_duplicate
                similar, top = self._gate(
                    collection, gate_hits[index], vector, cmd.content, earlier, allow_duplicate=allow
                )
                if top is None and not allow and self.gate_llm is not None:
                    similar, top = await self._judged(collection, cmd.content, similar)
                if top is not None and not allow:
                    near = tuple(
                        s for s in similar if s is not top and s.similarity >= pol.near_duplicate_threshold
                    )[: pol.max_near_duplicates]
                    in_batch = new.get(top.record.id)
                    if in_batch is not None:  # a copy of an earlier item: merge into its pending write
                        first, pending, vec = in_batch
                        existing = with_provenance(pending, cmd.source_type)
                        new[existing.id] = (first, existing, vec)
                    else:
                        base = promoted.get(top.record.id, top.record)
                        existing = with_provenance(base, cmd.source_type)
                        if existing is not base:
                            promoted[existing.id] = existing
                    results.append(
                        AddResult(
                            existing,
                            AddOutcome.DUPLICATE,
                            top.similarity,
                            near,
                            duplicate_of=None if in_batch is None else in_batch[0],
                            reason=top.reason,
                        )
                    )
                    continue
                near = tuple(s for s in similar if s.similarity >= pol.near_duplicate_threshold or s is top)[
                    : pol.max_near_duplicates
                ]
                record = self._new_record(collection, item, near, now)
                found = await self._contradictions(cmd, record, similar)
                for c in found:
                    if not c.superseded:
                        continue
                    waiting = new.get(c.record.id)
                    if waiting is not None:  # an earlier item of this batch: supersede before writing
                        at, earlier_record, vec = waiting
                        new[c.record.id] = (at, replace(earlier_record, superseded_by=record.id), vec)
                    else:
                        superseded[c.record.id] = record.id
                new[record.id] = (index, record, vector)
                if top is not None:
                    reason = GateReason.ALLOW_DUPLICATE
                elif similar and similar[0].similarity > pol.dedup_threshold:
                    reason = GateReason.CONFLICTING_SPECIFICS  # above the threshold, yet a different fact
                else:
                    reason = GateReason.NONE
                results.append(
                    AddResult(record, AddOutcome.CREATED, 0.0, near, reason=reason, contradictions=found)
                )
            if promoted:
                ensure_time_left()
                await self._store.set_fields(
                    collection,
                    {
                        r.id: {
                            "source_type_history": [s.value for s in r.source_type_history],
                            "source_type": r.source_type.value,
                        }
                        for r in promoted.values()
                    },
                )
            if new:
                await self._upsert(collection, [stored_point(r, vec) for _, r, vec in new.values()])
                self.last_write_at[collection] = now
            if superseded:  # after the new memories exist: a superseded memory always has a successor
                await self._store.set_fields(
                    collection, {old: {"superseded_by": by} for old, by in superseded.items()}
                )
        for _, r, _ in new.values():
            if r.session_id is not None:
                await self.sessions.seen(r.agent_id or "", r.session_id, r.created_at)
        return results

    def _new_record(
        self, collection: str, item: _AddItem, near: Sequence[Similar], now: float
    ) -> MemoryRecord:
        """The record a new memory is stored as (TTL from type, importance and tags)."""
        cmd = item.cmd
        return MemoryRecord(
            id=str(uuid.uuid4()),
            collection=collection,
            content=cmd.content,
            type=cmd.type,
            importance=item.importance,
            tags=item.tags,
            source=cmd.source,
            source_type=cmd.source_type,
            source_type_history=(cmd.source_type,),
            metadata=dict(cmd.metadata),
            created_at=item.created_at,
            updated_at=now,
            valid_until=compute_valid_until(
                cmd.type, item.importance, item.tags, item.created_at, cmd.valid_until
            ),
            request_id=cmd.request_id or None,
            request_hash=item.request_hash,
            near_duplicates=tuple((s.record.id, round(s.similarity, 6)) for s in near),
            session_id=cmd.session_id or None,
            agent_id=cmd.agent_id or None,
        )

    async def _gate_hits(
        self, collection: str, vectors: Vector, now: float, contents: Sequence[str] = ()
    ) -> list[list[ScoredPoint]]:
        """The write gate's storage query for each row of ``vectors``: the nearest live memories
        (one round trip for a whole batch).

        With ``contents`` (the texts of the rows) and translations gated, also the nearest live
        memories in the other script (one more round trip per script): in a large collection the
        memories in the same language crowd a translation out of the nearest ``gate_candidates``.
        """
        if not len(vectors):
            return []
        limit = self.policy.gate_candidates
        with _query_span(collection, limit, lexical=False) as span:
            span.set_attribute("db.operation.batch.size", len(vectors))
            hits = await self._store.search_batch(collection, vectors, limit, StoreFilter(live_at=now))
            if contents and self.policy.gate_translations and self.policy.translation_candidates:
                by_script: dict[str, list[int]] = {}
                for i, text in enumerate(contents):
                    script = script_of(text)
                    if script in _OTHER_SCRIPT:
                        by_script.setdefault(script, []).append(i)
                for script, rows in by_script.items():
                    flt = StoreFilter(live_at=now, scripts=_OTHER_SCRIPT[script])
                    extra = await self._store.search_batch(
                        collection, vectors[rows], self.policy.translation_candidates, flt
                    )
                    for i, found in zip(rows, extra, strict=True):
                        seen = {h.record.id for h in hits[i]}
                        hits[i] = [*hits[i], *(h for h in found if h.record.id not in seen)]
            span.set_attribute("db.response.returned_rows", sum(len(h) for h in hits))
            return hits

    def _gate(
        self,
        collection: str,
        hits: Sequence[ScoredPoint],
        vector: Vector,
        content: str,
        earlier: Sequence[tuple[MemoryRecord, Vector]] = (),
        *,
        allow_duplicate: bool = False,
    ) -> tuple[list[Similar], Similar | None]:
        """The write gate's check: the nearest live memories, most similar first, calibrated, and the
        one ``content`` duplicates (None when it duplicates none).

        ``hits`` are the stored candidates (:meth:`_gate_hits`); ``earlier`` are the memories an
        earlier item of the same batch is about to write: they are candidates like the stored ones
        (compared by the cosine of their vectors).

        A candidate whose text equals ``content`` once normalised (Unicode NFKC, case, white space,
        surrounding punctuation) is an exact copy whatever the embedding says: similarity 1.0.

        The rules (specifics, restatements, translations, the near zone) are
        :func:`engram_server.domain.gate.decide`'s, which a replayed request applies too.
        """
        pol = self.policy
        key = normalise_text(content)
        with _tracer.start_as_current_span(
            "engram.gate", attributes={"engram.collection": collection}
        ) as span:
            scored = [(h.record, h.score) for h in hits]
            if earlier:  # unit vectors: the dot product is the cosine
                cosines = np.stack([vec for _, vec in earlier]) @ vector
                scored.extend((record, float(c)) for (record, _), c in zip(earlier, cosines, strict=True))
            candidates = [
                Similar(record, 1.0 if normalise_text(record.content) == key else self._cal.similarity(raw))
                for record, raw in scored
            ]
            decision = decide(content, candidates, pol, allow_duplicate=allow_duplicate)
            similar, top = list(decision.near), decision.duplicate
            best = similar[0].similarity if similar else 0.0
            if top is not None:
                outcome = "allowed_duplicate" if allow_duplicate else "duplicate"
            elif best >= pol.near_duplicate_threshold:
                outcome = "near_duplicate"
            else:
                outcome = "created"
            span.set_attribute("engram.gate.similarity", best)
            span.set_attribute("engram.gate.outcome", outcome)
            _gate_outcomes.add(1, {"engram.collection": collection, "engram.gate.outcome": outcome})
            return similar, top

    async def _judged(
        self, collection: str, content: str, similar: list[Similar]
    ) -> tuple[list[Similar], Similar | None]:
        """The gate's candidates and the duplicate after the LLM judge (``gate_llm``) looked at the
        ones the rules left undecided (:func:`~engram_server.domain.gate.undecided`): the one it
        says ``content`` restates becomes the duplicate, ``JUDGED_SAME``. No call when none is
        undecided; on failure (endpoint down, invalid answer) the rules' answer stands. The call
        ends before the caller's deadline (less a margin for the write), and is not made with less
        than :data:`_JUDGE_MIN_SECONDS` left: the memory is written by the rules' answer instead."""
        llm = self.gate_llm
        assert llm is not None
        asked = undecided(content, similar, self.policy)
        if not asked:
            return similar, None
        left = time_left()
        if left is not None and left < _JUDGE_MIN_SECONDS:
            _gate_judged.add(1, {"engram.collection": collection, "engram.gate.judged": "skipped"})
            return similar, None  # no time to ask: the caller's write comes first
        try:
            result = await asyncio.wait_for(
                llm.complete_json(
                    system=JUDGE_SYSTEM_PROMPT,
                    user=judge_prompt(content, [s.record.content for s in asked]),
                    schema=JUDGE_SCHEMA,
                    schema_name="restatement",
                ),
                None if left is None else left - _JUDGE_MARGIN_SECONDS,
            )
        except (LlmUnavailable, LlmInvalidOutput, TimeoutError) as exc:
            log.warning("gate judge unavailable, rules only: %s", exc or exc.__class__.__name__)
            _gate_judged.add(1, {"engram.collection": collection, "engram.gate.judged": "failed"})
            return similar, None
        found = parse_restatement(result.data, len(asked))
        verdict = "different" if found is None else "same"
        _gate_judged.add(1, {"engram.collection": collection, "engram.gate.judged": verdict})
        if found is None:
            return similar, None
        top = replace(asked[found], reason=GateReason.JUDGED_SAME)
        return [top if s is asked[found] else s for s in similar], top

    async def _used_request_ids(
        self, collection: str, request_ids: Sequence[str | None]
    ) -> dict[str, MemoryRecord]:
        """The memories created earlier with any of ``request_ids``, by request_id (one query), also
        those superseded since or in the trash: a replay must not write the memory again."""
        wanted = tuple(dict.fromkeys(r for r in request_ids if r))
        if not wanted:
            return {}
        flt = StoreFilter(request_ids=wanted, include_history=True, include_trashed=True)
        records, _ = await self._store.scroll(collection, flt, limit=len(wanted))
        return {r.request_id: r for r in records if r.request_id}

    async def _replay(
        self, collection: str, first: MemoryRecord, request_hash: str | None, allow_duplicate: bool = False
    ) -> AddResult:
        """The answer to a repeated request_id: the memory it created, with the near duplicates and
        the gate's reasons the first answer gave (:func:`replayed_gate`), or a conflict if the
        request differs or the memory was deleted since (to the trash: restoring it is the caller's
        call, and writing it again would silently undo the delete). A memory superseded since is
        answered as it is (``superseded_by`` names its successor)."""
        if first.request_hash != request_hash:
            raise IdempotencyConflict(
                f"request_id {first.request_id!r} was already used for a different request",
                metadata={"request_id": first.request_id or "", "memory_id": first.id},
            )
        if first.trashed_at is not None:
            raise IdempotencyConflict(
                f"request_id {first.request_id!r} created memory {first.id}, which was deleted to the "
                "trash since: RestoreMemory it, or add it again with a new request_id",
                metadata={"request_id": first.request_id or "", "memory_id": first.id, "in_trash": "true"},
            )
        near_ids = [i for i, _ in first.near_duplicates]
        found = {p.record.id: p.record for p in await self._store.retrieve(collection, near_ids)}
        near = tuple(Similar(found[i], s) for i, s in first.near_duplicates if i in found)
        near, reason = replayed_gate(first.content, near, self.policy, allow_duplicate=allow_duplicate)
        return AddResult(first, AddOutcome.CREATED, 0.0, near, replayed=True, reason=reason)
