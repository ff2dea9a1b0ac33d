"""Fusion ranking: calibrated relevance plus lexical and episode evidence, typed recency decay,
importance; optional MMR.

Evidence of a candidate, per collection (see :func:`evidence`):

1. ``relevance``: the cosine on the model's calibrated query scale, which is fitted onto the write
   gate's document scale — for the same two texts a search reports (within the calibration's
   error) the similarity the gate reports: above 0.92 a near copy, 0.82–0.92 a restatement,
   0.70–0.82 the same topic. Nothing below changes it.
2. ``lexical``: the BM25 score divided by the best BM25 score among the collection's candidates,
   raised to the power ``p`` (``lexical_power``, 0.5 by default: a memory with a quarter of the best
   BM25 score counts half, so sharing some of the query's words is evidence, not only sharing the
   best-scoring ones); ``matched = max(relevance, α·relevance + (1 − α)·bm25ᵖ)``, and
   ``lexical = matched − relevance`` (≥ 0: a paraphrase with no shared word keeps its relevance, it
   is not pushed down);
3. ``episode``: ``event`` memories written within ``context_window`` seconds of each other
   belong to one episode (a conversation, a task); an event inherits ``context_weight`` of the lead
   of its best-matching neighbouring event: ``episode = w_ctx·max(0, best_neighbour − matched)``.
   Identity, directive and insight memories are facts, not episodes: neither lifted nor lifting.

Final score, with ``recency = decay_per_hour[type] ** hours_since_created`` and importance/10:

* ``additive`` (default; the reference design's form):
  ``w_rel·(relevance + lexical + episode) + w_rec·recency + w_imp·importance/10``. With the default
  weights (1, 0.05, 0.02) recency and importance can move a memory by at most 0.07: a memory more
  relevant by more than that always ranks first (a 0.92 event decayed to nothing beats a
  never-decaying 0.66 directive), and recency orders comparably relevant memories (within the
  calibration's error, ~0.03–0.05) newest first. The reference's own weights (0.5, 0.3) let any
  fresh or never-decaying memory outrank relevant older ones whatever it says.
* ``scaled`` (the previous default): ``evidence·(w_rel + w_rec·recency + w_imp·importance/10)``.

Equal final scores put the newer memory first, then order by id (two equally relevant memories
whose recency has decayed to 0 still come out newest first, never in the store's order).

The defaults (form, weights, α, context weight) were chosen on LoCoMo evidence recall of the
*tuning* conversations conv-26, conv-41 and conv-43 only (``python -m eval.tune_ranking``; the
held-out conv-47 and conv-49 are reported, never tuned on). See docs/concepts/ranking.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, NamedTuple

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
    recency: float = 0.05
    importance: float = 0.02


class FusionMode(StrEnum):
    SCALED = "scaled"
    ADDITIVE = "additive"


@dataclass(frozen=True, slots=True)
class HybridParams:
    """How relevance is built from the semantic, lexical and episode-context evidence."""

    semantic_weight: float = 0.5  # α in max(semantic, α·semantic + (1 − α)·lexical)
    #: p in lexical = (BM25 / best BM25) ** p: below 1 a memory sharing the query's rarer words but
    #: not its best-scoring one still gets a real share of the lexical evidence (see module doc).
    lexical_power: float = 0.5
    context_weight: float = 0.5  # share of the lead of the best neighbour a memory inherits
    context_window: float = 300.0  # seconds between created_at of two memories of one episode
    fusion: FusionMode = FusionMode.ADDITIVE


@dataclass(frozen=True, slots=True, eq=False)
class Evidence:
    """One collection's candidates' evidence, aligned by candidate: ``relevance`` is the calibrated
    semantic relevance (the gate's scale), ``lexical`` and ``episode`` the lifts the lexical and
    episode-context evidence add on top of it (≥ 0; they reorder, they do not change relevance)."""

    relevance: npt.NDArray[np.float64]
    lexical: npt.NDArray[np.float64]
    episode: npt.NDArray[np.float64]

    @property
    def combined(self) -> npt.NDArray[np.float64]:
        return np.asarray(self.relevance + self.lexical + self.episode, dtype=np.float64)


def evidence(
    semantic: npt.NDArray[np.float64],
    lexical: npt.NDArray[np.float64] | None,
    created_at: npt.NDArray[np.float64],
    params: HybridParams,
    episodic: npt.NDArray[np.bool_] | None = None,
    *,
    blind: npt.NDArray[np.bool_] | None = None,
) -> Evidence:
    """:func:`hybrid_relevance` split into its parts: the calibrated ``semantic`` relevance, and
    what the lexical and the episode evidence add to it."""
    sem = np.asarray(semantic, dtype=np.float64)
    zero = np.zeros(len(sem))
    # (the two stages of ``hybrid_relevance``, each computed once: the lexical match, then the
    # episode lift over it)
    matched = _lexically_matched(sem, lexical, params, blind)
    full = _episode_lifted(matched, created_at, params, episodic)
    return Evidence(sem, np.maximum(matched - sem, zero), np.maximum(full - matched, zero))


def hybrid_relevance(
    semantic: npt.NDArray[np.float64],
    lexical: npt.NDArray[np.float64] | None,
    created_at: npt.NDArray[np.float64],
    params: HybridParams,
    episodic: npt.NDArray[np.bool_] | None = None,
    *,
    blind: npt.NDArray[np.bool_] | None = None,
) -> npt.NDArray[np.float64]:
    """Semantic plus lexical plus episode evidence of one collection's candidates (arrays aligned
    by candidate; see module doc). Search ranks by it; it reports the parts (:func:`evidence`).

    ``semantic`` is calibrated (0–1); ``lexical`` holds raw BM25 scores (None or all zero when the
    search had no lexical side); ``created_at`` in seconds; ``episodic`` marks the candidates that
    take part in episode context (events; all of them when None); ``blind`` marks the candidates the
    lexical side cannot see (written in a script the query has no word in; see
    :func:`impute_blind_lexical`).
    """
    return _episode_lifted(_lexically_matched(semantic, lexical, params, blind), created_at, params, episodic)


def _lexically_matched(
    semantic: npt.NDArray[np.float64],
    lexical: npt.NDArray[np.float64] | None,
    params: HybridParams,
    blind: npt.NDArray[np.bool_] | None,
) -> npt.NDArray[np.float64]:
    """:func:`hybrid_relevance` before the episode context: semantic plus lexical evidence."""
    matched = np.asarray(semantic, dtype=np.float64)
    if lexical is not None and len(lexical) and (top := float(np.max(lexical))) > 0:
        norm = np.asarray(lexical, dtype=np.float64) / top
        if blind is not None:
            norm = impute_blind_lexical(matched, norm, np.asarray(blind, dtype=bool))
        if params.lexical_power != 1.0:
            norm = np.power(norm, params.lexical_power)
        a = params.semantic_weight
        matched = np.maximum(matched, a * matched + (1.0 - a) * norm)
    return matched


def _episode_lifted(
    matched: npt.NDArray[np.float64],
    created_at: npt.NDArray[np.float64],
    params: HybridParams,
    episodic: npt.NDArray[np.bool_] | None,
) -> npt.NDArray[np.float64]:
    """:func:`hybrid_relevance`'s episode context over the ``matched`` (semantic plus lexical)
    evidence."""
    n = len(matched)
    if n < 2 or params.context_weight <= 0 or params.context_window <= 0:
        return matched
    t = np.asarray(created_at, dtype=np.float64)
    members = np.arange(n) if episodic is None else np.flatnonzero(np.asarray(episodic, dtype=bool))
    if len(members) < 2:
        return matched
    best = np.full(n, -np.inf)
    best[members] = best_neighbour(t[members], matched[members], params.context_window)
    lift = np.where(np.isfinite(best), np.maximum(0.0, best - matched), 0.0)
    return np.asarray(matched + params.context_weight * lift, dtype=np.float64)


#: Up to this many items :func:`best_neighbour` compares all pairs at once (numpy's per-call cost
#: dominates: 35 µs for 50 items, 78 for 120, vs 150–190 µs for the sparse table); above it the
#: n × n arrays outgrow the CPU caches (160 items: 350 vs 180 µs) and the sparse table wins.
_PAIRWISE_MAX = 128


def best_neighbour(
    times: npt.NDArray[np.float64], values: npt.NDArray[np.float64], window: float
) -> npt.NDArray[np.float64]:
    """For each item, the largest ``values`` of the *other* items whose time is within ``window`` of
    its own (``|t_j − t_i| ≤ window``), −inf when there is none. All pairs at once for a few items,
    else :func:`_best_neighbour_sorted` (O(n log n)); the same answer either way."""
    if len(times) <= _PAIRWISE_MAX:
        near = np.abs(times[:, None] - times[None, :]) <= window
        np.fill_diagonal(near, False)
        return np.asarray(np.where(near, values[None, :], -np.inf).max(axis=1, initial=-np.inf))
    return _best_neighbour_sorted(times, values, window)


def _best_neighbour_sorted(
    times: npt.NDArray[np.float64], values: npt.NDArray[np.float64], window: float
) -> npt.NDArray[np.float64]:
    """:func:`best_neighbour` in O(n log n): the items sorted by time, each one's neighbours are a
    contiguous run on either side of it, whose maxima a sparse table answers (for a search's few
    hundred candidates this is several times cheaper than the n × n comparison)."""
    n = len(times)
    order = np.argsort(times, kind="stable")
    ts, vs = times[order], values[order]
    lo = np.searchsorted(ts, ts - window, side="left")
    hi = np.searchsorted(ts, ts + window, side="right")
    # ``t ± window`` rounds: move each edge to where ``|t_j − t_i| ≤ window`` itself says
    # (monotone in t_j: rarely a step; ties in time step together).
    padded = np.concatenate(([-np.inf], ts, [np.inf]))  # padded[k + 1] = ts[k]
    while True:
        step = (ts - padded[lo + 1] > window).astype(np.intp) - (ts - padded[lo] <= window)
        if not step.any():
            break
        lo += step
    while True:
        step = (padded[hi + 1] - ts <= window).astype(np.intp) - (padded[hi] - ts > window)
        if not step.any():
            break
        hi += step
    # table[k, i] = max(vs[i : i + 2**k]) (−inf past the end)
    levels = max(1, int(n).bit_length())
    table = np.full((levels, n), -np.inf)
    table[0] = vs
    for k in range(1, levels):
        half = 1 << (k - 1)
        table[k, : n - half] = np.maximum(table[k - 1, : n - half], table[k - 1, half:])

    def run_max(a: npt.NDArray[np.intp], b: npt.NDArray[np.intp]) -> npt.NDArray[np.float64]:
        """max(vs[a:b]) per item, −inf for an empty run."""
        length = b - a
        k = np.zeros(n, dtype=np.intp)
        nonempty = length > 0
        k[nonempty] = np.log2(length[nonempty]).astype(np.intp)
        right = np.maximum(b - (1 << k), 0)
        out = np.maximum(table[k, np.minimum(a, n - 1)], table[k, right])
        return np.where(nonempty, out, -np.inf)

    here = np.arange(n)
    sorted_best = np.maximum(run_max(lo, here), run_max(here + 1, hi))
    out = np.empty(n)
    out[order] = sorted_best
    return out


def impute_blind_lexical(
    semantic: npt.NDArray[np.float64], lexical: npt.NDArray[np.float64], blind: npt.NDArray[np.bool_]
) -> npt.NDArray[np.float64]:
    """Normalised lexical scores with the blind candidates' zeros replaced by a quantile-matched
    stand-in.

    A memory written in a script the query has no word in (a Chinese memory, an English question)
    cannot share a term with the query: its lexical score of 0 says nothing about it, while
    memories in the query's script that share a word get a lexical lift. Left at 0, a translation
    that answers the question ranks below same-script memories that merely share a word with it.

    A blind candidate (``blind`` and lexical 0; one that does score lexically keeps its score) is
    credited the lexical score found at the same rank among the candidates the lexical side can
    see: with ``p`` the share of those whose semantic score is at most the blind one's, it gets the
    ``p``-quantile of their lexical scores. Semantic and lexical evidence are assumed to rank alike,
    so a cross-script memory that the model ranks above every visible candidate is credited the best
    lexical match and one at the bottom gets nothing. Monotone in the semantic score; never lowers a
    candidate; no-op when no candidate is blind or none is visible.
    """
    missing = blind & (lexical <= 0)
    seen = ~missing
    if not missing.any() or not seen.any():
        return lexical
    ref_sem = np.sort(semantic[seen])
    p = np.searchsorted(ref_sem, semantic[missing], side="right") / len(ref_sem)
    out = lexical.copy()
    out[missing] = _quantile_linear(np.sort(lexical[seen]), p)
    return out


def _quantile_linear(ordered: npt.NDArray[np.float64], q: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``np.quantile(ordered, q)`` (its default, linear method) of already sorted values, without
    its generic machinery (a tenth of the time for a search's candidates); same arithmetic."""
    at = q * (len(ordered) - 1)
    below = np.floor(at).astype(np.intp)
    above = np.minimum(below + 1, len(ordered) - 1)
    t = at - below
    a, b = ordered[below], ordered[above]
    diff = b - a
    return np.where(t >= 0.5, b - diff * (1 - t), a + diff * t)


