"""The gate's labelled pair sets and the kept-apart taskset are well formed (no server needed; the
runs themselves are `make eval`)."""

from __future__ import annotations

import json
from collections import Counter

from eval.gate_pairs import PAIRS_DIR, PairResult, load_pairs, summarise
from eval.regression import TASKSET_DIR


def test_pair_sets_are_large_bilingual_and_split() -> None:
    different = load_pairs(PAIRS_DIR / "different_facts.jsonl")
    restated = load_pairs(PAIRS_DIR / "restatements.jsonl")
    for pairs in (different, restated):
        assert len(pairs) >= 40
        assert len({p["id"] for p in pairs}) == len(pairs)
        assert all(p["a"] != p["b"] and p["reason"] for p in pairs)
        splits = Counter(p["split"] for p in pairs)
        assert splits["tune"] >= 20 and splits["report"] >= 20
    assert {p["lang"] for p in different} >= {"en", "zh", "en>zh", "zh>en"}
    assert {p["lang"] for p in restated} >= {"en", "zh", "en>zh", "zh>en"}
    kinds = {p["subclass"] for p in different}
    assert kinds >= {"number", "identifier", "date", "time", "amount", "name", "negation", "role_swap"}
    # translations with one thing changed, both directions: the translation gate must refuse none
    bilingual = Counter(p["subclass"] for p in different if ">" in p["lang"])
    assert all(bilingual[k] >= 2 for k in ("number", "date", "name", "negation", "role_swap"))


def test_summary_counts_outcomes_per_group() -> None:
    rows = [
        PairResult("different_facts", "d1", "en", "number", "tune", "near_duplicate", 0.95, "", True),
        PairResult("different_facts", "d2", "zh", "number", "report", "duplicate", 0.97, "", False),
        PairResult("restatements", "r1", "en", "word_order", "report", "duplicate", 0.96, "", True),
    ]
    table = summarise(rows)
    assert table["different_facts"]["all"] == {
        "pairs": 2,
        "duplicate": 1,
        "near_duplicate": 1,
        "created": 0,
        "passed": 1,
    }
    assert table["different_facts"]["lang=zh"]["duplicate"] == 1
    assert table["restatements"]["split=report"]["passed"] == 1


def test_kept_apart_taskset_cases_say_why_they_exist() -> None:
    data = json.loads((TASKSET_DIR / "kept_apart_v1.json").read_text(encoding="utf-8"))
    cases = data["cases"]
    assert len(cases) >= 12
    assert len({c["id"] for c in cases}) == len(cases)
    assert all(c["description"] for c in cases)
    assert sum(c["category"] == "kept_apart" for c in cases) >= 8
    assert {c["lang"] for c in cases} >= {"en", "zh", "mixed"}
