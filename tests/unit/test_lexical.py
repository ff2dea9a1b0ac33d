"""The lexical (BM25) encoder: tokenisation in English, Chinese and mixed text, and its weights."""

import math

import pytest

from engram_server.adapters.lexical import Bm25Encoder, tokenize


def test_english_is_lowercased_stemmed_and_stopped() -> None:
    assert tokenize("She was Researching adoption agencies") == ["research", "adopt", "agenc"]
    assert tokenize("researched")[0] == tokenize("researching")[0] == "research"
    assert tokenize("I don't know what it is") == ["know"]  # stop words, contractions included


def test_chinese_is_segmented_with_search_mode_words() -> None:
    terms = tokenize("我喜欢在北京的咖啡馆写代码")
    assert {"喜欢", "北京", "咖啡", "咖啡馆", "代码"} <= set(terms)
    assert "的" not in terms and "我" not in terms  # function words dropped


def test_mixed_text_and_full_width_characters() -> None:
    terms = tokenize("用户偏好 Python 和 ＰｏｓｔｇｒｅＳＱＬ 数据库")
    assert "python" in terms and "postgresql" in terms
    assert {"用户", "偏好", "数据库"} <= set(terms)


def test_documents_get_saturated_bm25_weights_and_queries_unit_weights() -> None:
    enc = Bm25Encoder(k1=1.2, b=0.75, avgdl=20.0)
    doc = enc.encode_document("coffee coffee tea")
    assert len(doc.indices) == 2 and list(doc.indices) == sorted(doc.indices)
    norm = 1.2 * (1 - 0.75 + 0.75 * 3 / 20.0)
    assert sorted(doc.values) == pytest.approx(sorted([2 * 2.2 / (2 + norm), 1 * 2.2 / (1 + norm)]))
    q = enc.encode_query("Coffee? coffee!")
    assert q.values == (1.0,) and set(q.indices) <= set(doc.indices)
    assert not enc.encode_query("the of and")  # nothing but stop words: empty


def test_indices_are_stable_across_processes() -> None:
    # CRC-32 of the UTF-8 term: the stored vectors must not depend on Python's hash seed.
    assert Bm25Encoder().encode_query("python").indices == (0xA4D4B8B8,)  # zlib.crc32(b"python")
    assert all(0 <= i < 2**32 for i in Bm25Encoder().encode_document("北京 咖啡馆 research").indices)
    assert not math.isnan(sum(Bm25Encoder().encode_document("x " * 500).values))


def test_a_search_reuses_the_bm25_vector_of_a_recent_query_text() -> None:
    """A search's query BM25 vector is the encoder's for its text, encoded once while the text is
    among the recent ones (a bounded LRU), again once it has been pushed out."""
    from collections import OrderedDict  # noqa: PLC0415
    from types import SimpleNamespace  # noqa: PLC0415
    from typing import Any, cast  # noqa: PLC0415

    from engram_server.domain.service import searching  # noqa: PLC0415

    enc = Bm25Encoder()
    asked: list[str] = []

    class Counting:
        def encode_query(self, text: str) -> object:
            asked.append(text)
            return enc.encode_query(text)

    svc = cast(Any, SimpleNamespace(_lexical=Counting(), _sparse_cache=OrderedDict()))
    first = searching._Query(svc, "Where did Bob travel in May?").sparse()
    assert first == enc.encode_query("Where did Bob travel in May?")
    assert searching._Query(svc, "Where did Bob travel in May?").sparse() is first
    assert asked == ["Where did Bob travel in May?"]
    for i in range(searching._SPARSE_CACHE_ENTRIES):
        searching._Query(svc, f"question {i}").sparse()
    assert len(svc._sparse_cache) == searching._SPARSE_CACHE_ENTRIES
    assert searching._Query(svc, "Where did Bob travel in May?").sparse() == first
    assert asked.count("Where did Bob travel in May?") == 2
    assert searching._Query(cast(Any, SimpleNamespace(_lexical=None)), "anything").sparse() is None