def lexical_lift(
    semantic: npt.NDArray[np.float64], norm: npt.NDArray[np.float64], params: HybridParams
) -> npt.NDArray[np.float64]:
    """What a normalised lexical score ``norm`` (0–1, before ``lexical_power``) adds to the
    calibrated ``semantic`` relevance, as :func:`hybrid_relevance` adds it (≥ 0)."""
    sem = np.asarray(semantic, dtype=np.float64)
    lex = np.power(np.asarray(norm, dtype=np.float64), params.lexical_power)
    a = params.semantic_weight
    return np.asarray(np.maximum(sem, a * sem + (1.0 - a) * lex) - sem, dtype=np.float64)


def glossed_lexical(
    store_norm: npt.NDArray[np.float64],
    matches: Sequence[tuple[frozenset[int], frozenset[int]]],
    units: int,
) -> npt.NDArray[np.float64]:
    """Normalised lexical scores (0–1) of the best candidates with the query's words they match
    only **across scripts** (through the dictionary: see
    :func:`engram_server.domain.crosslingual.cross_matches`) counted as lexical terms.

    ``store_norm`` is each candidate's BM25 score over the best BM25 score of its collection's
    candidates (the lexical side, which matches words only in their own script); ``matches`` holds,
    per candidate, the indices of the query's ``units`` content words it matches directly and
    across scripts. Each query word weighs its inverse document frequency among these candidates
    (BM25's ``ln(1 + (N − df + 0.5)/(df + 0.5))``, a word counted in a candidate that matches it
    either way). The direct matches are measured in the lexical side's own units (its BM25 score),
    the cross-script ones in these weights; the two scales meet at the best direct match:

    ``score = store_norm · D_best + G``, divided by its largest value,

    with ``D_best`` the largest weight of directly matched words among the candidates and ``G`` the
    weight of the candidate's cross-script matches. A candidate without cross-script matches keeps
    its lexical order; an English memory that shares only a name with an English question ranks,
    lexically, below the Chinese memory that answers it with the name, the verb and the object.
    Unchanged (``store_norm``) when no candidate matches across scripts.
    """
    n = len(matches)
    base = np.asarray(store_norm, dtype=np.float64)
    if not n or units <= 0 or not any(across for _, across in matches):
        return base
    df = np.zeros(units)
    for direct, across in matches:
        for i in direct | across:
            df[i] += 1
    weight = np.log1p((n - df + 0.5) / (df + 0.5))
    d = np.array([sum(weight[i] for i in direct) for direct, _ in matches])
    g = np.array([sum(weight[i] for i in across) for _, across in matches])
    d_best = float(d.max()) if float(d.max()) > 0 else float(g.max())
    combined = base * d_best + g
    top = float(combined.max())
    return combined / top if top > 0 else base


