"""Changing and reading single memories: locate, update (versioned), delete (protected), get,
history and list (page tokens)."""

from __future__ import annotations

import base64
import json
import math
import uuid
from collections.abc import Sequence
from dataclasses import replace

from engram_server.domain.deadline import ensure_time_left
from engram_server.domain.errors import (
    AmbiguousMatch,
    CollectionNotFound,
    FieldViolation,
    InvalidArgument,
    MemoryNotFound,
    MemorySuperseded,
    NoMatch,
    ProtectedMemory,
    ThresholdTooLow,
)
from engram_server.domain.model import (
    NEVER,
    PROTECTED_TYPES,
    MemoryRecord,
    StoreFilter,
    Vector,
    cosine,
)
from engram_server.domain.service.commands import (
    DeleteCommand,
    DeleteResult,
    Locator,
    SearchFilter,
    UpdateCommand,
    UpdateResult,
)
from engram_server.domain.service.core import ServiceCore, stored_point
from engram_server.domain.text import cross_script, reads_as_question, script_of
from engram_server.domain.ttl import compute_valid_until
from engram_server.domain.validation import (
    Violations,
    check_content,
    check_importance,
    check_metadata,
    normalise_tags,
)


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _encode_token(offset: str, collection: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([collection, offset]).encode()).decode()


def _decode_token(token: str, collection: str) -> str | None:
    try:
        name, offset = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, TypeError):
        return None
    if name != collection or not isinstance(offset, str):
        return None
    return offset


