"""The cross-script pair set is well formed, and the rule it measures picks its threshold on the tune
half only (no server or model needed; the run itself is ``python -m eval.cross_script``)."""

from __future__ import annotations

from collections import Counter

from eval.cross_script import (
    Row,
    choose_floor,
    choose_threshold,
    load,
    refused,
    refused_by_alignment,
    summarise,
)


def test_cross_script_pairs_are_both_kinds_both_directions_and_split() -> None:
    pairs = load()
    assert len({p["id"] for p in pairs}) == len(pairs) >= 40
    assert all(p["a"] != p["b"] and p["reason"] for p in pairs)
    assert Counter(p["kind"] for p in pairs) == {"restatement": 36, "different": 36}
    assert {p["lang"] for p in pairs} == {"en>zh", "zh>en"}
    for kind in ("restatement", "different"):
        splits = Counter(p["split"] for p in pairs if p["kind"] == kind)
        assert splits == {"tune": 18, "report": 18}
    # the changes a translation can hide, beyond what the specifics see
    assert {p["subclass"] for p in pairs if p["kind"] == "different"} >= {
        "number",
        "name",
        "content",
        "negation",
        "role_swap",
        "date",
    }


def _row(kind: str, split: str, sim: float, conflicts: tuple[str, ...] = (), aligned: bool = False) -> Row:
    return Row(f"{kind}-{split}-{sim}", kind, "zh>en", "x", split, sim, conflicts, aligned)


def test_the_threshold_comes_from_the_tune_half_and_is_scored_on_the_report_half() -> None:
    rows = [
        _row("restatement", "tune", 0.70),
        _row("different", "tune", 0.60),
        _row("different", "tune", 0.90, ("number",)),  # the specifics catch it: does not set the bar
        _row("restatement", "report", 0.65),
        _row("different", "report", 0.66),  # above the tune bar: refused on the report half
    ]
    assert choose_threshold([r for r in rows if r.split == "tune"]) == 0.6001
    assert not refused(rows[2], 0.5)
    summary = summarise(rows)
    assert summary["threshold_from_tune"] == 0.6001
    assert summary["splits"]["tune"]["different_refused"] == 0
    assert summary["splits"]["tune"]["restatements_refused"] == 1
    assert summary["splits"]["report"]["different_refused"] == 1
    assert summary["splits"]["report"]["restatements_refused"] == 1


def test_the_floor_keeps_every_aligned_tune_translation_and_comes_from_the_tune_half() -> None:
    rows = [
        _row("restatement", "tune", 0.58, aligned=True),
        _row("restatement", "tune", 0.47, aligned=True),
        _row("restatement", "tune", 0.30),  # not aligned: does not lower the floor
        _row("restatement", "report", 0.41, aligned=True),  # report half: never sets the floor
        _row("different", "report", 0.60),
    ]
    assert choose_floor([r for r in rows if r.split == "tune"]) == 0.45
    summary = summarise(rows)
    assert summary["floor_from_tune"] == 0.45
    assert summary["splits"]["tune"]["restatements_refused_by_alignment"] == 2
    assert summary["splits"]["report"]["restatements_refused_by_alignment"] == 0  # below the floor
    assert summary["splits"]["report"]["different_refused_by_alignment"] == 0
    assert not refused_by_alignment(rows[4], 0.45)