@dataclass(frozen=True, slots=True)
class Score:
    final: float
    relevance: float
    recency: float
    importance: float
    raw_similarity: float
    #: What the lexical (BM25) evidence adds to ``relevance`` in the fusion (≥ 0).
    lexical: float = 0.0
    #: What the episode context (neighbouring events) adds to ``relevance`` in the fusion (≥ 0).
    episode: float = 0.0
    #: What reading the memory's text adds in the fusion (:func:`rescore`; may be negative).
    rescore: float = 0.0
    #: The cross-encoder's judgement of the memory's text against the query (sigmoid of its logit,
    #: 0..1) when the search reranked it; 0 when not applied. Orders the reranked head only: it is
    #: not part of ``final``'s fusion (see :func:`rrf_order`).
    rerank: float = 0.0

    @property
    def evidence(self) -> float:
        """relevance + lexical + episode + rescore: what the fusion weighs with w_relevance."""
        return self.relevance + self.lexical + self.episode + self.rescore


#: ``Score``'s slots' own setters, in field order (see :func:`make_score`).
_SCORE_SLOTS: Final = tuple(
    Score.__dict__[name].__set__
    for name in (
        "final",
        "relevance",
        "recency",
        "importance",
        "raw_similarity",
        "lexical",
        "episode",
        "rescore",
        "rerank",
    )
)