class Editing(ServiceCore):
    """Locate, update, delete, get, history and list."""

    # ------------------------------------------------------------ locate

    async def _get_live(self, collection: str, memory_id: str, fieldname: str = "id") -> MemoryRecord:
        if not _is_uuid(memory_id):
            raise InvalidArgument.of(fieldname, "must be a memory id (UUID)")
        spec = await self._existing(collection)
        if spec is None and collection != self.policy.default_collection:
            raise CollectionNotFound(
                f"collection {collection!r} does not exist", metadata={"collection": collection}
            )
        if spec is None:
            raise MemoryNotFound(
                f"memory {memory_id} not found in collection {collection!r}",
                metadata={"id": memory_id, "collection": collection},
            )
        found = await self._store.retrieve(collection, [memory_id])
        if not found or found[0].record.expired(self._clock.now()):
            raise MemoryNotFound(
                f"memory {memory_id} not found in collection {collection!r}",
                metadata={"id": memory_id, "collection": collection},
            )
        if found[0].record.trashed_at is not None:
            raise MemoryNotFound(
                f"memory {memory_id} is in the trash of collection {collection!r} "
                "(RestoreMemory puts it back)",
                metadata={"id": memory_id, "collection": collection, "trashed": "true"},
            )
        return found[0].record

    async def _locate(
        self, collection: str, loc: Locator, new_vec: Vector | None = None
    ) -> tuple[MemoryRecord, float]:
        """The single current memory closest to ``loc.content``, at or above the threshold. A
        locator that reads as a question is located as :meth:`_locate_by_question` says."""
        question = reads_as_question(loc.content)
        if await self._existing(collection) is None:
            raise NoMatch(
                f"collection {collection!r} has no memories",
                metadata={"collection": collection, "reading": "question" if question else "statement"},
            )
        if question:
            return await self._locate_by_question(collection, loc, new_vec)
        vec = (await self._embed([loc.content]))[0]
        hits = await self._query(collection, vec, 3, StoreFilter(live_at=self._clock.now()))
        sims = sorted(((self._cal.similarity(h.score), h.record) for h in hits), key=lambda x: -x[0])
        threshold = loc.threshold
        if not sims or sims[0][0] < threshold:
            best = f"{sims[0][0]:.3f}" if sims else "none"
            raise NoMatch(
                f"no memory matches at similarity ≥ {threshold:.2f} (best: {best})",
                metadata={"threshold": f"{threshold:.4f}", "best_similarity": best, "reading": "statement"},
            )
        if (
            len(sims) > 1
            and sims[1][0] >= threshold
            and sims[0][0] - sims[1][0] < self.policy.ambiguity_margin
        ):
            raise AmbiguousMatch(
                "more than one memory matches almost equally well; update by id instead",
                metadata={"candidates": ",".join(r.id for _, r in sims[:2]), "reading": "statement"},
            )
        return sims[0][1], sims[0][0]

    async def _locate_by_question(
        self, collection: str, loc: Locator, new_vec: Vector | None
    ) -> tuple[MemoryRecord, float]:
        """A question names what to change, not the text to change ("Where does Ana live now?"), so
        it is read as search reads it: embedded as a query, on the relevance scale, with the
        cross-script offset. The best memory must reach ``locate_question_min_relevance`` (or the
        caller's threshold, if higher), lead the runner-up by ``locate_question_margin``, and the new
        content must be about it (:meth:`_check_answer`): an answer replaces the memory it
        answers, never a neighbour. Otherwise NO_MATCH or AMBIGUOUS_MATCH,
        with ``reading: question`` in the error metadata. Returns the memory and its relevance."""
        pol = self.policy
        floor = pol.locate_question_min_relevance
        if loc.explicit:
            floor = max(floor, loc.threshold)
        vec = (await self._embed([loc.content], query=True))[0]
        hits = await self._query(collection, vec, 3, StoreFilter(live_at=self._clock.now()))
        qscript = script_of(loc.content)
        offsets = self._cross_script_offset
        rels = sorted(
            (
                (
                    self._cal.relevance(
                        h.score + offsets.get((qscript, cross_script(qscript, h.script)), 0.0)
                    ),
                    h.record,
                )
                for h in hits
            ),
            key=lambda x: -x[0],
        )
        meta = {"reading": "question", "min_relevance": f"{floor:.4f}"}
        if not rels or rels[0][0] < floor:
            best = f"{rels[0][0]:.3f}" if rels else "none"
            raise NoMatch(
                f"the question matches no memory at relevance ≥ {floor:.2f} (best: {best})",
                metadata=meta | {"best_relevance": best},
            )
        best_rel, found = rels[0]
        if len(rels) > 1 and best_rel - rels[1][0] < pol.locate_question_margin:
            raise AmbiguousMatch(
                f"the question fits more than one memory almost equally well (relevance {best_rel:.3f} "
                f"and {rels[1][0]:.3f}); update by id, or locate with the old text",
                metadata=meta
                | {
                    "candidates": ",".join(r.id for _, r in rels[:2]),
                    "best_relevance": f"{best_rel:.3f}",
                    "runner_up_relevance": f"{rels[1][0]:.3f}",
                    "margin": f"{pol.locate_question_margin:.4f}",
                },
            )
        if new_vec is not None:
            await self._check_answer(
                collection,
                found=found,
                best_rel=best_rel,
                candidates=[r for _, r in rels],
                new_vec=new_vec,
                meta=meta,
            )
        return found, best_rel

    async def _check_answer(
        self,
        collection: str,
        *,
        found: MemoryRecord,
        best_rel: float,
        candidates: list[MemoryRecord],
        new_vec: Vector,
        meta: dict[str, str],
    ) -> None:
        """The new content of an update located by a question must be about the memory found: on
        the same topic (calibrated similarity ≥ ``locate_question_topic_min``) and nearer to it
        than to the question's other candidates. An update changes the fact, so its content need
        not restate the old one ("Ana lives in Lisbon." → "Ana lives in Berlin."); an answer that
        is nearer to a neighbour ("Ana's brother lives in Berlin.") never replaces the memory found."""
        pol = self.policy
        stored = {
            s.record.id: s
            for s in await self._store.retrieve(collection, [r.id for r in candidates], with_vectors=True)
        }
        vectors: dict[str, Vector] = {}
        for r in candidates:
            point = stored.get(r.id)
            if point is not None and point.vector is not None:
                vectors[r.id] = point.vector
        missing = [r for r in candidates if r.id not in vectors]
        if missing:  # (a store that returned no vector: embed the text, as the gate would)
            texts = await self._embed([r.content for r in missing])
            vectors.update(zip((r.id for r in missing), texts, strict=True))
        sims = {r.id: self._cal.similarity(cosine(vectors[r.id], new_vec)) for r in candidates}
        restate = sims[found.id]
        nearest = max(candidates, key=lambda r: sims[r.id])
        if restate < pol.locate_question_topic_min or nearest.id != found.id:
            why = (
                f"the new content is not on its topic (similarity {restate:.3f} < "
                f"{pol.locate_question_topic_min:.2f})"
                if restate < pol.locate_question_topic_min
                else f"the new content is nearer to memory {nearest.id} (similarity {sims[nearest.id]:.3f} "
                f"against {restate:.3f})"
            )
            raise NoMatch(
                f"the question finds memory {found.id} (relevance {best_rel:.3f}), but {why}; "
                "update by id to replace it anyway",
                metadata=meta
                | {
                    "candidate": found.id,
                    "best_relevance": f"{best_rel:.3f}",
                    "restate_similarity": f"{restate:.3f}",
                    "restate_min": f"{pol.locate_question_topic_min:.4f}",
                    "nearest": nearest.id,
                    "nearest_similarity": f"{sims[nearest.id]:.3f}",
                },
            )

    def _locate_threshold(self, threshold: float, minimum: float, fieldname: str) -> float:
        if math.isnan(threshold) or threshold > 1.0:
            raise InvalidArgument.of(fieldname, "must be between 0 and 1")
        if threshold == 0.0:
            return self.policy.locate_min_threshold
        if threshold < minimum:
            message = f"{fieldname} {threshold:.2f} is below the minimum {minimum:.2f}"
            raise ThresholdTooLow(
                message,
                metadata={"min_threshold": f"{minimum:.2f}", "threshold": f"{threshold:.4f}"},
                violations=(FieldViolation(fieldname, f"must be at least {minimum:.2f}"),),
            )
        return threshold

    # ------------------------------------------------------------ update

    async def update(self, cmd: UpdateCommand) -> UpdateResult:
        pol = self.policy
        v = Violations()
        if cmd.content:  # the privacy filter, as on add: only filtered text is embedded and stored
            redacted = pol.privacy.redact(cmd.content)
            if redacted.changed and not redacted.text.strip():
                v.add("content", "nothing is left once the privacy filter removed its private parts")
            cmd = replace(cmd, content=redacted.text or cmd.content)
        if cmd.metadata is not None:
            cmd = replace(cmd, metadata=pol.privacy.redact_mapping(cmd.metadata)[0])
        collection = self._resolve(v, "collection", cmd.collection)
        if cmd.id is None and cmd.locate is None:
            v.add("target", "give either id or locate")
        if cmd.locate is not None:
            check_content(v, "locate.content", cmd.locate.content, pol.limits)
        if cmd.content:
            check_content(v, "content", cmd.content, pol.limits)
        if cmd.importance is not None:
            check_importance(v, "importance", cmd.importance)
        tags = normalise_tags(v, "tags", cmd.tags, pol.limits) if cmd.tags is not None else None
        if cmd.metadata is not None:
            check_metadata(v, "metadata", cmd.metadata, pol.limits)
        if cmd.valid_until is not None and cmd.valid_until <= self._clock.now():
            v.add("valid_until", "must be in the future")
        elif cmd.valid_until is not None and cmd.valid_until > NEVER:
            v.add("valid_until", "must not be after 9999-12-31")
        v.raise_if_any()
        threshold = 0.0
        if cmd.locate is not None:
            threshold = self._locate_threshold(
                cmd.locate.threshold, pol.locate_min_threshold, "locate.threshold"
            )

        new_vec = (await self._embed([cmd.content]))[0] if cmd.content else None
        async with self._lock(collection):
            similarity = 0.0
            if cmd.id is not None:
                current = await self._get_live(collection, cmd.id)
                if current.superseded_by is not None:
                    raise MemorySuperseded(
                        f"memory {current.id} is a history version; update {current.superseded_by} instead",
                        metadata={"superseded_by": current.superseded_by},
                    )
            else:
                assert cmd.locate is not None
                current, similarity = await self._locate(
                    collection,
                    Locator(cmd.locate.content, threshold, explicit=cmd.locate.threshold != 0.0),
                    new_vec,
                )
            now = self._clock.now()
            new_type = cmd.type if cmd.type is not None else current.type
            new_importance = cmd.importance if cmd.importance is not None else current.importance
            new_tags = tags if tags is not None else current.tags
            if cmd.valid_until is not None:
                valid_until = cmd.valid_until
            elif (new_type, new_importance, set(new_tags)) != (
                current.type,
                current.importance,
                set(current.tags),
            ):
                valid_until = compute_valid_until(new_type, new_importance, new_tags, current.created_at)
            else:
                valid_until = current.valid_until
            updated = replace(
                current,
                content=cmd.content or current.content,
                type=new_type,
                importance=new_importance,
                tags=new_tags,
                metadata=dict(cmd.metadata) if cmd.metadata is not None else current.metadata,
                valid_until=valid_until,
            )
            changed = updated != current
            if not changed or cmd.dry_run:
                return UpdateResult(updated, current, similarity, changed, cmd.dry_run)
            updated = replace(updated, version=current.version + 1, updated_at=now)
            old = (await self._store.retrieve(collection, [current.id], with_vectors=True))[0]
            history = replace(
                old.record,
                id=str(uuid.uuid4()),
                superseded_by=current.id,
                request_id=None,
                request_hash=None,
            )
            vector = new_vec if new_vec is not None else old.vector
            await self._upsert(collection, [stored_point(history, old.vector), stored_point(updated, vector)])
            self.last_write_at[collection] = now
            return UpdateResult(updated, history, similarity, True, False)

    # ------------------------------------------------------------ delete

    async def delete(self, cmd: DeleteCommand) -> DeleteResult:
        pol = self.policy
        v = Violations()
        collection = await self._resolve_held(v, "collection", cmd.collection)
        if (cmd.id is None) == (cmd.query is None):
            v.add("target", "give either id or query")
        limit = cmd.limit or 1
        if cmd.query is not None:
            check_content(v, "query.query", cmd.query, pol.limits)
            if not 1 <= limit <= pol.limits.max_delete_limit:
                v.add("query.limit", f"must be between 1 and {pol.limits.max_delete_limit}")
        v.raise_if_any()

        if cmd.id is not None:
            async with self._lock(collection):
                target = await self._get_live(collection, cmd.id)
                return await self._delete_records(collection, [target], cmd)

        assert cmd.query is not None
        minimum = pol.locate_min_threshold if limit > 1 else pol.delete_single_min_threshold
        threshold = self._locate_threshold(cmd.threshold, minimum, "query.threshold")
        if await self._existing(collection) is None:
            raise NoMatch(f"collection {collection!r} has no memories", metadata={"collection": collection})
        vec = (await self._embed([cmd.query]))[0]
        async with self._lock(collection):
            hits = await self._query(collection, vec, limit, StoreFilter(live_at=self._clock.now()))
            matches = [h.record for h in hits if self._cal.similarity(h.score) >= threshold]
            if not matches:
                best = f"{self._cal.similarity(hits[0].score):.3f}" if hits else "none"
                raise NoMatch(
                    f"no memory matches at similarity ≥ {threshold:.2f} (best: {best})",
                    metadata={"threshold": f"{threshold:.4f}", "best_similarity": best},
                )
            return await self._delete_records(collection, matches, cmd)

    async def _delete_records(
        self, collection: str, targets: Sequence[MemoryRecord], cmd: DeleteCommand
    ) -> DeleteResult:
        protected = [t for t in targets if t.type in PROTECTED_TYPES and t.superseded_by is None]
        if protected and not cmd.force:
            raise ProtectedMemory(
                f"{len(protected)} of the targets are {protected[0].type.value} memories, which are "
                "protected; set force to delete them",
                metadata={"ids": ",".join(t.id for t in protected), "type": protected[0].type.value},
            )
        if cmd.dry_run:
            return DeleteResult(tuple(targets), True)
        ensure_time_left()
        if self.policy.trash_retention_seconds <= 0:  # the trash is off: deletes are final
            await self._store.delete(collection, [t.id for t in targets])
            for t in targets:
                if t.superseded_by is None:
                    await self._store.delete_where(collection, StoreFilter(only_history_of=t.id))
            return DeleteResult(tuple(targets), False)
        now = self._clock.now()
        ids = [t.id for t in targets]
        for t in targets:
            if t.superseded_by is None:
                ids.extend(h.id for h in await self._history(collection, t.id))
        await self._store.set_fields(collection, {i: {"trashed_at": now} for i in ids})
        return DeleteResult(tuple(replace(t, trashed_at=now) for t in targets), False)

    # ------------------------------------------------------------ read

    async def get(
        self, collection: str, memory_id: str, include_history: bool
    ) -> tuple[MemoryRecord, list[MemoryRecord]]:
        v = Violations()
        name = self._resolve(v, "collection", collection)
        if not memory_id:
            v.add("id", "must not be empty")
        v.raise_if_any()
        record = await self._get_live(name, memory_id)
        history: list[MemoryRecord] = []
        if include_history and record.superseded_by is None:
            history = await self._history(name, record.id)
        return record, history

    async def _history(self, collection: str, memory_id: str) -> list[MemoryRecord]:
        out: list[MemoryRecord] = []
        offset: str | None = None
        while True:
            page, offset = await self._store.scroll(
                collection, StoreFilter(only_history_of=memory_id), 256, offset
            )
            out.extend(page)
            if offset is None:
                break
        return sorted(out, key=lambda r: r.version, reverse=True)

    async def list(
        self,
        collection: str,
        flt: SearchFilter,
        page_size: int,
        page_token: str,
        include_history: bool,
    ) -> tuple[list[MemoryRecord], str]:
        v = Violations()
        name = self._resolve(v, "collection", collection)
        size = page_size or 100
        if not 1 <= size <= self.policy.limits.max_page_size:
            v.add("page_size", f"must be between 1 and {self.policy.limits.max_page_size}")
        store_flt = self._check_filter(v, "filter", flt)
        offset: str | None = None
        if page_token:
            offset = _decode_token(page_token, name)
            if offset is None:
                v.add("page_token", "not a page token of this collection")
        v.raise_if_any()
        if await self._existing(name) is None:
            if collection and collection != self.policy.default_collection:
                raise CollectionNotFound(f"collection {name!r} does not exist", metadata={"collection": name})
            return [], ""  # the default collection exists implicitly (created by the first write)
        store_flt = replace(
            store_flt, live_at=self._clock.now(), include_history=include_history, include_drafts=True
        )
        records, nxt = await self._store.scroll(name, store_flt, size, offset)
        return records, _encode_token(nxt, name) if nxt is not None else ""

    def page_token_at(self, record: MemoryRecord) -> str:
        """A ``list`` page token that continues with ``record`` (one of the page it returned: the
        listing is in storage order, by id, and a token names the first id of its page). The
        gRPC edge ends a page early with it when the whole page would not fit in one message."""
        return _encode_token(record.id, record.collection)
