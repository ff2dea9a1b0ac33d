"""Decay and fusion (pure domain)."""

import math

import numpy as np
import pytest

from engram_server.domain.model import MemoryType
from engram_server.domain.ranking import (
    DECAY_PER_HOUR,
    FusionMode,
    HybridParams,
    RescoreParams,
    Weights,
    _best_neighbour_sorted,
    best_neighbour,
    decay_array,
    evidence,
    fuse,
    fuse_array,
    fuse_value,
    hybrid_relevance,
    impute_blind_lexical,
    lead_label,
    make_score,
    mmr_order,
    names_label,
    question_share,
    recency,
    recency_array,
    rescore,
    rescore_cue,
    rescore_cues,
)

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
    w = Weights()
    assert (w.relevance, w.recency, w.importance) == (1.0, 0.05, 0.02)
    assert HybridParams().fusion is FusionMode.ADDITIVE
    additive = fuse(0.8, 0.5, 7, w, raw=0.93)  # the default
    assert additive.final == pytest.approx(1.0 * 0.8 + 0.05 * 0.5 + 0.02 * 0.7)
    scaled = fuse(0.8, 0.5, 7, w, raw=0.93, mode=FusionMode.SCALED)
    assert scaled.final == pytest.approx(0.8 * (1.0 + 0.05 * 0.5 + 0.02 * 0.7))
    for s in (additive, scaled):
        assert (s.relevance, s.recency, s.importance, s.raw_similarity) == (
            0.8,
            0.5,
            pytest.approx(0.7),
            0.93,
        )


@pytest.mark.parametrize("mode", list(FusionMode))
def test_fresher_and_more_important_wins_at_equal_relevance(mode: FusionMode) -> None:
    old = fuse(0.7, recency(MemoryType.EVENT, NOW - 48 * H, NOW), 5, Weights(), 0.9, mode=mode)
    new = fuse(0.7, recency(MemoryType.EVENT, NOW - 1 * H, NOW), 5, Weights(), 0.9, mode=mode)
    important = fuse(0.7, recency(MemoryType.EVENT, NOW - 1 * H, NOW), 9, Weights(), 0.9, mode=mode)
    assert important.final > new.final > old.final


@pytest.mark.parametrize("mode", list(FusionMode))
def test_relevance_leads_under_the_default_weights(mode: FusionMode) -> None:
    """A memory more relevant by more than w_recency + w_importance wins whatever its age and
    importance: a 0.92 event decayed to ~0 beats never-decaying directives at 0.62–0.66 (the
    observed failure), and a long-decayed event beats a brand-new unrelated one."""
    old_event = recency(MemoryType.EVENT, NOW - 24 * 30 * H, NOW)  # a month old: ~0.0007
    event = fuse(0.92, old_event, 5, Weights(), 0.0, mode=mode).final
    for rel in (0.62, 0.66, 0.85):
        assert event > fuse(rel, 1.0, 10, Weights(), 0.0, mode=mode).final
    assert (
        fuse(0.6, old_event, 5, Weights(), 0.0, mode=mode).final
        > fuse(0.1, 1.0, 9, Weights(), 0.0, mode=mode).final
    )
    # ... while recency still orders comparably relevant memories (0.02 apart): the fresh one first
    assert (
        fuse(0.70, 1.0, 5, Weights(), 0.0, mode=mode).final
        > fuse(0.72, old_event, 5, Weights(), 0.0, mode=mode).final
    )