def make_score(  # noqa: PLR0917 - positional, as the dataclass's own __init__ takes them
    final: float,
    relevance: float,
    recency: float,
    importance: float,
    raw_similarity: float,
    lexical: float,
    episode: float,
    rescore: float,
    rerank: float,
) -> Score:
    """``Score(final, relevance, …, rerank)``, every field given in order: the same object,
    built in half the time (the frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``; a search builds one for each of its ≈ 50 best candidates)."""
    score: Score = object.__new__(Score)
    a, b, c, d, e, f, g, h, i = _SCORE_SLOTS
    a(score, final)
    b(score, relevance)
    c(score, recency)
    d(score, importance)
    e(score, raw_similarity)
    f(score, lexical)
    g(score, episode)
    h(score, rescore)
    i(score, rerank)
    return score


def recency(memory_type: MemoryType, created_at: float, now: float) -> float:
    """decay ** hours since created_at; a memory dated in the future counts as brand new."""
    decay = DECAY_PER_HOUR[memory_type]
    if decay >= 1.0:
        return 1.0
    hours = max(0.0, (now - created_at) / 3600.0)
    return float(np.power(decay, hours))  # as recency_array computes it, to the last bit


def fuse(
    relevance: float,
    recency_value: float,
    importance: int,
    weights: Weights,
    raw: float,
    *,
    mode: FusionMode = FusionMode.ADDITIVE,
) -> Score:
    imp = importance / 10.0
    if mode is FusionMode.ADDITIVE:
        final = weights.relevance * relevance + weights.recency * recency_value + weights.importance * imp
    else:
        final = relevance * (weights.relevance + weights.recency * recency_value + weights.importance * imp)
    return Score(final=final, relevance=relevance, recency=recency_value, importance=imp, raw_similarity=raw)


