"""The rerank stage's order: reciprocal rank fusion of a result's own rank and the cross-encoder's
(:func:`rrf_order`, :func:`model_ranking`), and the real cross-encoder's judgements."""

from __future__ import annotations

import pytest

from engram_server.adapters import rerank
from engram_server.domain.ranking import model_ranking, rrf_order


def test_model_ranking_orders_scored_places_by_logit() -> None:
    assert model_ranking([0.0, 5.0, -1.0]) == [1, 0, 2]


def test_model_ranking_keeps_unscored_in_their_place() -> None:
    # place 1 has no logit (not English): it stays the model's second; the others fill 0 and 2
    assert model_ranking([-3.0, None, 4.0]) == [2, 1, 0]


def test_rrf_agreement_keeps_order() -> None:
    assert rrf_order([0, 1, 2, 3]) == [0, 1, 2, 3]


def test_rrf_lifts_what_the_model_ranks_first() -> None:
    # the model ranks the fourth result first: with c=30 it passes results 1..2 (1/33+1/30 >
    # 1/31+1/31) but not the first (1/30+1/31)
    order = rrf_order([3, 0, 1, 2], c=30.0)
    assert order == [0, 3, 1, 2]


def test_rrf_second_result_the_model_ranks_first_takes_the_top() -> None:
    # the first result is only the model's sixth: the second (model's first) passes it
    assert rrf_order([1, 2, 3, 4, 5, 0], c=30.0)[0] == 1


def test_rrf_is_a_permutation() -> None:
    n = 30
    model = list(reversed(range(n)))
    out = rrf_order(model)
    assert sorted(out) == list(range(n))


needs_model = pytest.mark.skipif(
    not rerank.available(), reason="the reranking model package is not installed"
)


@needs_model
def test_cross_encoder_prefers_the_answer() -> None:
    ce = rerank.CrossEncoderReranker()
    q = "Where did Ann move to in March?"
    texts = [
        "Bob: I started a pottery class on Thursdays.",
        "Ann: I moved to Porto in March. The new flat is near the river.",
        "Ann: My sister is visiting in May.",
    ]
    logits = ce.score_sync(q, texts)
    assert len(logits) == 3
    assert max(range(3), key=lambda i: logits[i]) == 1


@needs_model
def test_cross_encoder_batches_mixed_lengths_like_single_calls() -> None:
    ce = rerank.CrossEncoderReranker(cache_pairs=0)
    q = "what colour is the car?"
    texts = ["The car is red.", "A much longer sentence about the weather, the trains and the car park " * 5]
    together = ce.score_sync(q, texts)
    alone = [ce.score_sync(q, [t])[0] for t in texts]
    # (the int8 model quantises activations per batch: padding shifts a logit by a few hundredths)
    assert together == pytest.approx(alone, abs=0.1)


@needs_model
def test_cross_encoder_reads_no_further_than_max_tokens() -> None:
    # A memory of ~200 tokens: what follows its first MAX_TOKENS (128) tokens, query included,
    # is never read, so it cannot change the logit (nor what the pair costs).
    ce = rerank.CrossEncoderReranker()
    assert rerank.MAX_TOKENS == 128
    q = "Where did Ann move to in March?"
    head = "Ann: I moved to Porto in March. " + "The flat is small but bright and near the river. " * 12
    a, b = ce.score_sync(
        q, [head + "We also went to Lisbon.", head + "Bob lives in Berlin now, and Ann in Oslo."]
    )
    assert a == b
    # the same memory read whole (512 tokens) does see the end
    whole = rerank.CrossEncoderReranker(max_tokens=512)
    x, y = whole.score_sync(
        q, [head + "We also went to Lisbon.", head + "Bob lives in Berlin now, and Ann in Oslo."]
    )
    assert x != y


@needs_model
def test_cut_keeps_the_scores_of_short_memories() -> None:
    # LoCoMo-sized turns (well under 128 tokens with the query) score the same, in the same order,
    # whether pairs are cut at 128 or read whole.
    q = "What does Tim do to escape reality?"
    texts = [
        "Tim: Reading a great fantasy book helps me escape, honestly.",
        "John: I went to the gym three times this week and feel great.",
        "Tim: I have an exam on Friday, so I am studying a lot.",
        "Tim: Harry Potter is my favourite series; I reread it every winter when things get hard.",
    ]
    cut = rerank.CrossEncoderReranker().score_sync(q, texts)
    whole = rerank.CrossEncoderReranker(max_tokens=512).score_sync(q, texts)
    assert cut == pytest.approx(whole, abs=1e-4)
    assert sorted(range(4), key=lambda i: -cut[i]) == sorted(range(4), key=lambda i: -whole[i])


@needs_model
def test_the_session_runs_the_threads_asked_for_without_spinning() -> None:
    # onnxruntime's intra-op workers spin between operators by default (at 2 threads that doubled
    # a call's CPU time: `eval.locomo_rerank timing`, docs/performance.md); the session is built
    # with spinning off.
    # Checked on the session's own options, not by timing a call (timings flake on a loaded CI).
    ce = rerank.CrossEncoderReranker(threads=2, cache_pairs=0)
    ce.score_sync("What does Tim do to escape reality?", ["Tim: I read fantasy books."])
    opts = ce._session.get_session_options()
    assert opts.intra_op_num_threads == 2
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    one = rerank.CrossEncoderReranker(threads=0, cache_pairs=0)
    one.score_sync("q", ["t"])
    assert one._session.get_session_options().intra_op_num_threads == 1


@needs_model
def test_a_repeated_question_reads_only_new_memories() -> None:
    ce = rerank.CrossEncoderReranker(cache_pairs=4)
    q = "Where did Ann move to in March?"
    texts = [
        "Ann: I moved to Porto in March.",
        "Bob: I started a pottery class.",
        "Ann: My sister visits in May.",
    ]
    first = ce.score_sync(q, texts)
    assert ce.pairs_scored == 3
    # the same question again: nothing is read, the same logits come back
    assert ce.score_sync(q, texts) == first
    assert ce.pairs_scored == 3
    # a new memory among them: only it is read
    again = ce.score_sync(q, [*texts, "Cleo: I moved to Lyon in March."])
    assert again[:3] == first
    assert ce.pairs_scored == 4
    # another question reads its pairs; the cache keeps the 4 most recently used pairs
    ce.score_sync("What class did Bob start?", texts[1:2])
    assert ce.pairs_scored == 5
    ce.score_sync(q, texts[:1])
    assert ce.pairs_scored == 6  # (q, texts[0]) was the least recently used: dropped, read again
    # a duplicated text is read once
    ce.score_sync("Who visits in May?", [texts[2], texts[2]])
    assert ce.pairs_scored == 7


@needs_model
def test_no_cache_reads_every_time() -> None:
    ce = rerank.CrossEncoderReranker(cache_pairs=0)
    ce.score_sync("q", ["a", "b"])
    ce.score_sync("q", ["a", "b"])
    assert ce.pairs_scored == 4