def test_evidence_reports_lexical_and_episode_apart_from_relevance() -> None:
    p = HybridParams(semantic_weight=0.5, lexical_power=1.0, context_weight=0.5, context_window=300.0)
    semantic = _arr(0.8, 0.3, 0.5)
    ev = evidence(semantic, _arr(0.0, 8.0, 0.0), _arr(0, 60, 10_000), p)
    assert ev.relevance.tolist() == semantic.tolist()  # never inflated
    # lexical: the BM25 leader is lifted to max(0.3, 0.5·0.3 + 0.5·1) = 0.65
    assert ev.lexical.tolist() == pytest.approx([0.0, 0.35, 0.0])
    # episode: 0.3 (0.65 with its lexical lift) written a minute after 0.8 inherits half the lead;
    # 0.8 inherits nothing (its neighbour is below it); the third is alone in its window
    assert ev.episode.tolist() == pytest.approx([0.0, 0.5 * (0.8 - 0.65), 0.0])
    assert ev.combined.tolist() == pytest.approx(
        hybrid_relevance(semantic, _arr(0.0, 8.0, 0.0), _arr(0, 60, 10_000), p).tolist()
    )


@pytest.mark.parametrize("seed", range(6))
def test_evidence_is_hybrid_relevance_split_to_the_bit(seed: int) -> None:
    """``evidence`` computes the lexical match once and the episode lift over it: its parts are
    those of ``hybrid_relevance`` without and with the episode context, bit for bit (blind
    candidates, all-zero BM25, a lexical power, events only)."""
    from dataclasses import replace  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    n = 180
    sem = rng.uniform(0.0, 1.0, n)
    lexical = (
        np.where(rng.uniform(size=n) < 0.4, rng.uniform(0.0, 12.0, n), 0.0) if seed != 3 else np.zeros(n)
    )
    created = 1.8e9 + rng.uniform(0.0, 5000.0, n)
    episodic = rng.uniform(size=n) < 0.7 if seed % 2 else None
    blind = rng.uniform(size=n) < 0.2 if seed != 4 else None
    p = HybridParams(
        semantic_weight=0.6, lexical_power=1.0 if seed < 2 else 0.7, context_weight=0.4, context_window=600.0
    )
    matched = hybrid_relevance(sem, lexical, created, replace(p, context_weight=0.0), blind=blind)
    full = hybrid_relevance(sem, lexical, created, p, episodic, blind=blind)
    ev = evidence(sem, lexical, created, p, episodic, blind=blind)
    zero = np.zeros(n)
    assert ev.relevance.tobytes() == sem.tobytes()
    assert ev.lexical.tobytes() == np.maximum(matched - sem, zero).tobytes()
    assert ev.episode.tobytes() == np.maximum(full - matched, zero).tobytes()


def _arr(*xs: float) -> np.ndarray:
    return np.array(xs, dtype=np.float64)


def test_lexical_evidence_only_raises_relevance() -> None:
    p = HybridParams(semantic_weight=0.5, lexical_power=1.0, context_weight=0.0)
    rel = hybrid_relevance(_arr(0.6, 0.4, 0.5), _arr(0.0, 8.0, 4.0), _arr(0, 1000, 2000), p)
    # best lexical match: max(0.4, 0.5·0.4 + 0.5·1) = 0.7; half as good lexically: max(0.5, 0.5) = 0.5;
    # no shared word keeps its semantic relevance 0.6
    assert rel.tolist() == pytest.approx([0.6, 0.7, 0.5])
    # no lexical side (or no lexical match at all): the semantic relevance unchanged
    assert hybrid_relevance(_arr(0.6, 0.4), None, _arr(0, 1000), p).tolist() == pytest.approx([0.6, 0.4])
    assert hybrid_relevance(_arr(0.6, 0.4), _arr(0, 0), _arr(0, 1000), p).tolist() == pytest.approx(
        [0.6, 0.4]
    )