def decay_array(types: Sequence[MemoryType]) -> npt.NDArray[np.float64]:
    """The hourly decay factor of each memory type (see :data:`DECAY_PER_HOUR`)."""
    return np.fromiter(map(DECAY_PER_HOUR.__getitem__, types), dtype=np.float64, count=len(types))


#: Reinforcement: a memory recalled ``n`` times (its ``access_count``, one per search that returned
#: it) ages ``1 + REINFORCEMENT·ln(1 + n)`` times more slowly: 10 recalls stretch an event's recency
#: half-life from 2.9 to 6.3 days, 100 recalls to 9.5 days. Never-decaying types stay at 1.
REINFORCEMENT = 0.5


def reinforced_recency(
    decay_per_hour: float, hours: float, access_count: int, strength: float = REINFORCEMENT
) -> float:
    """``decay_per_hour ** (hours / (1 + strength·ln(1 + access_count)))``: :func:`recency` slowed by
    how often the memory was recalled (1.0 for types that never decay)."""
    if decay_per_hour >= 1.0:
        return 1.0
    stretch = 1.0 + strength * math.log1p(max(0, access_count))
    return float(decay_per_hour ** (max(0.0, hours) / stretch))


def recency_array(
    decay: npt.NDArray[np.float64], created_at: npt.NDArray[np.float64], now: float
) -> npt.NDArray[np.float64]:
    """:func:`recency` of many memories at once, from their :func:`decay_array`."""
    hours = np.maximum(0.0, (now - np.asarray(created_at, dtype=np.float64)) / 3600.0)
    return np.where(decay >= 1.0, 1.0, np.power(decay, hours))


