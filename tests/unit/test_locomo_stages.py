"""eval/locomo_stages.py: the offline replay's BM25 and pool are the server's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engram_server.adapters.lexical import Bm25Encoder, tokenize
from eval.locomo_stages import MODEL_ID, Sim

TEXTS = [
    "Ann: I adopted a puppy named Rex last week.",
    "Bob: Nice! What breed is Rex?",
    "Ann: A beagle. He loves the park.",
    "Bob: I went hiking in the mountains.",
    "Ann: The mountains sound lovely.",
    "Bob: We should go to the park together.",
]


def _conv(cos: list[float], bm25: list[float]) -> dict[str, object]:
    ids = [f"m{i}" for i in range(len(TEXTS))]
    return {
        "now": 10_000.0,
        "dia": {m: f"D1:{i + 1}" for i, m in enumerate(ids)},
        "text": dict(zip(ids, TEXTS, strict=True)),
        "created": {m: 1_000.0 * (i // 3) for i, m in enumerate(ids)},
        "questions": [
            {
                "q": "Which park does Rex like?",
                "cat": 4,
                "ev": ["D1:3"],
                "ids": ids,
                "cos": np.asarray(cos),
                "bm25": np.asarray(bm25),
            }
        ],
    }


def test_bm25_is_the_encoders_saturated_tf_times_the_collections_idf() -> None:
    sim = Sim(_conv([0.8] * 6, [0.0] * 6), MODEL_ID)
    enc = Bm25Encoder()
    got = sim.bm25({"park": 1.0})
    n, df = len(TEXTS), sum("park" in tokenize(t) for t in TEXTS)
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    want = []
    for t in TEXTS:
        doc = enc.encode_document(t)
        want.append(
            idf
            * dict(zip(doc.indices, doc.values, strict=True)).get(enc.encode_query("park").indices[0], 0.0)
        )
    assert got.tolist() == pytest.approx(want)
    assert got[2] > 0 and got[5] > 0 and got[0] == 0


def test_the_pool_is_the_union_of_the_two_sides_best() -> None:
    cos = [0.90, 0.85, 0.70, 0.60, 0.50, 0.40]
    bm25 = [0.0, 0.0, 0.0, 0.0, 0.0, 3.0]
    sim = Sim(_conv(cos, bm25), MODEL_ID)
    q = sim.conv["questions"][0]
    assert sorted(sim.rank(q, n_dense=2, n_lex=1)) == [0, 1, 5]  # dense top 2 ∪ BM25 top 1
    assert sorted(sim.rank(q, n_dense=6, n_lex=1)) == list(range(6))
    assert len(sim.rank(q, n_dense=6, n_lex=1, depth=3)) == 3
