"""The store's lifecycle (open, warm-up, close) and its collections (create, list, drop)."""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import fcntl
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from engram_server.adapters.storage.access import ACCESS_LOG, AccessLedger
from engram_server.adapters.storage.diskguard import (
    NEW_COLLECTION_BYTES,
)
from engram_server.adapters.storage.edge.engine import (
    _SCROLL_BATCH,
    _Collection,
    _engine_key,
    _fsync_dir,
    _write_json_atomic,
)
from engram_server.adapters.storage.edge.indexes import EdgeIndexes
from engram_server.adapters.storage.nearest import NearestLists
from engram_server.adapters.storage.payload import (
    CANDIDATE_FIELDS,
    PAYLOAD_INDEXES,
    payload_cue,
    rank_fields,
    spec_from_json,
    spec_to_json,
    validate_collection_name,
)
from engram_server.domain.errors import CollectionNotFound, InvalidArgument, StorageUnavailable
from engram_server.domain.model import (
    BackupStats,
    CollectionSpec,
)
from engram_server.threads import OPTIMIZER_THREAD, STORAGE_THREAD, worker

#: The manifest a backup directory holds (``engram restore`` checks it), and its format version.
BACKUP_MANIFEST = "engram-backup.json"
BACKUP_FORMAT = 1

_STATE_DIR = "state"