def test_lexical_power_credits_partial_word_matches() -> None:
    """With p < 1 a memory that shares some of the query's words (a quarter of the best BM25 score)
    is credited a real share of the lexical evidence; the order of lexical scores is kept and the
    best lexical match gets the same lift as with the linear form."""
    sem, lex, t = _arr(0.5, 0.5, 0.5, 0.5), _arr(8.0, 2.0, 0.5, 0.0), _arr(0, 1000, 2000, 3000)
    linear = hybrid_relevance(sem, lex, t, HybridParams(lexical_power=1.0, context_weight=0.0))
    rooted = hybrid_relevance(sem, lex, t, HybridParams(lexical_power=0.5, context_weight=0.0))
    # (2/8) ** 0.5 = 0.5: max(0.5, 0.5·0.5 + 0.5·0.5) = 0.5; linear: 0.25 → no lift either
    # (0.5/8) ** 0.5 = 0.25 → none; the best match: 0.5·0.5 + 0.5·1 = 0.75 in both
    assert linear.tolist() == pytest.approx([0.75, 0.5, 0.5, 0.5])
    assert rooted.tolist() == pytest.approx([0.75, 0.5, 0.5, 0.5])
    low = _arr(0.2, 0.2, 0.2, 0.2)
    linear = hybrid_relevance(low, lex, t, HybridParams(lexical_power=1.0, context_weight=0.0))
    rooted = hybrid_relevance(low, lex, t, HybridParams(lexical_power=0.5, context_weight=0.0))
    # a weakly related memory with a quarter of the best score: 0.1 + 0.5·0.25 vs 0.1 + 0.5·0.5
    assert linear.tolist() == pytest.approx([0.6, 0.225, 0.2, 0.2])
    assert rooted.tolist() == pytest.approx([0.6, 0.35, 0.225, 0.2])
    assert np.all(np.diff(rooted) <= 0)  # lexical order kept
    assert HybridParams().lexical_power == 0.5


def test_blind_candidates_get_the_lexical_score_of_their_semantic_rank() -> None:
    """A memory in a script the query has no word in cannot match lexically: its 0 is no evidence."""
    sem = _arr(0.2, 0.3, 0.5, 0.6, 0.7, 0.1, 0.45)
    lex = _arr(0.0, 1.0, 0.5, 0.0, 0.0, 0.0, 0.0)
    blind = np.array([False, False, False, False, True, True, True])
    out = impute_blind_lexical(sem, lex, blind)
    # visible: semantic 0.2, 0.3, 0.5, 0.6 with lexical 0, 1, 0.5, 0 (sorted: 0, 0, 0.5, 1)
    # 0.7 is above every visible one: the best lexical score; 0.1 below all: the lowest;
    # 0.45 is above half of them: the median
    assert out.tolist() == pytest.approx([0.0, 1.0, 0.5, 0.0, 1.0, 0.0, 0.25])
    assert lex.tolist() == [0.0, 1.0, 0.5, 0.0, 0.0, 0.0, 0.0]  # the input is not modified
    # a blind candidate that does match lexically (a Chinese name inside an English memory) keeps it
    kept = impute_blind_lexical(_arr(0.9, 0.5), _arr(0.3, 1.0), np.array([True, False]))
    assert kept.tolist() == pytest.approx([0.3, 1.0])
    # nothing blind, or nothing visible: unchanged
    assert impute_blind_lexical(sem, lex, np.zeros(7, dtype=bool)).tolist() == lex.tolist()
    all_blind = impute_blind_lexical(_arr(0.5, 0.4), _arr(0.0, 0.0), np.array([True, True]))
    assert all_blind.tolist() == [0.0, 0.0]


def test_blind_imputation_is_monotone_and_only_raises() -> None:
    rng = np.random.default_rng(7)
    sem = rng.uniform(0.0, 1.0, 200)
    lex = np.where(rng.uniform(0.0, 1.0, 200) < 0.4, rng.uniform(0.0, 1.0, 200), 0.0)
    blind = rng.uniform(0.0, 1.0, 200) < 0.3
    p = HybridParams(semantic_weight=0.5, lexical_power=1.0, context_weight=0.0)
    t = np.zeros(200)
    plain = hybrid_relevance(sem, lex, t, p)
    fair = hybrid_relevance(sem, lex, t, p, blind=blind)
    assert np.all(fair >= plain - 1e-12)
    assert np.array_equal(fair[~blind], plain[~blind])  # visible candidates are untouched
    order = np.argsort(sem[blind & (lex == 0)])
    assert np.all(np.diff(fair[blind & (lex == 0)][order]) >= -1e-12)


