"""The write gate's rules exist once (:func:`engram_server.domain.gate.decide`): the live gate
(``Writing._gate``) and the answer to a replayed request (:func:`replayed_gate`) give the same
reasons on labelled cases."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from engram_server.domain.gate import decide, replayed_gate
from engram_server.domain.model import MemoryRecord, ScoredPoint
from engram_server.domain.service.commands import GateReason, Policy, Similar
from engram_server.domain.service.writing import Writing

_N = GateReason.NONE
_CS = GateReason.CONFLICTING_SPECIFICS
_AD = GateReason.ALLOW_DUPLICATE

#: (new text, [(stored text, calibrated similarity)], allow_duplicate, the duplicate's index or
#: None, each candidate's reason most similar first, the response's reason).
CASES: list[tuple[str, list[tuple[str, float]], bool, int | None, list[GateReason], GateReason]] = [
    # an exact copy (normalised) and the embedding's duplicate
    ("The user went for a 5 km run.", [("the user went for a 5 km run", 0.99)], False, 0, [_N], _N),
    ("The user went for a 5 km run.", [("the user went for a 5 km run", 0.99)], True, 0, [_AD], _AD),
    # a changed number above the threshold: a different fact, written and flagged
    (
        "Purchase order 7713 was approved on June 2.",
        [("Purchase order 7731 was approved on June 2.", 0.97)],
        False,
        None,
        [_CS],
        _CS,
    ),
    # a conflicting candidate first, then the duplicate below it
    (
        "On June 2, purchase order 7731 was approved.",
        [
            ("Purchase order 7713 was approved on June 2.", 0.96),
            ("Purchase order 7731 was approved on June 2.", 0.95),
        ],
        True,
        1,
        [_CS, _AD],
        _AD,
    ),
    # opposite words (meaning_conflicts) above the threshold
    ("Omar sold a second monitor.", [("Omar bought a second monitor.", 0.97)], False, None, [_CS], _CS),
    ("Omar sold a second monitor.", [("Omar bought a second monitor.", 0.97)], True, None, [_CS], _CS),
    # the same content words under the threshold: same_words
    (
        "The team uses Postgres for new services.",
        [("For new services, the team uses Postgres.", 0.86)],
        False,
        0,
        [GateReason.SAME_WORDS],
        GateReason.SAME_WORDS,
    ),
    (
        "The team uses Postgres for new services.",
        [("For new services, the team uses Postgres.", 0.86)],
        True,
        0,
        [_AD],
        _AD,
    ),
    # a translation far under the threshold
    (
        "The user can speak French.",
        [("用户会说法语。", 0.55)],
        False,
        0,
        [GateReason.TRANSLATION],
        GateReason.TRANSLATION,
    ),
    ("The user can speak French.", [("用户会说法语。", 0.55)], True, 0, [_AD], _AD),
    ("The user can speak German.", [("用户会说法语。", 0.55)], True, None, [_N], _N),
    # the near zone: a changed specific is named, a reworded different fact is not
    (
        "Room 211 is booked for the design review.",
        [
            ("Room 210 is booked for the design review.", 0.88),
            ("Room 211 has a projector for the review.", 0.72),
        ],
        True,
        None,
        [_CS, _N],
        _N,
    ),
    ("The user likes tea.", [("The user owns a bicycle.", 0.4)], False, None, [_N], _N),
]


def _record(i: int, content: str) -> MemoryRecord:
    return MemoryRecord(id=f"m{i}", collection="c", content=content, created_at=1.0)


def _live(
    new: str, stored: list[tuple[str, float]], allow: bool, policy: Policy
) -> tuple[list[Similar], Any]:
    """``Writing._gate`` itself, on hits whose raw score is the calibrated similarity."""
    fake = SimpleNamespace(policy=policy, _cal=SimpleNamespace(similarity=lambda raw: raw))
    hits = [ScoredPoint(_record(i, text), sim) for i, (text, sim) in enumerate(stored)]
    vector = np.zeros(4, dtype=np.float32)
    return Writing._gate(fake, "c", hits, vector, new, allow_duplicate=allow)  # type: ignore[arg-type]


@pytest.mark.parametrize("case", CASES)
def test_the_live_gate_and_the_replay_agree(
    case: tuple[str, list[tuple[str, float]], bool, int | None, list[GateReason], GateReason],
) -> None:
    new, stored, allow, dup, reasons, reason = case
    policy = Policy()
    similar, top = _live(new, stored, allow, policy)
    assert [s.reason for s in similar] == reasons
    assert (None if top is None else similar.index(top)) == dup
    live = decide(new, [Similar(s.record, s.similarity) for s in similar], policy, allow_duplicate=allow)
    assert live.reason == reason
    assert list(live.near) == similar
    if top is not None and not allow:
        return  # refused: nothing written, nothing to replay
    # The memory keeps the near duplicates (and the allowed duplicate) with their similarities; a
    # replay derives the reasons again from them.
    kept = [s for s in similar if s.similarity >= policy.near_duplicate_threshold or s is top]
    bare = [Similar(s.record, s.similarity) for s in kept]
    near, replay_reason = replayed_gate(new, bare, policy, allow_duplicate=allow)
    assert list(near) == kept
    assert replay_reason == reason


def test_a_replay_without_allow_duplicate_names_no_duplicate_even_if_the_rules_would_now() -> None:
    # Written when same_words did not reach this pair (a higher restatement threshold then): the
    # replay answers what the first call answered, not what the gate would say now.
    near = [Similar(_record(0, "For new services, the team uses Postgres."), 0.86)]
    out, reason = replayed_gate(
        "The team uses Postgres for new services.", near, Policy(), allow_duplicate=False
    )
    assert [s.reason for s in out] == [_N]
    assert reason == _N