def fuse_array(
    relevance: npt.NDArray[np.float64],
    recency_value: npt.NDArray[np.float64],
    importance: npt.NDArray[np.float64],
    weights: Weights,
    *,
    mode: FusionMode = FusionMode.ADDITIVE,
) -> npt.NDArray[np.float64]:
    """The ``final`` score of :func:`fuse` for many memories at once (``importance`` on 1–10)."""
    imp = importance / 10.0
    if mode is FusionMode.ADDITIVE:
        out = weights.relevance * relevance + weights.recency * recency_value + weights.importance * imp
    else:
        out = relevance * (weights.relevance + weights.recency * recency_value + weights.importance * imp)
    return np.asarray(out, dtype=np.float64)


def fuse_value(
    relevance: float,
    recency_value: float,
    importance: float,
    weights: Weights,
    *,
    mode: FusionMode = FusionMode.ADDITIVE,
) -> float:
    """:func:`fuse_array` of one memory, in plain floats (the same operations in the same order,
    so the same bits; without numpy's per-call cost)."""
    imp = importance / 10.0
    if mode is FusionMode.ADDITIVE:
        return weights.relevance * relevance + weights.recency * recency_value + weights.importance * imp
    return relevance * (weights.relevance + weights.recency * recency_value + weights.importance * imp)


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


# ---------------------------------------------------------------------------------------------
# Reading the memory's text: the query-time rescoring of the best candidates


#: A leading label before a colon: ``"Caroline: …"``, ``"客服: …"`` (a speaker or author, the
#: convention of stored chat turns): up to 4 words of letters, no sentence punctuation.
_LEAD_LABEL = re.compile(r"^\s*([^\W\d_][\w'’. -]{0,38}?)\s*[:：]\s+", re.UNICODE)
#: Sentence ends (Latin and CJK), and what a question sentence ends with.
_SENTENCE = re.compile(r"[^.!?。！？]+[.!?。！？]*")
_QUESTION_END = ("?", "？")
#: Trailing bracketed annotations (e.g. ``[shares a photo: …]``) are not the speaker's sentences.
_TRAILING_NOTE = re.compile(r"\s*\[[^\]]*\]\s*$")


def lead_label(content: str) -> str | None:
    """The label a memory's text starts with (``"Name: …"``), None when it has none."""
    m = _LEAD_LABEL.match(content)
    if m is None or len(m.group(1).split()) > 4:
        return None
    return m.group(1).strip()


def question_share(content: str) -> float:
    """The share of the memory's sentences (after its lead label, without trailing bracketed
    notes) that are questions, in [0, 1]."""
    label = _LEAD_LABEL.match(content)
    body = content[label.end() :] if label is not None and lead_label(content) else content
    body = _TRAILING_NOTE.sub("", body).strip()
    sentences: list[str] = [s.strip() for s in _SENTENCE.findall(body) if s.strip()]
    if not sentences:
        return 0.0
    asks = sum(1 for s in sentences if s.endswith(_QUESTION_END))
    return asks / len(sentences)


def names_label(query: str, label: str) -> bool:
    """Whether ``query`` names ``label`` (case-insensitive; as a whole word where the label is
    written in letters with word boundaries, as a substring for unspaced scripts like Chinese)."""
    q, lab = query.casefold(), label.casefold()
    if not lab:
        return False
    if lab.isascii():
        return re.search(rf"(?<!\w){re.escape(lab)}(?!\w)", q) is not None
    return lab in q


