"""Fusion ranking: relevance (calibrated), typed recency decay, importance; optional MMR.

``final = w_rel·relevance + w_rec·recency + w_imp·importance/10`` with
``recency = decay_per_hour[type] ** hours_since_created``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engram_server.domain.model import MemoryType, Vector

#: Recency decay per hour. identity/directive never decay; insight half-life ≈ 144 days;
#: event half-life ≈ 2.9 days.
DECAY_PER_HOUR: dict[MemoryType, float] = {
    MemoryType.IDENTITY: 1.0,
    MemoryType.DIRECTIVE: 1.0,
    MemoryType.INSIGHT: 0.9998,
    MemoryType.EVENT: 0.99,
}


@dataclass(frozen=True, slots=True)
class Weights:
    relevance: float = 1.0
    recency: float = 0.5
    importance: float = 0.3


@dataclass(frozen=True, slots=True)
class Score:
    final: float
    relevance: float
    recency: float
    importance: float
    raw_similarity: float


def recency(memory_type: MemoryType, created_at: float, now: float) -> float:
    """decay ** hours since created_at; a memory dated in the future counts as brand new."""
    decay = DECAY_PER_HOUR[memory_type]
    if decay >= 1.0:
        return 1.0
    hours = max(0.0, (now - created_at) / 3600.0)
    return float(decay**hours)


def fuse(relevance: float, recency_value: float, importance: int, weights: Weights, raw: float) -> Score:
    imp = importance / 10.0
    final = weights.relevance * relevance + weights.recency * recency_value + weights.importance * imp
    return Score(final=final, relevance=relevance, recency=recency_value, importance=imp, raw_similarity=raw)


def mmr_order(
    scores: Sequence[float],
    vectors: Sequence[Vector],
    k: int,
    lam: float,
    calibrate: Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]] | None = None,
) -> list[int]:
    """Maximal marginal relevance over candidates (indices into ``scores``).

    Scores are min-max normalised; at each step pick argmax of
    ``lam·score − (1 − lam)·max similarity to the already selected``, where similarity is the
    cosine mapped through ``calibrate`` (the model's calibrated document scale) when given.
    """
    n = len(scores)
    if n == 0 or k <= 0:
        return []
    s = np.asarray(scores, dtype=np.float64)
    span = float(s.max() - s.min())
    norm = (s - s.min()) / span if span > 0 else np.ones_like(s)
    mat = np.vstack([np.asarray(v, dtype=np.float64) for v in vectors])
    sims = mat @ mat.T
    if calibrate is not None:
        sims = calibrate(sims)
    selected: list[int] = []
    max_sim = np.full(n, -np.inf)
    remaining = np.ones(n, dtype=bool)
    for _ in range(min(k, n)):
        penalty = np.where(np.isfinite(max_sim), max_sim, 0.0)
        value = lam * norm - (1.0 - lam) * penalty
        value[~remaining] = -np.inf
        best = int(np.argmax(value))
        selected.append(best)
        remaining[best] = False
        max_sim = np.maximum(max_sim, sims[best])
    return selected
