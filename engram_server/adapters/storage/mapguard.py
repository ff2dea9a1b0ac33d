"""How many collections the process can hold open, and the guard that keeps it below the kernel's
limit of memory maps.

Every open embedded collection (a qdrant-edge shard) memory-maps its files: its write-ahead log,
its segments' vector and payload storage and its ten payload indexes. Measured with
qdrant-edge-py 0.9.0 on this release's layout: a new collection takes 185 maps and 1 file
descriptor (and about 70 MB of file-backed resident memory, mostly its payload indexes' first
pages); a collection of 5,000 points after its HNSW index was built takes about 90 maps more; an
index build maps about 190 more while it runs; each open collection also runs 8 engine threads.
The kernel allows a process ``vm.max_map_count`` maps (65,530 by default). Past it every ``mmap``
fails with ENOMEM: no collection can be created or opened any more (the engine reports "Out of
memory (os error 12)"), and the allocator's large allocations fail too — one tenant making
collections takes every tenant down.

Two defences:

* a limit on collections (``ENGRAM_MAX_COLLECTIONS``; live and trashed collections both hold an
  open shard), whose default for the embedded store :func:`derived_max_collections` derives
  from ``vm.max_map_count``, the open-files limit and a container's task limit;
* :class:`MapGuard`: before the embedded store creates a collection it counts the process's maps
  (``/proc/self/maps``) and refuses (:class:`~engram_server.domain.errors.CollectionLimit`) when
  the new shard would leave less than :data:`MAP_HEADROOM` maps for the rest of the process, so
  that the service keeps working even when the limit was set too high. Existing collections keep
  serving reads and writes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from engram_server.domain.errors import CollectionLimit

__all__ = [
    "FDS_PER_COLLECTION",
    "MAPS_PER_COLLECTION",
    "MAP_HEADROOM",
    "MAP_RESERVE",
    "MIN_COLLECTIONS",
    "SERVER_STORE_MAX_COLLECTIONS",
    "THREADS_PER_COLLECTION",
    "THREAD_RESERVE",
    "MapGuard",
    "derived_max_collections",
    "max_map_count",
    "open_files_limit",
    "pids_limit",
    "process_maps",
]

log = logging.getLogger(__name__)

#: Maps budgeted per open collection: a new one takes 185, one of 5,000 points with its HNSW
#: index about 270 (measured, see the module docstring); most collections of a many-tenant
#: server are small.
MAPS_PER_COLLECTION = 256
#: Maps kept for everything else in the process: measured 456 at start (Python, the model
#: runtimes, gRPC, the engine's threads) before any collection; the rest is room for what grows
#: under load (thread stacks, the allocator's large blocks, an index build's ≈ 190).
MAP_RESERVE = 4096
#: Maps the guard keeps free beside a new collection's :data:`MAPS_PER_COLLECTION`: below it a
#: create is refused whatever the limit says.
MAP_HEADROOM = 2048
#: File descriptors budgeted per open collection (measured: 1). The server raises its soft
#: open-files limit at start for these besides its connections (``app.ensure_open_files``).
FDS_PER_COLLECTION = 2
#: Engine threads per open collection (measured: 8, for as long as it is open).
THREADS_PER_COLLECTION = 8
#: Threads (tasks) kept for everything else when the container limits them (``pids.max``).
THREAD_RESERVE = 512
#: The derived default is never below this (a machine that cannot hold it cannot serve anyway).
MIN_COLLECTIONS = 16
#: The default of the server store (``ENGRAM_QDRANT_URL``): its shards live in the Qdrant node,
#: not in this process.
SERVER_STORE_MAX_COLLECTIONS = 1000

_MAX_MAP_COUNT = Path("/proc/sys/vm/max_map_count")
_PIDS_MAX = Path("/sys/fs/cgroup/pids.max")
_SELF_MAPS = Path("/proc/self/maps")


def max_map_count(path: Path = _MAX_MAP_COUNT) -> int | None:
    """The kernel's limit of memory maps per process (None: unknown, e.g. not Linux)."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def process_maps(path: Path = _SELF_MAPS) -> int | None:
    """The memory maps this process holds now, one line each of ``/proc/self/maps`` (None:
    unknown). The kernel writes a line per map: measured 0.12–0.24 s at 38,000 maps on a busy
    2-core machine, less than creating the shard itself takes, and done only then."""
    try:
        count = 0
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                count += chunk.count(b"\n")
        return count
    except OSError:
        return None