@dataclass(frozen=True, slots=True)
class RescoreParams:
    """Query-time rescoring of the best ``depth`` candidates from their text (see
    :func:`rescore`). The defaults were chosen on LoCoMo evidence recall of the *tuning*
    conversations conv-26, conv-41, conv-43 only (an offline replay of the ranking's top 50, grid
    penalty 0–0.05 × subject 0–0.08: a plateau 0.775–0.779 around the chosen point, 0.754 without);
    docs/concepts/ranking.md."""

    #: Subtracted per unit of a memory's question share: a memory that only asks states nothing
    #: that answers (its similarity to a question is partly the shared question form).
    question_penalty: float = 0.04
    #: Added when the memory is led by a label (a speaker: ``"Name: …"``) that the query names.
    subject_weight: float = 0.05
    #: How many of the best-ranked candidates are rescored (0 = off).
    depth: int = 50

    @property
    def enabled(self) -> bool:
        return self.depth > 0 and (self.question_penalty > 0 or self.subject_weight > 0)


class RescoreCue(NamedTuple):
    """What rescoring reads of a memory's text, computed once per text (a store may keep it beside
    the ranking fields so that a search reads no text to rescore: ``Store.rescore_cues``)."""

    #: The label the text starts with (:func:`lead_label`), None without one.
    label: str | None
    #: The share of its sentences that are questions (:func:`question_share`).
    question_share: float


#: The cue of a text with neither a lead label nor a question (most texts: one shared object).
NO_CUE: Final = RescoreCue(None, 0.0)


def rescore_cue(content: str) -> RescoreCue:
    """The :class:`RescoreCue` of a memory's text."""
    label, share = lead_label(content), question_share(content)
    return NO_CUE if label is None and share == 0.0 else RescoreCue(label, share)


def rescore_cues(query: str, cues: Sequence[RescoreCue], params: RescoreParams) -> npt.NDArray[np.float64]:
    """What reading each memory's text adds to its evidence, from its :class:`RescoreCue`:
    ``subject_weight`` when its lead label is named by the query, minus ``question_penalty`` ×
    its question share. Aligned with ``cues``; it reorders, relevance itself is never changed."""
    out = np.zeros(len(cues), dtype=np.float64)
    named: dict[str, bool] = {}  # (a conversation's few speakers lead most candidates)
    for i, (label, share) in enumerate(cues):
        adj = 0.0
        if params.subject_weight > 0 and label is not None:
            hit = named.get(label)
            if hit is None:
                hit = named[label] = names_label(query, label)
            if hit:
                adj += params.subject_weight
        if params.question_penalty > 0:
            adj -= params.question_penalty * share
        out[i] = adj
    return out


def rescore(query: str, contents: Sequence[str], params: RescoreParams) -> npt.NDArray[np.float64]:
    """:func:`rescore_cues` of the texts ``contents`` (aligned with them)."""
    return rescore_cues(query, [rescore_cue(text) for text in contents], params)


def rrf_order(model_ranked: Sequence[int], c: float = 10.0) -> list[int]:
    """The reranked order of a head of ``n`` results: by reciprocal rank fusion of each result's
    own rank ``i`` and its cross-encoder rank ``model_ranked.index(i)`` (both 0-based here),
    ``1/(c+i) + 1/(c+j)``, ties by the own rank. ``model_ranked`` lists the head's positions
    best first by the cross-encoder. c = 10 was chosen on the LoCoMo tuning conversations
    (conv-26/41/43): the best c there at every depth from 20 to 40 (depth 30: R@10 0.818 against
    0.814 at c = 30, a difference within the noise of 482 questions)."""
    n = len(model_ranked)
    model_rank = [0] * n
    for j, i in enumerate(model_ranked):
        model_rank[i] = j
    fused = [1.0 / (c + i) + 1.0 / (c + model_rank[i]) for i in range(n)]
    return sorted(range(n), key=lambda i: (-fused[i], i))


def model_ranking(logits: Sequence[float | None]) -> list[int]:
    """The cross-encoder's ranking of a head, best first, as positions: the scored results
    (a logit) fill, in logit order (ties by position), the places the scored results hold; a
    result without a logit (not English) keeps its own place."""
    scored = [i for i, x in enumerate(logits) if x is not None]
    by_logit = sorted(scored, key=lambda i: (-float(logits[i] or 0.0), i))
    out = list(range(len(logits)))
    for place, i in zip(scored, by_logit, strict=True):
        out[place] = i
    return out