def test_blind_translation_outranks_a_word_sharing_distractor() -> None:
    p = HybridParams(semantic_weight=0.5, lexical_power=1.0, context_weight=0.0)
    # the translation is semantically closest but shares no word; the distractor shares one word
    sem, lex, t = _arr(0.55, 0.30, 0.20), _arr(0.0, 6.0, 0.0), _arr(0, 0, 0)
    plain = hybrid_relevance(sem, lex, t, p)
    assert plain.argmax() == 1  # 0.5·0.30 + 0.5·1 = 0.65 > 0.55
    fair = hybrid_relevance(sem, lex, t, p, blind=np.array([True, False, False]))
    assert fair.tolist() == pytest.approx([0.775, 0.65, 0.20])


def test_episode_context_lifts_towards_the_best_neighbour_only() -> None:
    p = HybridParams(context_weight=0.5, context_window=300.0)
    t = _arr(0, 60, 10_000, 10_030)
    rel = hybrid_relevance(_arr(0.8, 0.4, 0.3, 0.35), None, t, p)
    # 0.4 sits 60 s after 0.8: lifted half-way (0.6); 0.8 is never lowered by its weaker neighbour;
    # the other episode is hours later and lifts only within itself (0.3 -> 0.325)
    assert rel.tolist() == pytest.approx([0.8, 0.6, 0.325, 0.35])
    # outside the window, nothing moves
    far = hybrid_relevance(_arr(0.8, 0.4), None, _arr(0, 301), p)
    assert far.tolist() == pytest.approx([0.8, 0.4])
    off = hybrid_relevance(_arr(0.8, 0.4), None, _arr(0, 60), HybridParams(context_weight=0.0))
    assert off.tolist() == pytest.approx([0.8, 0.4])


def test_only_episodic_memories_share_context() -> None:
    """Facts imported together (identity, directive, insight) are not an episode."""
    p = HybridParams(context_weight=0.5, context_window=300.0)
    sem, t = _arr(0.8, 0.4, 0.4), _arr(0, 10, 20)
    rel = hybrid_relevance(sem, None, t, p, episodic=np.array([True, True, False]))
    assert rel.tolist() == pytest.approx([0.8, 0.6, 0.4])
    facts = hybrid_relevance(sem, None, t, p, episodic=np.array([False, True, True]))
    assert facts.tolist() == pytest.approx([0.8, 0.4, 0.4])


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


def test_array_forms_match_the_scalar_ones() -> None:
    """Search ranks with the array forms; they must agree with recency() and fuse() exactly."""
    rng = np.random.default_rng(3)
    types = [list(MemoryType)[i % 4] for i in range(40)]
    now = 1_800_000_000.0
    created = now - rng.uniform(-3600, 400 * 24 * 3600, size=40)  # some in the future
    relevance = rng.uniform(0, 1, size=40)
    importance = rng.integers(1, 11, size=40).astype(np.float64)
    rec = recency_array(decay_array(types), created, now)
    for mode in FusionMode:
        final = fuse_array(relevance, rec, importance, Weights(), mode=mode)
        for i, t in enumerate(types):
            assert rec[i] == recency(t, float(created[i]), now)
            want = fuse(float(relevance[i]), rec[i], int(importance[i]), Weights(), 0.0, mode=mode)
            assert final[i] == want.final


def test_best_neighbour_is_the_brute_force_reading_of_the_episode_window() -> None:
    """Both ways of the episode neighbour search (all pairs for a few items, the O(n log n) sorted
    one for more) against the n × n definition: ties in time, items exactly ``window`` apart,
    single items, runs longer than a power of two, sizes on both sides of the switch."""
    rng = np.random.default_rng(7)
    for k in range(2000):
        n = int(rng.integers(1, 70)) if k % 4 else int(rng.integers(100, 300))
        t = np.round(rng.random(n) * rng.choice([50.0, 1000.0, 6000.0]), int(rng.integers(0, 2)))
        if n > 3:
            t[1] = t[0] + 300.0  # exactly on the window's edge
            t[3] = t[2]  # the same second
        v = rng.random(n)
        near = np.abs(t[:, None] - t[None, :]) <= 300.0
        np.fill_diagonal(near, False)
        want = np.where(near, v[None, :], -np.inf).max(axis=1)
        assert np.array_equal(best_neighbour(t, v, 300.0), want)
        assert np.array_equal(_best_neighbour_sorted(t, v, 300.0), want)


