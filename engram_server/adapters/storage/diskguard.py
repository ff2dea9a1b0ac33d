"""Free-space headroom of the embedded store's data volume.

The engine (qdrant-edge) writes through memory-mapped files: its write-ahead log, its segments'
payload storage and payload indexes are sparse files whose pages get real space only when first
written. On a full volume that first write cannot be backed, and the kernel kills the process with
SIGBUS (exit 135, nothing logged, every tenant down). A ``write()`` would fail with ENOSPC; an
mmap'ed store cannot fail that way. So the store refuses a write *before* it touches the engine
whenever the volume has less free space than a headroom (``ENGRAM_DISK_HEADROOM_MB``), with
:class:`~engram_server.domain.errors.StorageFull` (RESOURCE_EXHAUSTED, ``ERROR_REASON_STORAGE_FULL``),
and pauses its background writers (index builds, access counters, the sweeper) for as long.

What the headroom has to cover, measured with qdrant-edge-py 0.9.0 on tmpfs (docs/operations/
reliability.md): a new collection's first ≈ 69 MB (its payload indexes' pages), the next 32 MB
write-ahead-log segment when the current one fills, and one write (at most one message,
``ENGRAM_MAX_MESSAGE_BYTES``, ≈ 3× on disk: log, payload, indexes). An index build (optimizer)
rewrites segments and needs about the collection's own size besides; it is put off until there
is room for it.

Reads never write and keep working below the headroom. ``free_bytes`` is injectable (tests).

Start-up on a full volume. Opening a collection writes too: the engine creates its next
write-ahead-log segment, replays the log, and on a tmpfs fills in its sparse vector chunks
(measured: 28 MB for a collection of 3,000 points; the store now allocates those chunks while
there is room, after which an open took 1.1 MB). So the guard keeps a reserve file
(``<data dir>/.disk-reserve``, a quarter of the headroom, 64 MB by default, allocated for real,
made once the volume has less than 8 times the headroom free): a store that opens below the
headroom deletes it first, which gives the engine that much room to open and serve reads; writes
stay refused until the volume has the headroom again, and the reserve is then made again.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from engram_server.domain.errors import StorageFull

__all__ = [
    "MIB",
    "NEW_COLLECTION_BYTES",
    "RESERVE_FILE",
    "VECTOR_CHUNKS",
    "DiskGuard",
    "allocate",
    "disk_usage",
    "sparse_files",
    "volume_free_bytes",
]

log = logging.getLogger(__name__)

MIB = 1024 * 1024
#: Real space a new embedded collection takes on a tmpfs before its first memories (measured:
#: 69.4 MB, nearly all of it the first pages of its ten payload indexes, which the engine reads
#: in and tmpfs backs even when only read) and with them (its first 32 MiB vector chunk, see
#: :data:`VECTOR_CHUNKS`), rounded up. Creating a collection there needs this much free besides
#: the headroom. On a disk filesystem (ext4) a new collection takes ≈ 0.4 MB.
NEW_COLLECTION_BYTES = 104 * MIB
#: The reserve file's name in the data directory.
RESERVE_FILE = ".disk-reserve"
#: The reserve is made once the volume has less than this many times the headroom free (a
#: roomy volume, such as a developer's or a test machine's, keeps its space).
_RESERVE_BELOW = 8
#: Log the state again at most this often while it stays below the headroom.
_REMIND_SECONDS = 300.0


def volume_free_bytes(path: Path) -> int:
    """Bytes an unprivileged process may still write on the volume holding ``path``."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


#: The engine's dense vector storage: chunk files of 32 MiB, created sparse when a segment needs
#: one and filled in completely the next time the shard is loaded (measured: opening a
#: collection of 3,000 points allocated 28 MB, nearly all of it the rest of its vector chunk).
VECTOR_CHUNKS = "shard/segments/*/vector_storage/vectors/chunk_*.mmap"


#: Filesystems whose pages are memory: a page of a shared mapping gets real space when it is
#: first *read* (the engine pre-reads its mappings), not only when written.
_MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs", "shmem"})


