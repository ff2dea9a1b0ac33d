"""Export, import and backup: moving a store's memories in and out.

Export writes Engram's JSON Lines format (:mod:`engram_server.domain.portable`); import reads it
back keeping ids and timestamps, either as is (RESTORE) or through the write gate (MERGE);
backup copies the whole store behind a store-wide write barrier.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import NoReturn

import numpy as np

from engram_server.domain.errors import (
    CollectionNotFound,
    EmbeddingMismatch,
    EngramError,
    FieldViolation,
    InvalidArgument,
)
from engram_server.domain.model import (
    BackupStats,
    CollectionSpec,
    MemoryRecord,
    StoredPoint,
    StoreFilter,
    Vector,
)
from engram_server.domain.portable import (
    ExportedMemory,
    ExportHeader,
    LineError,
    header_line,
    memory_line,
    parse_line,
)
from engram_server.domain.service.commands import SearchFilter
from engram_server.domain.service.core import stored_point
from engram_server.domain.service.writing import Writing
from engram_server.domain.validation import Violations, check_collection

#: Memories read from storage (export) or written to it (import) per round trip.
PAGE = 256
#: Longest line an import accepts (a memory with a long history and vectors stays far below).
MAX_LINE_BYTES = 64 * 1024 * 1024


class ImportMode(StrEnum):
    RESTORE = "restore"
    MERGE = "merge"


class Reembed(StrEnum):
    AUTO = "auto"
    NEVER = "never"
    ALWAYS = "always"


@dataclass(frozen=True, slots=True)
class ExportPlan:
    """A validated export: the collections (with their specs and counts) and what to include."""

    sections: tuple[tuple[CollectionSpec, int], ...]
    filter: StoreFilter
    vectors: bool

    @property
    def total(self) -> int:
        return sum(n for _, n in self.sections)


@dataclass
class ImportCounts:
    lines: int = 0
    created: int = 0
    replaced: int = 0
    unchanged: int = 0
    duplicates: int = 0
    reembedded: int = 0
    collections: list[str] = field(default_factory=list)

    @property
    def written(self) -> int:
        return self.created + self.replaced


@dataclass(frozen=True, slots=True)
class BackupReport:
    directory: str
    taken_at: float
    stats: BackupStats
    specs: tuple[CollectionSpec, ...]
    barrier_seconds: float


class Porting(Writing):
    """Export, import and backup."""

    # ------------------------------------------------------------ export

    async def plan_export(
        self, collections: Sequence[str], flt: SearchFilter, *, vectors: bool, live_only: bool
    ) -> ExportPlan:
        v = Violations()
        for i, name in enumerate(collections):
            check_collection(v, f"collections[{i}]", name)
        store_flt = self._check_filter(v, "filter", flt)
        v.raise_if_any()
        if collections:
            specs = []
            for name in dict.fromkeys(collections):
                spec = await self._store.get_collection(name)
                if spec is None:
                    raise CollectionNotFound(
                        f"collection {name!r} does not exist", metadata={"collection": name}
                    )
                specs.append(spec)
        else:
            specs = sorted(await self._store.list_collections(), key=lambda s: s.name)
        store_flt = replace(store_flt, include_drafts=True, live_at=self._clock.now() if live_only else None)
        counts = [await self._store.count(s.name, store_flt) for s in specs]
        return ExportPlan(tuple(zip(specs, counts, strict=True)), store_flt, vectors)

    async def export_lines(self, plan: ExportPlan) -> AsyncIterator[bytes]:
        """The export file, line by line (headers included)."""
        exported_at = self._clock.now()
        for spec, count in plan.sections:
            yield header_line(
                ExportHeader.of(spec, exported_at=exported_at, vectors=plan.vectors, memories=count)
            )
            history = await self._all_history(spec.name)
            offset: str | None = None
            while True:
                page, offset = await self._store.scroll(spec.name, plan.filter, PAGE, offset)
                vectors: dict[str, Vector | None] = {}
                if plan.vectors and page:
                    ids = [r.id for r in page] + [h.id for r in page for h in history.get(r.id, ())]
                    for point in await self._store.retrieve(spec.name, ids, with_vectors=True):
                        vectors[point.record.id] = point.vector
                for record in page:
                    past = sorted(history.get(record.id, ()), key=lambda r: r.version, reverse=True)
                    yield memory_line(
                        ExportedMemory(
                            record,
                            vectors.get(record.id),
                            tuple((h, vectors.get(h.id)) for h in past),
                        )
                    )
                if offset is None:
                    break

    async def _all_history(self, collection: str) -> dict[str, list[MemoryRecord]]:
        """Every history version of the collection, by the id of its current memory."""
        out: dict[str, list[MemoryRecord]] = {}
        offset: str | None = None
        flt = StoreFilter(include_history=True, include_drafts=True)
        if await self._store.count(collection, flt) == await self._store.count(
            collection, StoreFilter(include_drafts=True)
        ):
            return out  # no history version: no need to read every point twice
        while True:
            page, offset = await self._store.scroll(collection, flt, 1024, offset)
            for r in page:
                if r.superseded_by is not None:
                    out.setdefault(r.superseded_by, []).append(r)
            if offset is None:
                return out

    # ------------------------------------------------------------ import

    def importer(self, mode: ImportMode, reembed: Reembed, collection: str = "") -> Importer:
        if collection:
            v = Violations()
            check_collection(v, "collection", collection)
            v.raise_if_any()
        return Importer(self, mode, reembed, collection)

    async def import_batch(
        self,
        spec: CollectionSpec,
        items: Sequence[ExportedMemory],
        mode: ImportMode,
        embed: Sequence[bool],
        counts: ImportCounts,
    ) -> None:
        """Write one batch of one section. ``embed[i]``: item i is embedded again (its vectors
        cannot be used)."""
        name = spec.name
        texts: list[str] = []
        for item, again in zip(items, embed, strict=True):
            if again:
                texts.append(item.record.content)
                texts.extend(h.content for h, _ in item.history)
        fresh = iter(await self._embed(texts)) if texts else iter(())
        vectored: list[tuple[ExportedMemory, Vector, list[Vector]]] = []
        for item, again in zip(items, embed, strict=True):
            if again:
                vec = next(fresh)
                past = [next(fresh) for _ in item.history]
                counts.reembedded += 1 + len(item.history)
            else:
                assert item.vector is not None
                vec = item.vector
                past = [v for _, v in item.history if v is not None]
                if len(past) != len(item.history):  # a history version without its vector
                    past = list(await self._embed([h.content for h, _ in item.history]))
                    counts.reembedded += len(item.history)
            vectored.append((item, _unit(vec), [_unit(v) for v in past]))

        async with self._lock(name):
            ids = [it.record.id for it, _, _ in vectored] + [
                h.id for it, _, _ in vectored for h, _ in it.history
            ]
            stored = {p.record.id: p.record for p in await self._store.retrieve(name, ids)}
            points: list[StoredPoint] = []
            if mode is ImportMode.MERGE:
                fresh_items = [x for x in vectored if x[0].record.id not in stored]
                counts.unchanged += sum(
                    1 + len(it.history) for it, _, _ in vectored if it.record.id in stored
                )
                now = self._clock.now()
                hits = (
                    await self._gate_hits(
                        name,
                        np.stack([v for _, v, _ in fresh_items]),
                        now,
                        [it.record.content for it, _, _ in fresh_items],
                    )
                    if fresh_items
                    else []
                )
                earlier: list[tuple[MemoryRecord, Vector]] = []
                for (item, vec, past), found in zip(fresh_items, hits, strict=True):
                    _, duplicate = self._gate(name, found, vec, item.record.content, earlier)
                    if duplicate is not None:
                        counts.duplicates += 1 + len(item.history)
                        continue
                    earlier.append((item.record, vec))
                    points.append(stored_point(item.record, vec))
                    points.extend(stored_point(h, v) for (h, _), v in zip(item.history, past, strict=True))
                    counts.created += 1 + len(item.history)
            else:
                for item, vec, past in vectored:
                    pairs = [
                        (item.record, vec),
                        *((h, v) for (h, _), v in zip(item.history, past, strict=True)),
                    ]
                    for record, v in pairs:
                        old = stored.get(record.id)
                        if old == record:
                            counts.unchanged += 1
                            continue
                        if old is None:
                            counts.created += 1
                        else:
                            counts.replaced += 1
                        points.append(stored_point(record, v))
            for start in range(0, len(points), PAGE):
                await self._upsert(name, points[start : start + PAGE])
            if points:
                self.last_write_at[name] = self._clock.now()

    # ------------------------------------------------------------ backup

    async def backup(self, directory: str, root: Path | None) -> BackupReport:
        """Copy the store into ``directory`` behind a store-wide write barrier: every collection's
        write lock is held (new collections included) while the store copies itself, so every write
        acknowledged before the call is in the copy and none is half in it."""
        directory = check_backup_directory(directory, root)
        async with contextlib.AsyncExitStack() as stack:
            held: set[str] = set()
            while True:  # collections created while the locks were being taken are locked too
                names = sorted({s.name for s in await self._store.list_collections()} - held)
                if not names:
                    break
                for name in names:
                    await stack.enter_async_context(self._lock(name))
                    held.add(name)
            started = time.monotonic()
            taken_at = self._clock.now()
            stats = await self._store.backup(directory, taken_at)
            barrier = time.monotonic() - started
        specs = tuple(sorted(await self._store.list_collections(), key=lambda s: s.name))
        return BackupReport(directory, taken_at, stats, specs, barrier)


def check_backup_directory(directory: str, root: Path | None) -> str:
    """``directory`` made absolute, if it is a new (absent or empty) directory inside ``root``."""
    if root is None:
        raise InvalidArgument.of(
            "directory", "backups through the API are off: set ENGRAM_BACKUP_DIR on the server"
        )
    if not directory:
        raise InvalidArgument.of("directory", "must not be empty")
    if "\0" in directory:
        raise InvalidArgument.of("directory", "must not contain a NUL character")
    path = Path(directory)
    if not path.is_absolute():
        raise InvalidArgument.of("directory", f"must be an absolute path, got {directory!r}")
    try:
        resolved = path.resolve()
        base = root.resolve()
        if resolved == base or not resolved.is_relative_to(base):
            raise InvalidArgument.of("directory", f"must be inside ENGRAM_BACKUP_DIR ({base})")
        if resolved.exists() and (not resolved.is_dir() or any(resolved.iterdir())):
            raise InvalidArgument.of("directory", f"{resolved} exists and is not an empty directory")
        for parent in resolved.parents:  # (created as needed, but never inside a file)
            if parent == base:
                break
            if parent.exists() and not parent.is_dir():
                raise InvalidArgument.of("directory", f"{parent} is not a directory")
    except OSError as exc:  # (a name too long, a component that is not a directory, ...)
        raise InvalidArgument.of("directory", f"is not a usable path: {exc.strerror or exc}") from exc
    return str(resolved)


def _unit(vector: Vector) -> Vector:
    v = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else v


class Importer:
    """One import: fed the file's lines in order, writes them in batches as they come. A bad
    line stops it with InvalidArgument naming the line; the batches written before it stay."""

    def __init__(self, service: Porting, mode: ImportMode, reembed: Reembed, into: str) -> None:
        self._svc = service
        self._mode = mode
        self._reembed = reembed
        self._into = into
        self.counts = ImportCounts()
        self._header: ExportHeader | None = None
        self._spec: CollectionSpec | None = None
        self._pending: list[tuple[int, ExportedMemory, bool]] = []
        self._seen: set[str] = set()

    async def feed(self, raw: bytes) -> None:
        """The next line (without or with its line end); blank lines are skipped."""
        self.counts.lines += 1
        number = self.counts.lines
        if len(raw) > MAX_LINE_BYTES:
            await self._fail(number, f"longer than {MAX_LINE_BYTES} bytes")
        if not raw.strip():
            return
        collection = self._spec.name if self._spec is not None else None
        try:
            parsed = parse_line(raw, collection)
        except LineError as exc:
            await self._fail(number, str(exc))
        if isinstance(parsed, ExportHeader):
            await self.flush()
            await self._open_section(number, parsed)
            return
        header = self._header
        assert header is not None
        if parsed.record.id in self._seen:
            await self._fail(number, f"memory {parsed.record.id} appears twice in this section")
        self._seen.add(parsed.record.id)
        again = self._needs_embedding(header) or parsed.vector is None
        if again and self._reembed is Reembed.NEVER:
            await self._fail(number, "vector: missing, and re-embedding is off (reembed NEVER)")
        vectors = [] if again else [parsed.vector, *(v for _, v in parsed.history)]
        for i, v in enumerate(vectors):
            if v is not None and len(v) != header.dimension:
                where = "vector" if i == 0 else f"history[{i - 1}].vector"
                await self._fail(number, f"{where}: {len(v)} dimensions, the header says {header.dimension}")
        self._pending.append((number, parsed, again))
        if len(self._pending) >= PAGE:
            await self.flush()

    def _needs_embedding(self, header: ExportHeader) -> bool:
        embedder = self._svc.embedder
        return (
            self._reembed is Reembed.ALWAYS
            or not header.vectors
            or header.embedding_model != embedder.model_id
            or header.dimension != embedder.dimension
        )

    async def _open_section(self, number: int, header: ExportHeader) -> None:
        embedder = self._svc.embedder
        name = self._into or header.collection
        v = Violations()
        check_collection(v, "collection", name)
        if v.items:
            await self._fail(number, f"collection: {name!r} is not a valid collection name")
        if self._reembed is Reembed.NEVER and (
            header.embedding_model != embedder.model_id or header.dimension != embedder.dimension
        ):
            raise EmbeddingMismatch(
                f"line {number}: the file's vectors were made with {header.embedding_model} "
                f"({header.dimension} dims) but the server embeds with {embedder.model_id} "
                f"({embedder.dimension} dims); importing them without re-embedding is refused "
                f"(reembed AUTO re-embeds); {self.counts.written} memories imported before it stay",
                metadata={
                    "line": str(number),
                    "imported": str(self.counts.written),
                    "file_model": header.embedding_model,
                    "file_dimension": str(header.dimension),
                    "configured_model": embedder.model_id,
                    "configured_dimension": str(embedder.dimension),
                },
            )
        try:
            self._spec = await self._svc.ensure_collection(name)
        except EngramError as exc:
            exc.message = f"line {number}: {exc.message}"
            exc.args = (exc.message,)
            exc.metadata.update(line=str(number), imported=str(self.counts.written))
            raise
        self._header = header
        self._seen = set()
        if name not in self.counts.collections:
            self.counts.collections.append(name)

    async def flush(self) -> None:
        if not self._pending or self._spec is None:
            return
        pending, self._pending = self._pending, []
        await self._svc.import_batch(
            self._spec,
            [item for _, item, _ in pending],
            self._mode,
            [again for _, _, again in pending],
            self.counts,
        )

    async def finish(self, truncated_tail: bytes = b"") -> ImportCounts:
        """Write what is pending; ``truncated_tail`` is a last line without its line end (parsed
        like any other: a truncated file names it)."""
        if truncated_tail:
            await self.feed(truncated_tail)
        await self.flush()
        return self.counts

    async def _fail(self, number: int, problem: str) -> NoReturn:
        """Write what came before the bad line, then refuse it."""
        with contextlib.suppress(EngramError):
            await self.flush()
        written = self.counts.written
        raise InvalidArgument(
            f"line {number}: {problem}; the {written} memories imported before it stay",
            metadata={"line": str(number), "imported": str(written)},
            violations=(FieldViolation(f"line {number}", problem),),
        )
