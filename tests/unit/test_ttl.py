"""The TTL matrix, every cell, and the tag rules (pure domain, no I/O)."""

import pytest

from engram_server.domain.model import NEVER, MemoryType
from engram_server.domain.ttl import DAY, compute_valid_until, importance_band, ttl_seconds

T0 = 1_767_225_600.0
ID, D, S, E = MemoryType.IDENTITY, MemoryType.DIRECTIVE, MemoryType.INSIGHT, MemoryType.EVENT

# (type, importance, expected TTL in days or None for never) for every cell, at both band edges.
MATRIX = [
    (ID, 1, None), (ID, 4, None), (ID, 5, None), (ID, 7, None), (ID, 8, None), (ID, 10, None),
    (D, 1, 90), (D, 4, 90), (D, 5, None), (D, 7, None), (D, 8, None), (D, 10, None),
    (S, 1, 30), (S, 4, 30), (S, 5, 90), (S, 7, 90), (S, 8, None), (S, 10, None),
    (E, 1, 3), (E, 4, 3), (E, 5, 7), (E, 7, 7), (E, 8, 30), (E, 10, 30),
]  # fmt: skip


@pytest.mark.parametrize(("mtype", "importance", "days"), MATRIX)
def test_matrix_cell(mtype: MemoryType, importance: int, days: int | None) -> None:
    expected = NEVER if days is None else T0 + days * DAY
    assert compute_valid_until(mtype, importance, (), T0) == expected


def test_bands() -> None:
    assert [importance_band(i) for i in range(1, 11)] == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]


@pytest.mark.parametrize("mtype", list(MemoryType))
@pytest.mark.parametrize("importance", [1, 6, 9])
def test_permanent_never_expires(mtype: MemoryType, importance: int) -> None:
    assert compute_valid_until(mtype, importance, ("permanent",), T0) == NEVER
    # permanent outranks the 7-day cap of time-sensitive/location
    assert compute_valid_until(mtype, importance, ("location", "Permanent"), T0) == NEVER


@pytest.mark.parametrize("tag", ["time-sensitive", "location", "LOCATION"])
def test_capped_tags(tag: str) -> None:
    assert ttl_seconds(ID, 10, [tag]) == 7 * DAY  # never -> capped at 7 days
    assert ttl_seconds(E, 9, [tag]) == 7 * DAY  # 30 days -> 7
    assert ttl_seconds(E, 1, [tag]) == 3 * DAY  # 3 days stays 3 (a cap, not a floor)
    assert ttl_seconds(S, 6, [tag, "other"]) == 7 * DAY


def test_explicit_valid_until_wins() -> None:
    explicit = T0 + 12_345
    assert compute_valid_until(ID, 10, ("permanent",), T0, explicit) == explicit
    assert compute_valid_until(E, 1, ("location",), T0, explicit) == explicit


def test_ttl_runs_from_created_at() -> None:
    assert compute_valid_until(E, 5, (), T0 - 2 * DAY) == T0 + 5 * DAY