def filesystem_type(path: Path, mounts: Path = Path("/proc/self/mounts")) -> str:
    """The type of the filesystem holding ``path`` ("" if unknown): the longest mount point
    that contains it."""
    try:
        target = os.path.realpath(path)
        lines = mounts.read_text().splitlines()
    except OSError:
        return ""
    best, kind = "", ""
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, parts[2]
    return kind


def sparse_files(path: Path, pattern: str = VECTOR_CHUNKS) -> list[tuple[Path, int]]:
    """The files under ``path`` matching ``pattern`` that have holes, with the bytes it would
    take to fill them."""
    out: list[tuple[Path, int]] = []
    for f in path.glob(pattern):
        try:
            st = f.stat()
        except OSError:
            continue
        missing = st.st_size - st.st_blocks * 512
        if missing > 0:
            out.append((f, missing))
    return out


def allocate(path: Path) -> None:
    """Give every byte of ``path`` real space (its holes read as zeros, as before)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.posix_fallocate(fd, 0, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def disk_usage(path: Path) -> int:
    """Real bytes (allocated blocks, not apparent sizes: the engine's files are sparse) of the
    files under ``path``."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue  # (removed meanwhile)
    return total


class DiskGuard:
    """Refuses writes while the volume of ``path`` has less than ``headroom_bytes`` free.

    ``headroom_bytes=0`` turns the check off. Thread-safe: the store's io and optimizer threads
    both ask it.
    """

    def __init__(
        self,
        path: Path,
        headroom_bytes: int,
        *,
        free_bytes: Callable[[Path], int] = volume_free_bytes,
        reserve_bytes: int | None = None,
    ) -> None:
        if headroom_bytes < 0:
            raise ValueError("headroom_bytes must be >= 0 (0 = no check)")
        self._path = Path(path)
        self.headroom = headroom_bytes
        #: Size of the reserve file kept while there is room (0 = none).
        self.reserve_bytes = headroom_bytes // 4 if reserve_bytes is None else reserve_bytes
        self._reserve_path = self._path / RESERVE_FILE
        self._reserved: bool | None = None  # None: not looked yet
        probe = self._path
        while not probe.exists() and probe.parent != probe:
            probe = probe.parent
        #: Whether the volume is memory (tmpfs): there a new collection takes its
        #: :data:`NEW_COLLECTION_BYTES` at once and a load fills in sparse vector chunks; on a disk
        #: filesystem (ext4, xfs) only written pages take space (a new collection: ≈ 0.4 MB).
        self.memory_backed = filesystem_type(probe) in _MEMORY_FILESYSTEMS
        self._free_bytes = free_bytes
        self._lock = threading.Lock()
        self._low = False
        self._logged_at = 0.0
        self._put_off_logged: dict[str, float] = {}

    @property
    def enabled(self) -> bool:
        return self.headroom > 0

    def free(self) -> int | None:
        """The volume's free bytes now (None: unknown, e.g. the directory is not there yet)."""
        try:
            return int(self._free_bytes(self._path))
        except OSError:
            return None

    def room(self, need: int = 0, *, what: str = "write") -> bool:
        """Whether ``need`` bytes can be written while keeping the headroom free. Logs when the
        volume goes below the headroom (WARNING, then a reminder every few minutes while it stays
        there) and when it is back above it (INFO)."""
        if not self.enabled:
            return True
        free = self.free()
        if free is None:
            return True  # no reading: let the write try (it fails cleanly on ENOSPC if it can)
        ok = free >= self.headroom + need
        low = free < self.headroom
        with self._lock:
            now = time.monotonic()
            if low and (not self._low or now - self._logged_at >= _REMIND_SECONDS):
                self._logged_at = now
                log.warning(
                    "data volume of %s has %.0f MB free, below the headroom of %.0f MB "
                    "(ENGRAM_DISK_HEADROOM_MB): writes are refused with STORAGE_FULL and background "
                    "writes are paused until space is freed; reads keep working",
                    self._path,
                    free / MIB,
                    self.headroom / MIB,
                )
            elif not low and self._low:
                log.info(
                    "data volume of %s has %.0f MB free again (headroom %.0f MB): writes resume",
                    self._path,
                    free / MIB,
                    self.headroom / MIB,
                )
            self._low = low
            if not low and self._reserved is not True and free < self.headroom * _RESERVE_BELOW:
                self._make_reserve(free)
        if not ok and not low and self._put_off(what):
            log.info(
                "%s put off: it needs %.0f MB besides the headroom of %.0f MB, %.0f MB are free",
                what,
                need / MIB,
                self.headroom / MIB,
                free / MIB,
            )
        return ok

    def _put_off(self, what: str) -> bool:
        """Whether to log that ``what`` was put off (once per kind every few minutes)."""
        kind = what.split(" of ", 1)[0]
        now = time.monotonic()
        with self._lock:
            if now - self._put_off_logged.get(kind, -_REMIND_SECONDS) < _REMIND_SECONDS:
                return False
            self._put_off_logged[kind] = now
            return True

    def release_reserve_if_low(self) -> bool:
        """Before the store opens: below the headroom, delete the reserve file so the engine has
        room to open (see the module docstring). Returns whether it was released."""
        if not self.enabled:
            return False
        free = self.free()
        if free is None or free >= self.headroom:
            return False
        with self._lock:
            try:
                size = self._reserve_path.stat().st_blocks * 512
                self._reserve_path.unlink()
            except FileNotFoundError:
                self._reserved = False
                log.warning(
                    "data volume of %s has %.0f MB free, below the headroom of %.0f MB "
                    "(ENGRAM_DISK_HEADROOM_MB), and no reserve to release: opening the store may "
                    "fail if the engine needs more room",
                    self._path,
                    free / MIB,
                    self.headroom / MIB,
                )
                return False
            self._reserved = False
        log.warning(
            "data volume of %s has %.0f MB free, below the headroom of %.0f MB (ENGRAM_DISK_HEADROOM_MB): "
            "released the %.0f MB reserve so that the store can open and serve reads; writes are "
            "refused until space is freed",
            self._path,
            free / MIB,
            self.headroom / MIB,
            size / MIB,
        )
        return True

    def _make_reserve(self, free: int) -> None:
        """Under the lock: (re)create the reserve file when the volume has room for it above the
        headroom. Allocated for real (``posix_fallocate``), so that deleting it frees that much."""
        if self.reserve_bytes <= 0:
            self._reserved = True
            return
        try:
            have = self._reserve_path.stat().st_blocks * 512
        except FileNotFoundError:
            have = 0
        except OSError:
            return
        if have >= self.reserve_bytes:
            self._reserved = True
            return
        if free < self.headroom + self.reserve_bytes - have:
            self._reserved = False
            return
        try:
            fd = os.open(self._reserve_path, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.posix_fallocate(fd, 0, self.reserve_bytes)
            finally:
                os.close(fd)
            self._reserved = True
        except OSError as exc:
            log.warning(
                "could not allocate the %d MB disk reserve %s: %s",
                self.reserve_bytes // MIB,
                self._reserve_path,
                exc,
            )
            with contextlib.suppress(OSError):
                self._reserve_path.unlink()
            self._reserved = False
            if exc.errno in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                self.reserve_bytes = 0  # the filesystem cannot: no reserve from now on

    def check(self, need: int = 0, *, what: str = "write") -> None:
        """Raise :class:`StorageFull` unless ``need`` bytes fit above the headroom."""
        if self.room(need, what=what):
            return
        free = self.free() or 0
        raise StorageFull(
            f"the server's disk is almost full ({free // MIB} MB free; a {what} needs "
            f"{(self.headroom + need) // MIB} MB, ENGRAM_DISK_HEADROOM_MB={self.headroom // MIB}): "
            "writes are refused until an operator frees space; reads keep working",
            metadata={
                "free_bytes": str(free),
                "headroom_bytes": str(self.headroom),
                "needed_bytes": str(need),
            },
        )