def open_files_limit() -> int | None:
    """The hard limit of open files, up to which the server raises its soft limit (None: unknown
    or unlimited)."""
    try:
        import resource  # noqa: PLC0415  (POSIX only)
    except ImportError:
        return None
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if hard == resource.RLIM_INFINITY else int(hard)


def pids_limit(path: Path = _PIDS_MAX) -> int | None:
    """The container's limit of tasks (threads) from its cgroup (v2), None when there is none."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):  # ("max": no limit)
        return None


def derived_max_collections(
    max_maps: int | None, open_files: int | None, reserved_files: int = 0, pids: int | None = None
) -> int:
    """The default of ``ENGRAM_MAX_COLLECTIONS`` for the embedded store:
    ``(vm.max_map_count − MAP_RESERVE) / MAPS_PER_COLLECTION``, or
    ``(open files − reserved_files) / FDS_PER_COLLECTION`` when that is lower (``open_files``: the
    hard limit; ``reserved_files``: the connections' and the server's own), or
    ``(pids − THREAD_RESERVE) / THREADS_PER_COLLECTION`` when the cgroup limits tasks, at least
    :data:`MIN_COLLECTIONS`. With the kernel's default of 65,530 maps: (65,530 − 4,096) / 256 =
    239 collections; with ``vm.max_map_count=262144``: 1,008. Unknown limits: the server store's
    default, :data:`SERVER_STORE_MAX_COLLECTIONS`."""
    bounds: list[int] = []
    if max_maps is not None:
        bounds.append((max_maps - MAP_RESERVE) // MAPS_PER_COLLECTION)
    if open_files is not None:
        bounds.append((open_files - reserved_files) // FDS_PER_COLLECTION)
    if pids is not None:
        bounds.append((pids - THREAD_RESERVE) // THREADS_PER_COLLECTION)
    if not bounds:
        return SERVER_STORE_MAX_COLLECTIONS
    return max(MIN_COLLECTIONS, min(bounds))


class MapGuard:
    """Refuses a new collection when its shard would leave the process fewer than ``headroom``
    maps below ``vm.max_map_count``. ``maps_in_use`` and ``map_limit`` are injectable (tests);
    either unknown (None) lets the create go ahead."""

    def __init__(
        self,
        *,
        maps_in_use: Callable[[], int | None] = process_maps,
        map_limit: Callable[[], int | None] = max_map_count,
        per_collection: int = MAPS_PER_COLLECTION,
        headroom: int = MAP_HEADROOM,
    ) -> None:
        self._maps_in_use = maps_in_use
        self._map_limit = map_limit
        self.per_collection = per_collection
        self.headroom = headroom

    def reading(self) -> tuple[int, int] | None:
        """(maps in use, the kernel's limit) now, or None when either is unknown."""
        used, limit = self._maps_in_use(), self._map_limit()
        if used is None or limit is None:
            return None
        return used, limit

    def fits(self, reading: tuple[int, int] | None) -> bool:
        """Whether one more collection fits with the headroom left, at ``reading`` (None: unknown,
        which lets it go ahead)."""
        return reading is None or reading[0] + self.per_collection + self.headroom <= reading[1]

    def room(self) -> bool:
        """Whether one more collection fits now."""
        return self.fits(self.reading())

    def check(self, collection: str) -> None:
        """Raise :class:`CollectionLimit` unless one more collection fits."""
        reading = self.reading()
        if reading is None or self.fits(reading):
            return
        used, limit = reading
        log.warning(
            "collection %r does not fit: the process holds %d memory maps of the kernel's %d "
            "(vm.max_map_count) and a collection takes about %d (a trashed collection, if any, is "
            "purged to make room); lower ENGRAM_MAX_COLLECTIONS or raise vm.max_map_count",
            collection,
            used,
            limit,
            self.per_collection,
        )
        raise CollectionLimit(
            f"collection {collection!r} was not created: the server is near its system limit of "
            f"memory maps ({used} of {limit}, vm.max_map_count; each open collection takes about "
            f"{self.per_collection}). Existing collections keep working. Delete collections no longer "
            "needed (DeleteCollection; the trash gives way to new collections), or ask an operator "
            "to raise vm.max_map_count or lower ENGRAM_MAX_COLLECTIONS",
            metadata={
                "collection": collection,
                "maps": str(used),
                "max_map_count": str(limit),
                "maps_per_collection": str(self.per_collection),
            },
        )
