"""Reinforcement: a memory recalled often decays more slowly (pure formula)."""

from __future__ import annotations

import math

import pytest

from engram_server.domain.model import MemoryType
from engram_server.domain.ranking import DECAY_PER_HOUR, REINFORCEMENT, recency, reinforced_recency

EVENT = DECAY_PER_HOUR[MemoryType.EVENT]


def half_life_hours(access_count: int) -> float:
    return math.log(0.5) / math.log(EVENT) * (1 + REINFORCEMENT * math.log1p(access_count))


def test_never_recalled_is_the_plain_recency() -> None:
    for hours in (0.0, 1.0, 70.0, 500.0):
        assert reinforced_recency(EVENT, hours, 0) == pytest.approx(
            recency(MemoryType.EVENT, 0.0, hours * 3600.0)
        )


def test_more_recalls_decay_more_slowly_and_the_half_life_stretches_as_documented() -> None:
    values = [reinforced_recency(EVENT, 72.0, n) for n in (0, 1, 10, 100)]
    assert values == sorted(values) and len(set(values)) == 4
    assert half_life_hours(0) / 24 == pytest.approx(2.87, abs=0.01)
    assert half_life_hours(10) / 24 == pytest.approx(6.31, abs=0.05)
    assert half_life_hours(100) / 24 == pytest.approx(9.5, abs=0.1)
    assert reinforced_recency(EVENT, half_life_hours(10), 10) == pytest.approx(0.5)


def test_never_decaying_types_stay_at_one_and_negative_counts_are_ignored() -> None:
    assert reinforced_recency(DECAY_PER_HOUR[MemoryType.IDENTITY], 10_000.0, 50) == 1.0
    assert reinforced_recency(EVENT, 24.0, -3) == reinforced_recency(EVENT, 24.0, 0)
