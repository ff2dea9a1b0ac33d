"""Decay and fusion (pure domain)."""

import math

import numpy as np
import pytest

from engram_server.domain.model import MemoryType
from engram_server.domain.ranking import DECAY_PER_HOUR, Weights, fuse, mmr_order, recency

NOW = 1_800_000_000.0
H = 3600.0


def test_never_decaying_types() -> None:
    for t in (MemoryType.IDENTITY, MemoryType.DIRECTIVE):
        assert recency(t, NOW - 10_000 * H, NOW) == 1.0


@pytest.mark.parametrize(
    ("mtype", "half_life_hours"), [(MemoryType.EVENT, 69.0), (MemoryType.INSIGHT, 3466.0)]
)
def test_half_lives(mtype: MemoryType, half_life_hours: float) -> None:
    exact = math.log(0.5) / math.log(DECAY_PER_HOUR[mtype])
    assert exact == pytest.approx(half_life_hours, rel=0.01)
    assert recency(mtype, NOW - exact * H, NOW) == pytest.approx(0.5)


def test_event_decays_per_hour() -> None:
    assert recency(MemoryType.EVENT, NOW - H, NOW) == pytest.approx(0.99)
    assert recency(MemoryType.INSIGHT, NOW - H, NOW) == pytest.approx(0.9998)
    # future-dated memories are brand new, not boosted
    assert recency(MemoryType.EVENT, NOW + 5 * H, NOW) == 1.0


def test_fusion_formula_and_default_weights() -> None:
    s = fuse(0.8, 0.5, 7, Weights(), raw=0.93)
    assert s.final == pytest.approx(1.0 * 0.8 + 0.5 * 0.5 + 0.3 * 0.7)
    assert (s.relevance, s.recency, s.importance, s.raw_similarity) == (0.8, 0.5, pytest.approx(0.7), 0.93)


def test_fresher_and_more_important_wins_at_equal_relevance() -> None:
    old = fuse(0.7, recency(MemoryType.EVENT, NOW - 48 * H, NOW), 5, Weights(), 0.9)
    new = fuse(0.7, recency(MemoryType.EVENT, NOW - 1 * H, NOW), 5, Weights(), 0.9)
    important = fuse(0.7, recency(MemoryType.EVENT, NOW - 1 * H, NOW), 9, Weights(), 0.9)
    assert important.final > new.final > old.final


def test_mmr_prefers_diverse_second_pick() -> None:
    a = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    a2 = np.array([0.999, 0.0447, 0.0], dtype=np.float32)  # near-copy of a
    b = np.array([0.0, 1.0, 0.0], dtype=np.float32)
    order = mmr_order([1.0, 0.95, 0.9], [a, a2, b], k=2, lam=0.5)
    assert order == [0, 2]
    assert mmr_order([1.0, 0.95, 0.9], [a, a2, b], k=3, lam=1.0) == [0, 1, 2]


def test_gate_text_normalisation() -> None:
    from engram_server.domain.service import normalise_text  # noqa: PLC0415

    assert normalise_text("I live in Berlin.") == normalise_text("  i LIVE in   berlin ")
    assert normalise_text("我住在上海。") == normalise_text("我住在上海")
    assert normalise_text("ＡＢＣ１２３") == normalise_text("abc123")  # full-width
    assert normalise_text("I live in Berlin.") != normalise_text("I lived in Berlin.")
