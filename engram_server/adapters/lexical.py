"""Lexical (BM25) sparse vectors for hybrid retrieval, in English, Chinese and mixed text.

Tokenisation:

* text is lower-cased (NFKC-normalised first, so full-width letters and digits match ASCII ones);
* runs of CJK ideographs are segmented into words with jieba (``rjieba``, the Rust port, in its
  "search" mode, which also emits the shorter words inside long ones: 咖啡馆 → 咖啡, 咖啡馆);
* other runs of letters and digits are words; English stop words are dropped and the rest are
  Snowball-stemmed (``PyStemmer``), so "researching", "research" and "researched" meet;
* Chinese function words (的, 了, 是, …) are dropped as stop words too.

Sparse vectors: a term's index is the CRC-32 of its UTF-8 bytes (stable across processes, machines and
storage backends; a collision merges two terms, about one in 4·10⁹ pairs). A document's value for a
term is BM25's saturated term frequency ``tf·(k1 + 1) / (tf + k1·(1 − b + b·dl/avgdl))``; a query's
value is 1 for each distinct term. Qdrant multiplies in the inverse document frequency itself (the
sparse vector is created with the IDF modifier), computed over the collection at query time, so
the dot product it returns is the BM25 score. ``avgdl`` is a constant (memories are short and
written one at a time, so there is no corpus to average over when a memory is written).

Pure CPU, no I/O, no model files: the jieba dictionary ships inside ``rjieba``.
"""

from __future__ import annotations

import re
import unicodedata
import zlib
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

import rjieba
import Stemmer

from engram_server.domain.model import SparseVector

__all__ = ["LEXICAL_ENCODER_ID", "Bm25Encoder", "tokenize"]

LEXICAL_ENCODER_ID = "bm25-v1"
"""Names the tokeniser + weighting; stored in each collection spec so a change is detectable."""

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002a6df"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+(?:['’][^\W_{_CJK}]+)*", re.UNICODE)
_IS_CJK = re.compile(rf"[{_CJK}]")

# The Snowball English stop list (a subset of NLTK's), as contractions appear after lower-casing.
_EN_STOP = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "aren't",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "can't",
        "cannot",
        "could",
        "couldn't",
        "did",
        "didn't",
        "do",
        "does",
        "doesn't",
        "doing",
        "don't",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "hadn't",
        "has",
        "hasn't",
        "have",
        "haven't",
        "having",
        "he",
        "he'd",
        "he'll",
        "he's",
        "her",
        "here",
        "here's",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "how's",
        "i",
        "i'd",
        "i'll",
        "i'm",
        "i've",
        "if",
        "in",
        "into",
        "is",
        "isn't",
        "it",
        "it's",
        "its",
        "itself",
        "let's",
        "me",
        "more",
        "most",
        "mustn't",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "ought",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "shan't",
        "she",
        "she'd",
        "she'll",
        "she's",
        "should",
        "shouldn't",
        "so",
        "some",
        "such",
        "than",
        "that",
        "that's",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "there's",
        "these",
        "they",
        "they'd",
        "they'll",
        "they're",
        "they've",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "wasn't",
        "we",
        "we'd",
        "we'll",
        "we're",
        "we've",
        "were",
        "weren't",
        "what",
        "what's",
        "when",
        "when's",
        "where",
        "where's",
        "which",
        "while",
        "who",
        "who's",
        "whom",
        "why",
        "why's",
        "will",
        "with",
        "won't",
        "would",
        "wouldn't",
        "you",
        "you'd",
        "you'll",
        "you're",
        "you've",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "s",
        "t",
        "d",
        "ll",
        "m",
        "re",
        "ve",
    ]
)
_ZH_STOP = frozenset(
    [
        "的",
        "了",
        "是",
        "在",
        "和",
        "与",
        "及",
        "或",
        "就",
        "都",
        "也",
        "还",
        "又",
        "而",
        "但",
        "并",
        "之",
        "其",
        "这",
        "那",
        "这个",
        "那个",
        "这些",
        "那些",
        "我",
        "你",
        "他",
        "她",
        "它",
        "我们",
        "你们",
        "他们",
        "她们",
        "吗",
        "呢",
        "吧",
        "啊",
        "呀",
        "嘛",
        "么",
        "着",
        "过",
        "得",
        "地",
        "把",
        "被",
        "给",
        "对",
        "从",
        "向",
        "于",
        "以",
        "为",
        "所",
        "很",
        "太",
        "更",
        "最",
        "个",
        "些",
        "什么",
        "怎么",
        "如何",
        "哪",
        "哪里",
        "哪个",
        "谁",
        "多少",
        "几",
        "有",
        "没有",
        "不",
        "没",
        "要",
        "会",
        "能",
        "可以",
    ]
)


@lru_cache(maxsize=1)
def _stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("english")


def tokenize(text: str) -> list[str]:
    """The index terms of ``text``, in order, repeats kept (see the module docstring)."""
    stem = _stemmer().stemWord
    out: list[str] = []
    for match in _TOKEN.finditer(unicodedata.normalize("NFKC", text).lower()):
        word = match.group(0)
        if _IS_CJK.match(word):
            out += [w for w in rjieba.cut_for_search(word) if w.strip() and w not in _ZH_STOP]
            continue
        word = word.replace("’", "'")
        if word in _EN_STOP:
            continue
        word = word.replace("'", "")
        out.append(stem(word))
    return out


def _index(term: str) -> int:
    return zlib.crc32(term.encode("utf-8"))


class Bm25Encoder:
    """Text → BM25 sparse vectors (document side: saturated tf; query side: 1 per term)."""

    def __init__(self, *, k1: float = 1.2, b: float = 0.75, avgdl: float = 20.0) -> None:
        if k1 <= 0 or not 0 <= b <= 1 or avgdl <= 0:
            raise ValueError("BM25 needs k1 > 0, 0 ≤ b ≤ 1 and avgdl > 0")
        self._k1 = k1
        self._b = b
        self._avgdl = avgdl

    @property
    def encoder_id(self) -> str:
        return LEXICAL_ENCODER_ID

    def encode_document(self, text: str) -> SparseVector:
        terms = tokenize(text)
        if not terms:
            return SparseVector((), ())
        norm = self._k1 * (1 - self._b + self._b * len(terms) / self._avgdl)
        weights: dict[int, float] = {}
        for term, tf in Counter(terms).items():
            idx = _index(term)
            weights[idx] = weights.get(idx, 0.0) + tf * (self._k1 + 1) / (tf + norm)
        return _sparse(weights.items())

    def encode_query(self, text: str) -> SparseVector:
        return _sparse((_index(t), 1.0) for t in dict.fromkeys(tokenize(text)))


def _sparse(items: Iterable[tuple[int, float]]) -> SparseVector:
    pairs = sorted(dict(items).items())
    return SparseVector(tuple(i for i, _ in pairs), tuple(v for _, v in pairs))