def _copy_sparse(src: str, dst: str) -> str:
    """Copy a file keeping its holes: the engine pre-allocates sparse files (WAL segments, mmap
    chunks of 32 MB), which a plain copy would write out as zeros (a fresh collection: 230 MB
    apparent, under 1 MB allocated)."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        size = os.fstat(fin.fileno()).st_size
        offset = 0
        while offset < size:
            try:
                start = os.lseek(fin.fileno(), offset, os.SEEK_DATA)
            except OSError:  # no data after offset (ENXIO)
                break
            end = os.lseek(fin.fileno(), start, os.SEEK_HOLE)
            os.lseek(fin.fileno(), start, os.SEEK_SET)
            os.lseek(fout.fileno(), start, os.SEEK_SET)
            left = end - start
            while left > 0:
                chunk = os.read(fin.fileno(), min(left, 1 << 20))
                if not chunk:
                    break
                os.write(fout.fileno(), chunk)
                left -= len(chunk)
            offset = end
        os.ftruncate(fout.fileno(), size)
    shutil.copystat(src, dst)
    return dst


def _fsync_tree(root: Path) -> None:
    """Make a copied tree durable: every file, then every directory."""
    for path in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    _fsync_dir(root)


log = logging.getLogger(__name__)

_SPEC_FILE = "spec.json"
_INDEX_SCHEMA: Mapping[str, qe.PayloadSchemaType] = {
    "keyword": qe.PayloadSchemaType.Keyword,
    "float": qe.PayloadSchemaType.Float,
    "integer": qe.PayloadSchemaType.Integer,
}


class EdgeLifecycle(EdgeIndexes):
    """Opening and closing the store; creating, listing and dropping collections."""

    # ------------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        if self._io is not None:
            return
        if not faulthandler.is_enabled():
            # The engine's memory-mapped files raise SIGBUS if the volume fills despite the disk
            # guard (e.g. another process took the last bytes between its check and a write):
            # at least the fault is reported, with the threads' stacks, on stderr.
            faulthandler.enable()
        self._io = worker(STORAGE_THREAD)
        self._opt = worker(OPTIMIZER_THREAD)
        try:
            await self._run(self._open_sync)
        except BaseException:
            await self._shutdown_executors()
            raise
        if not self._background_hnsw:
            # Build due indexes now, before the server takes traffic (the build holds the GIL).
            await self.wait_optimized()

    def _open_sync(self) -> None:
        self._root.mkdir(parents=True, exist_ok=True)
        lock_file = (self._data_dir / ".lock").open("a+b")
        try:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            lock_file.close()
            raise StorageUnavailable(
                f"data directory {self._data_dir} is in use by another process "
                "(only one Engram server may open a data directory)"
            ) from exc
        self._lock_file = lock_file
        # On a volume below the headroom, the engine's start-up writes (a new log segment, the
        # log's replay) would SIGBUS: the reserve file makes room for them (see ``diskguard``).
        self.disk.release_reserve_if_low()
        try:
            for path in sorted(p for p in self._root.iterdir() if p.is_dir()):
                if path.name.startswith("."):
                    continue  # a half-dropped or half-created collection
                spec_path = path / _SPEC_FILE
                try:
                    raw = spec_path.read_text(encoding="utf-8")
                except FileNotFoundError as exc:
                    raise StorageUnavailable(f"collection directory {path} has no {_SPEC_FILE}") from exc
                spec = spec_from_json(raw, where=str(spec_path))
                if spec.name != path.name:
                    raise StorageUnavailable(
                        f"corrupt collection spec at {spec_path}: names collection {spec.name!r}"
                    )
                col = _Collection(
                    spec,
                    path,
                    self._open_shard(path, spec, create=False),
                    nearest=NearestLists(self._nearest),
                    access=AccessLedger(path / ACCESS_LOG, sync=self._sync_writes),
                )
                self._cols[spec.name] = col
                self._maybe_optimize(col)
                self._io_submit(self._warm, col, None)
            reading = self.maps.reading()
            if reading is not None and not self.maps.fits(reading):  # (one read of the maps)
                # (what exists is opened all the same: refusing it would hide a tenant's data)
                log.warning(
                    "%d collections opened: the process holds %d memory maps of the kernel's %d "
                    "(vm.max_map_count), too close to it for new collections, which are refused; "
                    "raise vm.max_map_count or purge trashed collections",
                    len(self._cols),
                    *reading,
                )
            if self.disk.room(what="start-up"):  # logs the state; makes the reserve when there is room
                for col in self._cols.values():
                    self._settle(col, now=True)
        except BaseException:
            self._close_sync()
            raise

    def _io_submit(self, fn: Callable[..., None], *args: Any) -> None:
        """Queue background work on the io thread (dropped when the store is closing)."""
        if self._io is not None:
            with contextlib.suppress(RuntimeError):  # (the executor is shutting down)
                self._submit(fn, *args)

    def _warm(self, col: _Collection, offset: Any) -> None:
        """On the io thread, after open: read one page of ranking fields into ``col.ranks`` (and
        the rescoring cues of their texts into ``col.cues``) and queue the next page, so searches
        never wait for more than a page (the fields of every point are known once done; until
        then, candidates read missing ones from the engine)."""
        if self._cols.get(col.spec.name) is not col:
            return  # closed or dropped meanwhile
        try:
            records, next_offset = col.shard.scroll(
                qe.ScrollRequest(
                    offset=offset,
                    limit=_SCROLL_BATCH,
                    filter=None,
                    with_payload=[*CANDIDATE_FIELDS, "content"],
                    with_vector=False,
                )
            )
            ranks, cues = col.ranks, col.cues
            for r in records:
                key = _engine_key(r.id)
                ranks[key] = rank_fields(str(r.id), r.payload, col.spec.name)
                cues[key] = payload_cue(r.payload)
        except Exception:
            log.exception("loading the ranking fields of collection %s failed", col.spec.name)
            return
        if next_offset is not None:
            self._io_submit(self._warm, col, next_offset)
        else:
            col.warm = True
            log.info(
                "ranking fields of collection %s loaded: %d points in %.1f s",
                col.spec.name,
                len(col.ranks),
                time.monotonic() - col.opened_at,
            )

    def _close_sync(self) -> None:
        for col in self._cols.values():
            try:
                col.shard.close()
            except Exception:
                log.exception("closing collection %s failed", col.spec.name)
            col.access.close()
        self._cols.clear()
        if self._lock_file is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None

    async def _shutdown_executors(self) -> None:
        for ex in (self._opt, self._io):
            if ex is not None:
                await asyncio.to_thread(ex.shutdown, wait=True)
        self._io = self._opt = None

    async def close(self) -> None:
        if self._io is None:
            return
        await self.wait_optimized()
        await self._run(self._close_sync)
        await self._shutdown_executors()

    # ------------------------------------------------------------------ collections

    async def create_collection(self, spec: CollectionSpec) -> None:
        validate_collection_name(spec.name)
        await self._run(lambda: self._create_sync(spec))

    def _create_sync(self, spec: CollectionSpec) -> None:
        if spec.name in self._cols:
            return
        self.disk.check(NEW_COLLECTION_BYTES if self.disk.memory_backed else 0, what="new collection")
        self.maps.check(spec.name)
        final = self._root / spec.name
        if final.exists():  # left behind by a crash between mkdir and rename; never loaded
            raise StorageUnavailable(f"{final} exists but holds no loadable collection; remove it")
        tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}.", dir=self._root))
        try:
            shard = self._open_shard(tmp, spec, create=True)
            try:
                for name, kind in PAYLOAD_INDEXES.items():
                    shard.update(qe.UpdateOperation.create_field_index(name, _INDEX_SCHEMA[kind]))
                shard.flush()
            finally:
                shard.close()
            _write_json_atomic(tmp / _SPEC_FILE, spec_to_json(spec))
            os.rename(tmp, final)
            _fsync_dir(self._root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._cols[spec.name] = _Collection(
            spec,
            final,
            self._open_shard(final, spec, create=False),
            warm=True,
            nearest=NearestLists(self._nearest),
            access=AccessLedger(final / ACCESS_LOG, sync=self._sync_writes),
        )

    async def get_collection(self, name: str) -> CollectionSpec | None:
        col = self._cols.get(name)
        return None if col is None else col.spec

    async def list_collections(self) -> list[CollectionSpec]:
        return sorted((c.spec for c in self._cols.values()), key=lambda s: s.name)

    async def update_collection(self, spec: CollectionSpec) -> None:
        current = self._cols.get(spec.name)
        if current is not None and current.optimizing is not None and spec.format > current.spec.format:
            await asyncio.wrap_future(current.optimizing)  # (indexes are created on an idle shard)

        def work() -> None:
            col = self._cols.get(spec.name)
            if col is None:
                raise CollectionNotFound(
                    f"collection {spec.name!r} does not exist", metadata={"collection": spec.name}
                )
            if spec.format > col.spec.format:
                # Migrating: every payload index of this release (creating one that exists is a
                # no-op), flushed before the new format is recorded.
                for name, kind in PAYLOAD_INDEXES.items():
                    col.shard.update(qe.UpdateOperation.create_field_index(name, _INDEX_SCHEMA[kind]))
                col.shard.flush()
            _write_json_atomic(col.path / _SPEC_FILE, spec_to_json(spec))
            col.spec = spec

        await self._run(work)

    async def drop_collection(self, name: str) -> int:
        col = self._cols.get(name)
        if col is None:
            return 0
        if col.optimizing is not None:
            await asyncio.wrap_future(col.optimizing)
        return await self._run(lambda: self._drop_sync(name))

    async def backup(self, directory: str, taken_at: float) -> BackupStats:
        """Copy the data directory into ``directory`` as one task of the io thread (so between two
        writes: every write it ran is in the copy, none is half in it), after any background index
        build (which rewrites segments beside the io thread) has finished."""
        dest = Path(directory)
        while True:
            await self.wait_optimized()
            stats = await self._run(lambda: self._backup_sync(dest, taken_at))
            if stats is not None:
                return stats

    def _backup_sync(self, dest: Path, taken_at: float) -> BackupStats | None:
        if any(c.optimizing is not None and not c.optimizing.done() for c in self._cols.values()):
            return None  # a build started meanwhile: wait for it and try again
        if dest.exists() and any(dest.iterdir()):
            raise InvalidArgument.of("directory", f"{dest} is not empty")
        dest.mkdir(parents=True, exist_ok=True)
        points: dict[str, int] = {}
        for name, col in sorted(self._cols.items()):
            col.shard.flush()  # the WAL and segments on disk: the copy reads the files
            points[name] = col.shard.count(qe.CountRequest(exact=True))
            shutil.copytree(col.path, dest / "collections" / name, copy_function=_copy_sparse)
        state = self._data_dir / _STATE_DIR
        if state.is_dir():
            shutil.copytree(state, dest / _STATE_DIR)
        manifest = {
            "engram_backup": BACKUP_FORMAT,
            "taken_at": taken_at,
            "store": "embedded",
            "points": points,
        }
        _write_json_atomic(dest / BACKUP_MANIFEST, manifest)
        size = sum(f.stat().st_blocks * 512 for f in dest.rglob("*") if f.is_file())
        _fsync_tree(dest)
        return BackupStats(size, points)

    def _drop_sync(self, name: str) -> int:
        col = self._cols.pop(name, None)
        if col is None:
            return 0
        col.nearest.reset()
        count = col.shard.count(qe.CountRequest(exact=True))
        col.shard.close()
        col.access.close()
        # Rename first so a crash mid-delete never leaves a half collection that open() loads.
        trash = self._root / f".dropped.{name}.{os.getpid()}.{id(col)}"
        os.rename(col.path, trash)
        _fsync_dir(self._root)
        shutil.rmtree(trash, ignore_errors=True)
        return count