def test_blind_imputation_uses_numpy_s_linear_quantile() -> None:
    rng = np.random.default_rng(8)
    for _ in range(500):
        n = int(rng.integers(2, 60))
        sem = rng.random(n)
        lex = np.where(rng.random(n) < 0.4, 0.0, rng.random(n))
        blind = rng.random(n) < 0.3
        missing = blind & (lex <= 0)
        seen = ~missing
        out = impute_blind_lexical(sem, lex, blind)
        if not missing.any() or not seen.any():
            assert np.array_equal(out, lex)
            continue
        p = np.searchsorted(np.sort(sem[seen]), sem[missing], side="right") / seen.sum()
        want = lex.copy()
        want[missing] = np.quantile(lex[seen], p)
        assert np.array_equal(out, want)


@pytest.mark.parametrize("mode", list(FusionMode))
def test_fuse_value_is_fuse_array_to_the_last_bit(mode: FusionMode) -> None:
    rng = np.random.default_rng(5)
    relevance = rng.uniform(0, 1.5, 500)
    rec = rng.uniform(0, 1, 500)
    importance = rng.integers(1, 11, 500) / 10.0 * 10.0  # as a search's Score carries it
    weights = Weights(relevance=0.9, recency=0.07, importance=0.03)
    arr = fuse_array(relevance, rec, importance, weights, mode=mode)
    one = [
        fuse_value(float(a), float(b), float(c), weights, mode=mode)
        for a, b, c in zip(relevance, rec, importance, strict=True)
    ]
    assert one == arr.tolist()


def test_lead_label_and_question_share() -> None:
    assert lead_label("Caroline: I went to the support group.") == "Caroline"
    assert lead_label("客服: 您的订单已发货。") == "客服"
    assert lead_label("The meeting is at 3: bring slides.") is None  # more than 4 words before ':'
    assert lead_label("12: a numbered line") is None
    # question sentences after the label; a trailing bracketed note is not a sentence of the turn
    assert question_share("Carol: Where did you go? It looked warm.") == pytest.approx(0.5)
    assert question_share("Tim: I love that film. [shares a photo: is it a poster?]") == 0.0
    assert question_share("你明天来吗？我们等你。") == pytest.approx(0.5)
    assert question_share("") == 0.0
    assert names_label("What did Caroline say?", "Caroline")
    assert not names_label("What did Carolines say?", "Caroline")  # whole words only
    assert names_label("客服说了什么？", "客服")  # unspaced scripts: as a substring


def test_rescore_adds_for_a_named_label_and_subtracts_for_questions() -> None:
    contents = ["Ann: I moved to Oslo.", "Bo: Did you move?", "Ann: Why? I liked it.", "Plain fact."]
    got = rescore("Where did Ann move?", contents, RescoreParams(question_penalty=0.04, subject_weight=0.05))
    assert got.tolist() == pytest.approx([0.05, -0.04, 0.05 - 0.02, 0.0])
    off = rescore("Where did Ann move?", contents, RescoreParams(question_penalty=0.0, subject_weight=0.0))
    assert off.tolist() == [0.0] * 4
    assert not RescoreParams(depth=0).enabled and RescoreParams().enabled


