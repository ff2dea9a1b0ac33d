"""Time to live: when a memory is hard-deleted, by type × importance band and tags.

| type      | importance <5 | 5–7   | ≥8    |
|-----------|---------------|-------|-------|
| identity  | never         | never | never |
| directive | 90 d          | never | never |
| insight   | 30 d          | 90 d  | never |
| event     | 3 d           | 7 d   | 30 d  |

Precedence: an explicit valid_until > tag ``permanent`` (never) > the matrix; tags
``time-sensitive`` and ``location`` cap the TTL at 7 days. The TTL runs from created_at.
"""

from __future__ import annotations

from collections.abc import Iterable

from engram_server.domain.model import NEVER, MemoryType

DAY = 86_400.0

#: TTL in seconds per type for the bands (<5, 5–7, ≥8); None means never.
TTL_MATRIX: dict[MemoryType, tuple[float | None, float | None, float | None]] = {
    MemoryType.IDENTITY: (None, None, None),
    MemoryType.DIRECTIVE: (90 * DAY, None, None),
    MemoryType.INSIGHT: (30 * DAY, 90 * DAY, None),
    MemoryType.EVENT: (3 * DAY, 7 * DAY, 30 * DAY),
}

PERMANENT_TAG = "permanent"
CAPPED_TAGS = frozenset({"time-sensitive", "location"})
CAP_SECONDS = 7 * DAY


def importance_band(importance: int) -> int:
    """0 for importance <5, 1 for 5–7, 2 for ≥8."""
    if importance < 5:
        return 0
    if importance < 8:
        return 1
    return 2


def ttl_seconds(memory_type: MemoryType, importance: int, tags: Iterable[str]) -> float | None:
    """The TTL the rules give (None = never), ignoring any explicit valid_until."""
    folded = {t.strip().lower() for t in tags}
    if PERMANENT_TAG in folded:
        return None
    ttl = TTL_MATRIX[memory_type][importance_band(importance)]
    if folded & CAPPED_TAGS:
        ttl = CAP_SECONDS if ttl is None else min(ttl, CAP_SECONDS)
    return ttl


def compute_valid_until(
    memory_type: MemoryType,
    importance: int,
    tags: Iterable[str],
    created_at: float,
    explicit: float | None = None,
) -> float:
    """valid_until as stored: the explicit value if given, else created_at + TTL, else NEVER."""
    if explicit is not None:
        return explicit
    ttl = ttl_seconds(memory_type, importance, tags)
    return NEVER if ttl is None else created_at + ttl