def test_rescoring_from_cues_is_rescoring_from_the_texts() -> None:
    """What a store keeps of each text (:func:`rescore_cue`) rescores exactly as the text does."""
    contents = [
        "Ann: I moved to Oslo.",
        "Bo: Did you move? Why?",
        "Ann: Why? I liked it. [shares a photo: is it Oslo?]",
        "Plain fact.",
        "",
        "客服: 你明天来吗？我们等你。",
        "Reminder to self: call Ann back?",
    ]
    cues = [rescore_cue(t) for t in contents]
    assert cues[0] == ("Ann", 0.0) and cues[3] is cues[4]  # (no label, no question: one shared cue)
    variants = (RescoreParams(), RescoreParams(question_penalty=0.0), RescoreParams(subject_weight=0.0))
    for query in ("Where did Ann move?", "客服说了什么？", "what did Bo ask", "nothing named"):
        for params in variants:
            # (the definition, text by text)
            want = []
            for text in contents:
                label = lead_label(text)
                named = label is not None and names_label(query, label)
                want.append(
                    (params.subject_weight if named and params.subject_weight > 0 else 0.0)
                    - params.question_penalty * question_share(text)
                )
            assert rescore_cues(query, cues, params).tolist() == pytest.approx(want, abs=1e-15)
            assert rescore(query, contents, params).tolist() == rescore_cues(query, cues, params).tolist()


def test_glossed_lexical_counts_cross_script_matches_as_lexical_terms() -> None:
    from engram_server.domain.ranking import glossed_lexical  # noqa: PLC0415

    # query words 0, 1 (a name), 2, 3; candidates: three English memories sharing the name (the
    # lexical side's best BM25), one Chinese memory matching all four words across scripts
    name_only = (frozenset({0, 1}), frozenset[int]())
    matches = [name_only, name_only, name_only, (frozenset[int](), frozenset({0, 1, 2, 3}))]
    norms = glossed_lexical(np.array([1.0, 1.0, 0.8, 0.0]), matches, 4)
    assert norms[3] == pytest.approx(1.0)
    assert norms[0] < 0.5 and norms[0] == pytest.approx(norms[1])
    assert norms[2] == pytest.approx(0.8 * norms[0])  # the lexical side's own order is kept
    # no candidate matches across scripts: the lexical side's scores, unchanged
    same = glossed_lexical(np.array([1.0, 0.5]), [name_only, name_only], 4)
    assert same.tolist() == [1.0, 0.5]


def test_lexical_lift_never_lowers_relevance() -> None:
    from engram_server.domain.ranking import HybridParams, lexical_lift  # noqa: PLC0415

    lift = lexical_lift(np.array([0.9, 0.5, 0.5]), np.array([0.0, 0.0, 1.0]), HybridParams())
    assert lift.tolist() == pytest.approx([0.0, 0.0, 0.25])


def test_make_score_builds_the_score_its_constructor_builds() -> None:
    """Every field in its place (distinct values: a swapped pair shows), equal and hashing alike,
    and still frozen."""
    import dataclasses  # noqa: PLC0415

    from engram_server.domain.ranking import Score  # noqa: PLC0415

    values = (0.91, 0.72, 0.53, 0.4, 0.85, 0.06, 0.07, -0.04, 0.66)
    made, plain = make_score(*values), Score(*values)
    assert made == plain and hash(made) == hash(plain) and repr(made) == repr(plain)
    assert dataclasses.astuple(made) == values
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.final = 1.0  # type: ignore[misc]


def test_make_ranked_builds_the_candidate_its_constructor_builds() -> None:
    import dataclasses  # noqa: PLC0415

    from engram_server.domain.service.commands import _Ranked  # noqa: PLC0415
    from engram_server.domain.service.searching import _make_ranked  # noqa: PLC0415

    score = make_score(0.9, 0.7, 0.5, 0.4, 0.8, 0.1, 0.0, 0.0, 0.0)
    vector = np.ones(3, dtype=np.float32)
    made = _make_ranked("c", "id-1", score, vector, "latin", 0.25)
    plain = _Ranked("c", "id-1", score, vector, "latin", 0.25)
    assert [getattr(made, f.name) is getattr(plain, f.name) for f in dataclasses.fields(_Ranked)] == [
        True
    ] * 6
    assert _make_ranked("c", "id-1", score, None, "", 0.0) == _Ranked("c", "id-1", score, None, "", 0.0)
